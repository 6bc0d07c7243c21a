#include "common/spark/layout.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ferry::spark {
namespace {

// Expected values printed by Java 17's String.hashCode and String.format on this machine
// (Math.abs, Integer.MIN_VALUE -> 0, 3 local dirs, 64 subdirectories).
TEST(SparkLayoutTest, HashesAsJavaDoes) {
  EXPECT_EQ(NonNegativeHash("shuffle_0_0_0.data"), 581811660);
  EXPECT_EQ(NonNegativeHash("shuffle_3_1000_0.data"), 1892022858);  // hashCode -1892022858
  EXPECT_EQ(NonNegativeHash("shuffle_12_345678901234_0.checksum.ADLER32"), 1885163405);
  EXPECT_EQ(NonNegativeHash("polygenelubricants"), 0);  // hashCode Integer.MIN_VALUE
}

TEST(SparkLayoutTest, PlacesFilesAsExecutorDiskUtilsDoes) {
  const std::vector<std::string> dirs = {"/d0", "/d1", "/d2"};
  EXPECT_EQ(*ExecutorFilePath(dirs, 64, "shuffle_0_0_0.data"), "/d0/04/shuffle_0_0_0.data");
  EXPECT_EQ(*ExecutorFilePath(dirs, 64, "shuffle_0_0_0.index"), "/d2/3a/shuffle_0_0_0.index");
  EXPECT_EQ(*ExecutorFilePath(dirs, 64, "shuffle_3_1000_0.data"), "/d0/2e/shuffle_3_1000_0.data");
  EXPECT_EQ(*ExecutorFilePath(dirs, 64, "shuffle_3_1000_0.index"), "/d2/2c/shuffle_3_1000_0.index");
  EXPECT_EQ(*ExecutorFilePath(dirs, 64, "rdd_1_2"), "/d0/1d/rdd_1_2");
  EXPECT_EQ(*ExecutorFilePath(dirs, 64, "polygenelubricants"), "/d0/00/polygenelubricants");
  EXPECT_FALSE(ExecutorFilePath({}, 64, "x").ok());
  EXPECT_FALSE(ExecutorFilePath(dirs, 0, "x").ok());
  EXPECT_FALSE(ExecutorFilePath(dirs, 64, "../etc").ok());
  EXPECT_FALSE(ExecutorFilePath(dirs, 64, "..").ok());
  EXPECT_FALSE(ExecutorFilePath(dirs, 64, "caf\xc3\xa9").ok());
}

TEST(SparkLayoutTest, ParsesBlockIds) {
  auto one = ParseBlockId("shuffle_3_1000_5");
  ASSERT_TRUE(one.ok());
  const auto& b = std::get<ShuffleBlockId>(*one);
  EXPECT_EQ(b.shuffle_id, 3);
  EXPECT_EQ(b.map_id, 1000);
  EXPECT_EQ(b.start_reduce_id, 5);
  EXPECT_EQ(b.end_reduce_id, 6);
  EXPECT_EQ(ShuffleBlockName(b), "shuffle_3_1000_5");
  auto batch = ParseBlockId("shuffle_3_1000_2_6");
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(std::get<ShuffleBlockId>(*batch).end_reduce_id, 6);
  EXPECT_EQ(ShuffleBlockName(std::get<ShuffleBlockId>(*batch)), "shuffle_3_1000_2_6");
  auto rdd = ParseBlockId("rdd_1_2");
  ASSERT_TRUE(rdd.ok());
  EXPECT_EQ(std::get<RddBlockId>(*rdd).split_index, 2);
  for (const char* bad :
       {"", "shuffle", "shuffle_1_2", "shuffle_1_2_3_4_5", "shuffle_a_2_3", "shuffle_-1_2_3",
        "shuffle_1_2_6_2", "shuffle_1_2_3_3", "shuffle_1_2_2147483647", "shuffleChunk_1_2_3_4",
        "rdd_x_1", "broadcast_1"}) {
    EXPECT_FALSE(ParseBlockId(bad).ok()) << bad;
  }
}

TEST(SparkLayoutTest, ParsesTheNamesOfAMapOutputsFiles) {
  for (const char* name : {"shuffle_3_1000_0.data", "shuffle_3_1000_0.index"}) {
    absl::StatusOr<ShuffleBlockId> file = ParseShuffleFileName(name);
    ASSERT_TRUE(file.ok()) << name << ": " << file.status();
    EXPECT_EQ(file->shuffle_id, 3);
    EXPECT_EQ(file->map_id, 1000);
    EXPECT_EQ(file->start_reduce_id, 0);
  }
  for (const char* bad : {"shuffle_3_1000_0", "shuffle_3_1000_0.checksum.ADLER32",
                          "shuffle_3_1000_0_2.data", "shuffle_3_1000.data", "rdd_1_2.data",
                          "shuffle_3_1000_0.data/../x", "../shuffle_3_1000_0.data", ".data",
                          "shuffle_-3_1000_0.index", "shuffle_3_1000_0.index.data.index"}) {
    EXPECT_FALSE(ParseShuffleFileName(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ferry::spark
