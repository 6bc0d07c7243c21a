// Push-based shuffle's part of a registration, read as Spark's own service reads it,
// and Ferry's one difference: a merge dir must be one plain path component.
#include "common/spark/merge_dirs.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ferry::spark {
namespace {

constexpr char kManager[] = "org.apache.spark.shuffle.sort.SortShuffleManager";

absl::StatusOr<std::optional<MergeDirInfo>> Parse(const std::string& suffix) {
  return ParseMergeDirInfo(std::string(kManager) + suffix);
}

TEST(MergeDirsTest, WhatSparksExecutorsSendIsRead) {
  // BlockManager's string, its two stray braces included.
  auto info = Parse(R"(:{"mergeDir":"merge_manager_1","attemptId":"1"}}})");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_TRUE(info->has_value());
  EXPECT_EQ((*info)->merge_dir, "merge_manager_1");
  EXPECT_EQ((*info)->attempt_id, 1);
  // No attempt id (an application without attempts): -1, as Spark's UNDEFINED_ATTEMPT_ID.
  info = Parse(R"(:{"mergeDir":"merge_manager"})");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->attempt_id, -1);
  // The last of a name wins, as in Jackson's map.
  info = Parse(R"(:{"mergeDir":"a","mergeDir":"b"})");
  ASSERT_TRUE(info.ok() && info->has_value());
  EXPECT_EQ((*info)->merge_dir, "b");
}

TEST(MergeDirsTest, NoPushPartIsNone) {
  for (const char* suffix :
       {"", ":not json", ":[1]", R"(:{"mergeDir":["a"]})", R"(:{"mergeDir":"a","x":{"y":1}})"}) {
    auto info = Parse(suffix);
    ASSERT_TRUE(info.ok()) << suffix;
    EXPECT_FALSE(info->has_value()) << suffix;
  }
  // Nested past the bound: none, and no deep recursion on the way.
  auto deep = Parse(":{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  ASSERT_TRUE(deep.ok());
  EXPECT_FALSE(deep->has_value());
}

TEST(MergeDirsTest, ABadPushPartIsRefused) {
  for (const auto& [suffix, why] : {
           std::pair<std::string, std::string>{R"(:{"attemptId":"1"})", "no mergeDir"},
           {R"(:{"mergeDir":"m","attemptId":"one"})", "is not an int"},
           {R"(:{"mergeDir":"../../etc"})", "plain path component"},
           {R"(:{"mergeDir":"a/b"})", "plain path component"},
           {R"(:{"mergeDir":".."})", "plain path component"},
           {R"(:{"mergeDir":""})", "plain path component"},
       }) {
    auto info = Parse(suffix);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << suffix;
    EXPECT_TRUE(absl::StrContains(info.status().message(), why)) << info.status();
  }
}

TEST(MergeDirsTest, MergedFilesAreNamedAsSparkNamesThem) {
  EXPECT_EQ(MergedFileName("application_1_0001", 3, 0, 17, "data"),
            "shuffleMerged_application_1_0001_3_0_17.data");
}

}  // namespace
}  // namespace ferry::spark
