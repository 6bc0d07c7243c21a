#include "server/ops/stats.h"

#include <array>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ferry {
namespace {

constexpr std::array<const char*, 2> kSides = {"left", "right"};

#define TEST_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                   \
  COUNTER(hits, "test_hits_total", "Hits.")                                     \
  COUNTER_BY(sides, "test_sides_total", "Hits by side.", "side", kSides)        \
  GAUGE(level, "test_level", "A level.")                                        \
  READ("test_read", "Read at the scrape.", kGauge, read_value)                  \
  READ_BY("test_read_by", "Read at the scrape, by colour.", kCounter, "colour", \
          (std::vector<std::pair<std::string, double>>{{"red", 1}, {"blue", read_value}}))

struct TestStats {
  FERRY_STATS_FIELDS(TEST_STATS)
};

const MetricFamilySamples& Find(const std::vector<MetricFamilySamples>& families,
                                const std::string& name) {
  for (const MetricFamilySamples& f : families) {
    if (f.name == name) return f;
  }
  ADD_FAILURE() << name << " missing";
  return families.front();
}

TEST(StatsTest, OneListGivesTheFieldsAndEveryFamilyInItsOrder) {
  TestStats stats;
  stats.hits.Add();
  stats.hits.Add(2);
  stats.sides[1].Add(5);
  stats.level.Add(7);
  stats.level.Sub(3);
  const double read_value = 9;
  std::vector<MetricFamilySamples> out;
  FERRY_APPEND_STATS(TEST_STATS, {&stats}, &out);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].name, "test_hits_total");
  EXPECT_EQ(out[0].help, "Hits.");
  EXPECT_EQ(out[0].kind, MetricKind::kCounter);
  EXPECT_EQ(out[0].samples[0].value, 3);
  const MetricFamilySamples& sides = Find(out, "test_sides_total");
  ASSERT_EQ(sides.samples.size(), 2u);
  EXPECT_EQ(sides.samples[0].labels, (MetricLabels{{"side", "left"}}));
  EXPECT_EQ(sides.samples[0].value, 0);
  EXPECT_EQ(sides.samples[1].labels, (MetricLabels{{"side", "right"}}));
  EXPECT_EQ(sides.samples[1].value, 5);
  EXPECT_EQ(Find(out, "test_level").kind, MetricKind::kGauge);
  EXPECT_EQ(Find(out, "test_level").samples[0].value, 4);
  EXPECT_EQ(Find(out, "test_read").samples[0].value, 9);
  const MetricFamilySamples& by = Find(out, "test_read_by");
  EXPECT_EQ(by.kind, MetricKind::kCounter);
  ASSERT_EQ(by.samples.size(), 2u);
  EXPECT_EQ(by.samples[1].labels, (MetricLabels{{"colour", "blue"}}));
  EXPECT_EQ(by.samples[1].value, 9);
}

TEST(StatsTest, SeveralStatsAreSummed) {
  TestStats a;
  TestStats b;
  // Counters and gauges take adds from any thread.
  std::thread ta([&] {
    for (int i = 0; i < 1000; ++i) a.hits.Add();
  });
  std::thread tb([&] {
    for (int i = 0; i < 1000; ++i) a.hits.Add();
    b.sides[0].Add(4);
    b.level.Set(-2);
  });
  ta.join();
  tb.join();
  a.sides[0].Add(1);
  const double read_value = 0;
  std::vector<MetricFamilySamples> out;
  std::vector<const TestStats*> all = {&a, &b};
  FERRY_APPEND_STATS(TEST_STATS, all, &out);
  EXPECT_EQ(Find(out, "test_hits_total").samples[0].value, 2000);
  EXPECT_EQ(Find(out, "test_sides_total").samples[0].value, 5);
  EXPECT_EQ(Find(out, "test_level").samples[0].value, -2);
}

#define TEST_READS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY) \
  READ("test_size", "A size.", kGauge, size)

TEST(StatsTest, AListOfReadsNeedsNoStats) {
  const size_t size = 12;
  std::vector<MetricFamilySamples> out;
  FERRY_APPEND_READS(TEST_READS, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "test_size");
  EXPECT_EQ(out[0].samples[0].value, 12);
}

}  // namespace
}  // namespace ferry
