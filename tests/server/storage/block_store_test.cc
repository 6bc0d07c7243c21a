#include "server/storage/block_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/shuffle_writer.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

class BlockStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    app_dir_ = dir_.path() + "/app";
    ASSERT_EQ(::mkdir(app_dir_.c_str(), 0755), 0);
  }

  void Write(int64_t map, const std::vector<std::string>& partitions) {
    auto writer = ShuffleWriter::Create(app_dir_, 0, map, ChecksumAlgorithm::kCrc32c);
    ASSERT_TRUE(writer.ok());
    for (size_t r = 0; r < partitions.size(); ++r) {
      ASSERT_TRUE(writer->Write(static_cast<int32_t>(r), partitions[r]).ok());
    }
    ASSERT_TRUE(writer->Commit(static_cast<int32_t>(partitions.size())).ok());
  }

  std::unique_ptr<BlockStore> Open(size_t max_open_files = 16, size_t max_data_files = 64) {
    auto store = BlockStore::Open({.data_dir = dir_.path(),
                                   .max_cached_map_outputs = max_open_files,
                                   .max_data_files = max_data_files});
    EXPECT_TRUE(store.ok());
    return *std::move(store);
  }

  testing::TempDir dir_;
  std::string app_dir_;
};

TEST_F(BlockStoreTest, ResolvesSegmentsWithChecksums) {
  Write(0, {"aaa", "bbbbb", ""});
  auto store = Open();
  auto r = store->Resolve("app", {0, 0, 1, 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->block.offset, 3u);
  EXPECT_EQ(r->block.length, 5u);
  EXPECT_TRUE(r->block.has_checksum);
  EXPECT_EQ(r->block.file->path, "app/shuffle_0_0_0.data");
  EXPECT_EQ(r->index->partitions(), 3u);
  EXPECT_EQ(store->Resolve("app", {0, 0, 2, 4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Resolve("nope", {0, 0, 0, 1}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Resolve("../x", {0, 0, 0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(BlockStoreTest, ReplacedMapOutputIsReloaded) {
  Write(0, {"aaa", "bbbbb"});
  auto store = Open();
  ASSERT_EQ(store->Resolve("app", {0, 0, 1, 2})->block.length, 5u);
  Write(0, {"a", "bbbbbbbbb"});
  auto again = store->Resolve("app", {0, 0, 1, 2});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->block.offset, 1u);
  EXPECT_EQ(again->block.length, 9u);
}

// `ferry ls` without --app: the data dir's apps, by id, with their shuffles, map outputs
// and data bytes; what is no app (a symlink, a file, an invalid id, a dir without an
// index) is left out, and the answer is bounded.
TEST_F(BlockStoreTest, ListsTheAppsOfTheDataDir) {
  Write(0, {"aaa", "bbbbb"});
  Write(1, {"cc"});
  ASSERT_EQ(::mkdir((dir_.path() + "/b-app").c_str(), 0755), 0);
  auto other = ShuffleWriter::Create(dir_.path() + "/b-app", 3, 0, ChecksumAlgorithm::kNone);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(other->Write(0, "0123456789").ok());
  ASSERT_TRUE(other->Commit(1).ok());
  ASSERT_EQ(::symlink(app_dir_.c_str(), (dir_.path() + "/linked").c_str()), 0);
  for (const char* not_an_app : {"/empty", "/.hidden"}) {
    ASSERT_EQ(::mkdir((dir_.path() + not_an_app).c_str(), 0755), 0);
  }
  auto store = Open();
  bool truncated = true;
  absl::StatusOr<std::vector<AppInfo>> apps = store->ListApps(10, &truncated);
  ASSERT_TRUE(apps.ok()) << apps.status();
  EXPECT_FALSE(truncated);
  ASSERT_EQ(apps->size(), 2u);
  EXPECT_EQ((*apps)[0].app_id, "app");
  EXPECT_EQ((*apps)[0].shuffles, 1u);
  EXPECT_EQ((*apps)[0].map_outputs, 2u);
  EXPECT_EQ((*apps)[0].data_bytes, 10u);
  EXPECT_EQ((*apps)[1].app_id, "b-app");
  EXPECT_EQ((*apps)[1].data_bytes, 10u);

  apps = store->ListApps(1, &truncated);
  ASSERT_TRUE(apps.ok());
  EXPECT_TRUE(truncated);
  ASSERT_EQ(apps->size(), 1u);
  EXPECT_EQ((*apps)[0].app_id, "app");
}

TEST_F(BlockStoreTest, AppDirThatIsASymlinkIsNotFound) {
  Write(0, {"aaa"});
  ASSERT_EQ(::symlink(app_dir_.c_str(), (dir_.path() + "/linked").c_str()), 0);
  auto store = Open();
  EXPECT_EQ(store->Resolve("linked", {0, 0, 0, 1}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(BlockStoreTest, DataFilesHeldByStreamsCountAgainstTheBound) {
  Write(0, {"a"});
  Write(1, {"b"});
  Write(2, {"c"});
  auto store = Open(/*max_open_files=*/1, /*max_data_files=*/2);
  auto held0 = store->Resolve("app", {0, 0, 0, 1});
  auto held1 = store->Resolve("app", {0, 1, 0, 1});
  ASSERT_TRUE(held0.ok() && held1.ok());
  EXPECT_EQ(store->cached_map_outputs(), 1u);
  EXPECT_EQ(store->open_files(), 2u);
  EXPECT_EQ(store->Resolve("app", {0, 2, 0, 1}).status().code(),
            absl::StatusCode::kResourceExhausted);
  held0->block.file.reset();
  held0->index.reset();
  EXPECT_TRUE(store->Resolve("app", {0, 2, 0, 1}).ok());
}

TEST_F(BlockStoreTest, DropStaleForgetsDeletedFiles) {
  Write(0, {"a"});
  auto store = Open();
  ASSERT_TRUE(store->Resolve("app", {0, 0, 0, 1}).ok());
  EXPECT_EQ(store->DropStale(), 0u);
  ASSERT_EQ(::unlink((app_dir_ + "/shuffle_0_0_0.data").c_str()), 0);
  EXPECT_EQ(store->DropStale(), 1u);
  EXPECT_EQ(store->open_files(), 0u);
}

}  // namespace
}  // namespace ferry
