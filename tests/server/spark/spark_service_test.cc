// SparkShuffleService on its own: its collaborators (the block store, the executors'
// registry, the blocking pool and the clock) passed in, its calls made from a fiber,
// no server and no socket.
#include "server/spark/spark_service.h"

#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/run_fiber.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

constexpr char kApp[] = "app-20261204-0001";
constexpr char kExec[] = "3";
constexpr int kSubdirs = 4;
constexpr char kShuffleManager[] = "org.apache.spark.shuffle.sort.SortShuffleManager";

class SparkServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* d : {"a", "b"}) {
      dirs_.push_back(absl::StrCat(roots_.path(), "/", d));
      ASSERT_EQ(::mkdir(dirs_.back().c_str(), 0755), 0);
    }
    ASSERT_TRUE(testing::WriteSparkMapOutput(dirs_, kSubdirs, 5, 100, {10, 0, 30}).ok());
    absl::StatusOr<std::unique_ptr<BlockStore>> store =
        BlockStore::Open({.data_dir = data_.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ExecutorRegistry::Options executors;
    executors.dir_roots = {roots_.path()};
    absl::StatusOr<std::unique_ptr<ExecutorRegistry>> registry =
        ExecutorRegistry::Open(executors, clock_);
    ASSERT_TRUE(registry.ok()) << registry.status();
    executors_ = *std::move(registry);
  }

  SparkShuffleService& Service() {
    if (service_ == nullptr) {
      service_ = std::make_unique<SparkShuffleService>(options_, store_.get(), executors_.get(),
                                                       &pool_, clock_);
    }
    return *service_;
  }

  absl::Status Register(const std::string& client = "10.0.0.1") {
    absl::Status status;
    testing::RunInFiber([&] {
      status = Service().Register({kApp, kExec, {dirs_, kSubdirs, kShuffleManager}}, client,
                                  /*authenticated=*/false);
    });
    return status;
  }

  absl::StatusOr<SparkStream> Open(std::vector<int32_t> reduces,
                                   const std::string& client = "10.0.0.1",
                                   const std::string& exec = kExec) {
    absl::StatusOr<SparkStream> stream = absl::UnknownError("not run");
    testing::RunInFiber([&] {
      stream = Service().OpenStream(
          spark::FetchShuffleBlocks{kApp, exec, 5, {100}, {std::move(reduces)}, false}, client);
    });
    return stream;
  }

  testing::TempDir roots_;
  testing::TempDir data_;
  std::vector<std::string> dirs_;
  testing::FakeClock clock_;
  BlockingPool pool_{BlockingPool::Options{.threads = 1}};
  std::unique_ptr<BlockStore> store_;
  std::unique_ptr<ExecutorRegistry> executors_;
  SparkShuffleService::Options options_;
  std::unique_ptr<SparkShuffleService> service_;
};

TEST_F(SparkServiceTest, ARegisteredExecutorsBlocksOpenAsChunksAndAMissingOneFailsItsOwn) {
  ASSERT_TRUE(Register().ok());
  absl::StatusOr<SparkStream> stream = Open({0, 2, 1});
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ(stream->chunks.size(), 3u);
  EXPECT_TRUE(stream->chunks[0].status.ok()) << stream->chunks[0].status;
  EXPECT_EQ(stream->chunks[0].block.length, 10u);
  EXPECT_EQ(stream->chunks[1].block.length, 30u);
  EXPECT_EQ(stream->chunks[2].block.length, 0u);
  EXPECT_EQ(Service().open_chunks(), 3u);

  // An executor that never registered: the stream opens, each chunk says why it fails.
  absl::StatusOr<SparkStream> unknown = Open({0}, "10.0.0.1", "9");
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  ASSERT_EQ(unknown->chunks.size(), 1u);
  EXPECT_FALSE(unknown->chunks[0].status.ok());
  EXPECT_NE(unknown->chunks[0].status.message().find("9"), std::string::npos)
      << unknown->chunks[0].status;
}

TEST_F(SparkServiceTest, AStreamsLifetimeRunsOnTheServicesClock) {
  options_.stream_lifetime = absl::Minutes(7);
  ASSERT_TRUE(Register().ok());
  clock_.Advance(absl::Hours(5));
  absl::StatusOr<SparkStream> stream = Open({0});
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(stream->expires, clock_.Now() + absl::Minutes(7));
}

TEST_F(SparkServiceTest, AClientPastItsShareOfOpenChunksIsRefusedAndOthersAreNot) {
  options_.max_open_chunks = 5;
  options_.max_open_chunks_per_client = 3;
  ASSERT_TRUE(Register().ok());
  absl::StatusOr<SparkStream> first = Open({0, 1, 2});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<SparkStream> more = Open({0});
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted) << more.status();
  absl::StatusOr<SparkStream> other = Open({0, 1}, "10.0.0.2");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(Open({0}, "10.0.0.3").status().code(), absl::StatusCode::kResourceExhausted);
  // A stream let go of gives its chunks back.
  first = absl::CancelledError("closed");
  EXPECT_EQ(Service().open_chunks(), 2u);
  EXPECT_TRUE(Open({0}).ok());
}

// Registrations are charged to their application (authenticated, its own): one that is
// invalid costs nothing, another application's flood never spends an application's
// turns, and changes to registered executors never delay a new one.
TEST_F(SparkServiceTest, RegistrationsAreChargedToTheirApplicationAndInvalidOnesAreFree) {
  options_.registrations = {.total = {.per_second = 1, .burst = 6},
                            .per_client = {.per_second = 1, .burst = 2},
                            .max_wait = absl::ZeroDuration()};
  auto reg = [&](const std::string& app, const std::string& exec, std::vector<std::string> dirs,
                 const std::string& manager = kShuffleManager) {
    absl::Status status;
    testing::RunInFiber([&] {
      status = Service().Register({app, exec, {std::move(dirs), kSubdirs, manager}}, "10.0.0.1",
                                  /*authenticated=*/true);
    });
    return status;
  };
  // Naming a dir that is not there, again and again: refused as invalid, never as busy.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(reg("bob", absl::StrCat(i), {roots_.path() + "/missing"}).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // bob spends his own turns (two), with new executors and then changes to them.
  EXPECT_TRUE(reg("bob", "1", {dirs_[0]}).ok());
  EXPECT_TRUE(reg("bob", "2", {dirs_[0]}).ok());
  EXPECT_EQ(reg("bob", "3", {dirs_[0]}).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(reg("bob", "1", {dirs_[0]}, "changed-1").ok());
  EXPECT_TRUE(reg("bob", "2", {dirs_[0]}, "changed-1").ok());
  EXPECT_EQ(reg("bob", "1", {dirs_[0]}, "changed-2").code(), absl::StatusCode::kResourceExhausted);
  // Registering again as it is costs nothing.
  EXPECT_TRUE(reg("bob", "1", {dirs_[0]}, "changed-1").ok());
  // alice, from the same host: her own turns.
  EXPECT_TRUE(reg("alice", "1", {dirs_[1]}).ok());
  EXPECT_TRUE(reg("alice", "2", {dirs_[1]}).ok());
}

}  // namespace
}  // namespace ferry
