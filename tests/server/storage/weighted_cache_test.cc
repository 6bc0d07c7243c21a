#include "server/storage/weighted_cache.h"

#include <string>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(WeightedCacheTest, EvictsTheLeastRecentlyUsedPastEitherBound) {
  WeightedCache<int, std::string> cache(/*max_entries=*/3, /*max_weight=*/100);
  EXPECT_EQ(cache.Insert(1, "one", 10), 0u);
  EXPECT_EQ(cache.Insert(2, "two", 10), 0u);
  EXPECT_EQ(cache.Insert(3, "three", 10), 0u);
  ASSERT_NE(cache.Find(1), nullptr);  // 1 is now the most recent; 2 the least
  EXPECT_EQ(cache.Insert(4, "four", 10), 1u);
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_EQ(*cache.Find(1), "one");
  EXPECT_EQ(cache.size(), 3u);
  // Past the weight: as many of the oldest as it takes.
  EXPECT_EQ(cache.Insert(5, "five", 85), 2u);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.weight(), 95u);
  EXPECT_NE(cache.Find(1), nullptr);
  EXPECT_NE(cache.Find(5), nullptr);
}

TEST(WeightedCacheTest, AnEntryHeavierThanTheBoundIsKeptAlone) {
  WeightedCache<int, int> cache(10, 50);
  cache.Insert(1, 1, 10);
  EXPECT_EQ(cache.Insert(2, 2, 500), 1u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(*cache.Find(2), 2);
}

TEST(WeightedCacheTest, ReplacingEraseAndEraseIfKeepTheWeightRight) {
  WeightedCache<std::string, int> cache(10, 1000);
  cache.Insert("a", 1, 100);
  cache.Insert("a", 2, 30);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.weight(), 30u);
  EXPECT_EQ(*cache.Find("a"), 2);
  cache.Insert("b", 3, 40);
  cache.Insert("c", 4, 50);
  EXPECT_TRUE(cache.Erase("b"));
  EXPECT_FALSE(cache.Erase("b"));
  EXPECT_EQ(cache.weight(), 80u);
  EXPECT_EQ(cache.EraseIf([](const std::string&, const int& v) { return v % 2 == 0; }), 2u);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.weight(), 0u);
  EXPECT_FALSE(cache.EvictOldest());
}

}  // namespace
}  // namespace ferry
