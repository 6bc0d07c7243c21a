// A disk that fails under a running server: one app's shuffle files on a real block
// device (an ext4 loop device, tests/testing/loop_disk.h) whose far region starts
// answering EIO, another app's on the disk the test runs on. Only the blocks in the bad
// region fail, each with an error that names the file and the device, sent before the
// block's header so the stream stays in frame; the device is marked unhealthy (server
// info, metrics) after repeated failures while the server stays SERVING; once the region
// reads again, so do its blocks, and the device is healthy again.
//
// Needs root (a loop device and a mount); skips, saying why, where there is none.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/shuffle_files.h"
#include "common/spark/layout.h"
#include "common/spark/wire.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/e2e/spark_raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/cold_file.h"
#include "tests/testing/command.h"
#include "tests/testing/loop_disk.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::LoopDisk;
using ::ferry::testing::TempDir;

constexpr char kColdApp[] = "app-on-the-failing-disk";
constexpr char kHotApp[] = "app-on-the-good-disk";

// Drops `path` from the page cache, so that serving it reads the device.
absl::Status EvictFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  return testing::Evict(fd.get());
}

class FailingDiskTest : public ::testing::TestWithParam<testing::ServerConfig> {
 protected:
  void SetUp() override {
    cold_dir_ = absl::StrCat(dir_.path(), "/", kColdApp);
    ASSERT_EQ(::mkdir(cold_dir_.c_str(), 0755), 0);
    absl::StatusOr<std::unique_ptr<LoopDisk>> disk =
        LoopDisk::Create(work_.path(), cold_dir_, uint64_t{64} << 20);
    if (absl::IsUnimplemented(disk.status())) GTEST_SKIP() << disk.status();
    ASSERT_TRUE(disk.ok()) << disk.status();
    disk_ = *std::move(disk);
    device_name_ = disk_->device().substr(disk_->device().rfind('/') + 1);  // "loop0"
  }

  std::string ColdData(int64_t map) const {
    return absl::StrCat(cold_dir_, "/", DataFileName(0, map));
  }
  // How errors name it: relative to the data dir.
  static std::string ColdDataName(int64_t map) {
    return absl::StrCat(kColdApp, "/", DataFileName(0, map));
  }

  // The cold app's map outputs are of shuffle 0, the hot app's of shuffle 1.
  std::vector<BlockLocation> Partitions(const std::string& target, int32_t shuffle, int64_t map,
                                        int32_t count) const {
    std::vector<BlockLocation> blocks;
    for (int32_t r = 0; r < count; ++r) blocks.push_back({target, {shuffle, map, r, r + 1}});
    return blocks;
  }

  // Fetches every block and checks every byte.
  void ExpectServed(const std::string& app, const std::vector<BlockLocation>& blocks) {
    auto fetched = client_.FetchToBuffers(app, blocks);
    ASSERT_TRUE(fetched.ok()) << app << ": " << fetched.status();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const BlockId& b = blocks[i].block;
      const std::string expected =
          data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id);
      const std::string& got = (*fetched)[i];
      const auto differ = std::mismatch(got.begin(), got.end(), expected.begin(), expected.end());
      EXPECT_TRUE(got == expected)
          << app << " block " << i << ": " << got.size() << " bytes of " << expected.size()
          << ", the first wrong at " << (differ.first - got.begin());
    }
  }

  std::optional<ferry::v1::DiskHealth> LoopDiskHealth() {
    auto info = client_.control().GetServerInfo(server_->control_target());
    EXPECT_TRUE(info.ok()) << info.status();
    if (!info.ok()) return std::nullopt;
    for (const ferry::v1::DiskHealth& d : info->disks()) {
      if (absl::StartsWith(d.name(), device_name_ + " ")) return d;
    }
    return std::nullopt;
  }

  double HealthyMetric() const {
    for (const MetricFamilySamples& family : server_->CollectMetrics()) {
      if (family.name != "ferry_disk_healthy") continue;
      for (const MetricSample& s : family.samples) {
        for (const auto& [key, value] : s.labels) {
          if (key == "disk" && absl::StartsWith(value, device_name_ + " ")) return s.value;
        }
      }
    }
    return -1;
  }

  // Destroyed in reverse: the server, then the filesystem, then the directories.
  TempDir work_;
  TempDir dir_;
  std::string cold_dir_;
  std::unique_ptr<LoopDisk> disk_;
  std::string device_name_;
  DataSet data_;
  std::unique_ptr<FerryServer> server_;
  ShuffleClient client_;
};

TEST_P(FailingDiskTest, OnlyTheBlocksOnTheBadRegionFailAndTheyServeAgainOnceItReads) {
  // Map 0 first, synced, so it lies in front of map 1 on the fresh filesystem; map 1's
  // partitions are one below the copy threshold, one spliced, one of several chunks.
  data_.AddMapOutput(dir_.path(), kColdApp, 0, 0, {5000, 300000});
  ::sync();
  const std::vector<size_t> bad_sizes = {1000, 300000, (size_t{2} << 20) + 7};
  data_.AddMapOutput(dir_.path(), kColdApp, 0, 1, bad_sizes);
  ::sync();
  data_.AddMapOutput(dir_.path(), kHotApp, 1, 0, {4096, 500000});
  absl::StatusOr<uint64_t> cut = disk_->FirstByteOnDevice(ColdData(1));
  ASSERT_TRUE(cut.ok()) << cut.status();
  absl::StatusOr<uint64_t> good_end = disk_->EndOnDevice(ColdData(0));
  ASSERT_TRUE(good_end.ok()) << good_end.status();
  ASSERT_LE(*good_end, *cut) << "map 0's data was not allocated in front of map 1's";
  for (int64_t map : {0, 1}) {
    absl::Status evicted = EvictFile(ColdData(map));
    ASSERT_TRUE(evicted.ok()) << evicted;
  }
  std::printf("map 1 starts at byte %llu of %s, map 0 ends at %llu\n",
              static_cast<unsigned long long>(*cut), disk_->device().c_str(),
              static_cast<unsigned long long>(*good_end));
  // The good disk's files too, where it keeps them on a disk at all.
  const absl::Status hot_evicted =
      EvictFile(absl::StrCat(dir_.path(), "/", kHotApp, "/", DataFileName(1, 0)));
  ASSERT_TRUE(hot_evicted.ok() || absl::IsFailedPrecondition(hot_evicted)) << hot_evicted;
  ASSERT_TRUE(disk_->FailFrom(*cut).ok());

  server_ = testing::StartServer(dir_.path(), GetParam());
  const std::string target = server_->control_target();
  ExpectServed(kHotApp, Partitions(target, 1, 0, 2));
  // The same device's good region still reads.
  ExpectServed(kColdApp, Partitions(target, 0, 0, 2));

  FetchOptions once;
  once.max_attempts = 1;
  for (int32_t r = 0; r < 3; ++r) {
    const std::vector<BlockLocation> one = {Partitions(target, 0, 1, 3)[r]};
    auto fetched = client_.FetchToBuffers(kColdApp, one, once);
    ASSERT_FALSE(fetched.ok()) << "partition " << r << " of the bad region was served";
    const std::string message(fetched.status().message());
    EXPECT_TRUE(absl::StrContains(message, ColdDataName(1))) << message;
    // Another attempt may find it readable, or another replica has it.
    EXPECT_EQ(fetched.status().code(), absl::StatusCode::kUnavailable) << fetched.status();
    EXPECT_TRUE(absl::StrContains(message, device_name_)) << message;
    EXPECT_TRUE(absl::StrContains(message, "Input/output error")) << message;
    std::printf("partition %d of %zu bytes: %s\n", r, bad_sizes[r],
                fetched.status().ToString().c_str());
  }

  // Three failed reads in a row: unhealthy, in the server's info and its metrics, while
  // it serves on.
  std::optional<ferry::v1::DiskHealth> health = LoopDiskHealth();
  ASSERT_TRUE(health.has_value()) << "no disk " << device_name_ << " in the server's info";
  EXPECT_FALSE(health->healthy());
  EXPECT_GE(health->read_errors(), 3u);
  EXPECT_TRUE(absl::StrContains(health->last_error(), ColdDataName(1))) << health->last_error();
  EXPECT_EQ(HealthyMetric(), 0);
  absl::StatusOr<bool> serving = client_.control().CheckHealth(target);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  // What an operator's `ferry health` says: serving, with the disk named.
  absl::StatusOr<testing::CommandResult> cli =
      testing::RunCommand({"client/ferry", "health", "--server=" + target}, absl::Seconds(30));
  ASSERT_TRUE(cli.ok()) << cli.status();
  EXPECT_EQ(cli->exit_code, 0) << cli->output;
  EXPECT_TRUE(absl::StartsWith(cli->output, "SERVING, with unhealthy disks: " + device_name_ + " "))
      << cli->output;
  EXPECT_TRUE(absl::StrContains(cli->output, "Input/output error")) << cli->output;
  ExpectServed(kHotApp, Partitions(target, 1, 0, 2));

  // The region reads again: so do its blocks, every byte, and the disk is healthy.
  ASSERT_TRUE(disk_->Heal().ok());
  ExpectServed(kColdApp, Partitions(target, 0, 1, 3));
  health = LoopDiskHealth();
  ASSERT_TRUE(health.has_value());
  EXPECT_TRUE(health->healthy());
  EXPECT_EQ(HealthyMetric(), 1);
}

// Spark's reducers of an executor whose local dirs are on two disks, one failing: the
// chunks of the blocks on it fail with Spark's ChunkFetchFailure naming the file and the
// device (Spark then reports a fetch failure for those blocks only); the others arrive.
TEST_P(FailingDiskTest, SparkChunksOnTheFailingDiskFailAndTheOthersArrive) {
  constexpr char kSparkApp[] = "app-20261201151500-0000";
  constexpr int32_t kSubdirs = 4;
  const std::vector<std::string> local_dirs = {absl::StrCat(cold_dir_, "/blockmgr-spark"),
                                               absl::StrCat(dir_.path(), "/local1/blockmgr-spark")};
  ASSERT_EQ(::mkdir(local_dirs[0].c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(absl::StrCat(dir_.path(), "/local1").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(local_dirs[1].c_str(), 0755), 0);
  const std::vector<size_t> sizes = {1000, 300000};
  std::vector<int64_t> maps;
  for (int64_t map = 1000; map < 1016; ++map) {
    ASSERT_TRUE(testing::WriteSparkMapOutput(local_dirs, kSubdirs, 0, map, sizes).ok());
    maps.push_back(map);
  }
  ::sync();
  // Every data file on the loop disk is cut off; the other disk's are whole.
  std::vector<bool> on_failing_disk;
  uint64_t cut = UINT64_MAX;
  for (int64_t map : maps) {
    const std::string name = DataFileName(0, map);
    on_failing_disk.push_back(spark::PlaceFile(local_dirs.size(), kSubdirs, name).local_dir == 0);
    if (!on_failing_disk.back()) continue;
    absl::StatusOr<std::string> path = spark::ExecutorFilePath(local_dirs, kSubdirs, name);
    ASSERT_TRUE(path.ok()) << path.status();
    absl::StatusOr<uint64_t> first = disk_->FirstByteOnDevice(*path);
    ASSERT_TRUE(first.ok()) << first.status();
    cut = std::min(cut, *first);
    absl::Status evicted = EvictFile(*path);
    ASSERT_TRUE(evicted.ok()) << evicted;
  }
  const size_t failing = std::count(on_failing_disk.begin(), on_failing_disk.end(), true);
  ASSERT_GT(failing, 0u);
  ASSERT_LT(failing, maps.size());
  ASSERT_TRUE(disk_->FailFrom(cut).ok());

  FerryServerOptions options = testing::TestServerOptions(dir_.path(), GetParam());
  options.spark.address = "127.0.0.1:0";
  options.spark.executors.dir_roots = {dir_.path()};
  server_ = testing::StartServer(options);
  ASSERT_TRUE(server_->spark_door()
                  ->executors()
                  ->Register({kSparkApp, "1", {local_dirs, kSubdirs, "sort"}})
                  .ok());
  testing::SparkClient client(server_->spark_port());
  std::string first_failure;
  for (size_t m = 0; m < maps.size(); ++m) {
    for (int32_t reduce = 0; reduce < 2; ++reduce) {
      const std::string got = testing::FetchFirstChunk(
          client, spark::EncodeFetchShuffleBlocks(
                      {kSparkApp, "1", 0, {maps[m]}, {{reduce}}, /*batch_fetch_enabled=*/false}));
      if (!on_failing_disk[m]) {
        EXPECT_TRUE(got == testing::PartitionBytes(0, maps[m], reduce, sizes[reduce]))
            << "map " << maps[m] << " reduce " << reduce << ": " << got.substr(0, 200);
        continue;
      }
      EXPECT_TRUE(absl::StartsWith(got, "chunk failure: ")) << got.substr(0, 200);
      if (first_failure.empty()) first_failure = got;
      EXPECT_TRUE(absl::StrContains(got, DataFileName(0, maps[m]))) << got;
      EXPECT_TRUE(absl::StrContains(got, device_name_)) << got;
      EXPECT_TRUE(absl::StrContains(got, "Input/output error")) << got;
    }
  }
  std::printf("%zu of %zu map outputs on the failing disk; their chunks failed: %s\n", failing,
              maps.size(), first_failure.c_str());
}

INSTANTIATE_TEST_SUITE_P(Configs, FailingDiskTest, ::testing::ValuesIn(testing::AllServerConfigs()),
                         [](const ::testing::TestParamInfo<testing::ServerConfig>& param) {
                           return testing::ConfigName(param.param);
                         });

}  // namespace
}  // namespace ferry
