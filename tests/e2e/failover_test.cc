// A server that dies mid-fetch: the client resumes after the last whole block, from the
// same server when it comes back or from a replica, delivering every block exactly once;
// and it gives up in bounded time when nothing answers.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-failover";
const std::vector<size_t> kSizes = {300000, 1, 0, 200000, 77777, 123456, 4096, 5};

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    primary_data_.AddMapOutput(primary_dir_.path(), kApp, 0, 0, kSizes);
    replica_data_.AddMapOutput(replica_dir_.path(), kApp, 0, 0, kSizes);
  }
  static std::unique_ptr<FerryServer> Start(const std::string& dir, const std::string& control,
                                            const std::string& data) {
    FerryServerOptions options;
    options.data_dir = dir;
    options.control_address = control;
    options.data_address = data;
    auto server = FerryServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }
  // Every block of the map output at `server`, with `replicas`.
  std::vector<BlockLocation> Blocks(const std::string& server,
                                    const std::vector<std::string>& replicas) const {
    std::vector<BlockLocation> blocks;
    for (int32_t r = 0; r < static_cast<int32_t>(kSizes.size()); ++r) {
      blocks.push_back({server, {0, 0, r, r + 1}, replicas});
    }
    return blocks;
  }
  // A sink that checks each block's bytes and counts deliveries; `after_block` runs
  // after the given number of blocks has arrived.
  CallbackSink CountingSink(std::map<size_t, int>& seen, int trigger_after,
                            std::function<void()> trigger) {
    return CallbackSink(
        [&seen, trigger_after, trigger, this](size_t index, absl::string_view bytes) {
          EXPECT_TRUE(bytes == primary_data_.Expected(0, 0, static_cast<int32_t>(index),
                                                      static_cast<int32_t>(index) + 1))
              << "block " << index;
          ++seen[index];
          int total = 0;
          for (auto& [i, n] : seen) total += n;
          if (total == trigger_after) trigger();
          return absl::OkStatus();
        });
  }

  TempDir primary_dir_;
  TempDir replica_dir_;
  DataSet primary_data_;
  DataSet replica_data_;
};

TEST_F(FailoverTest, ServerKilledMidFetchFailsOverToAReplica) {
  auto primary = Start(primary_dir_.path(), "127.0.0.1:0", "127.0.0.1:0");
  auto replica = Start(replica_dir_.path(), "127.0.0.1:0", "127.0.0.1:0");
  ASSERT_TRUE(primary && replica);
  std::map<size_t, int> seen;
  CallbackSink sink = CountingSink(seen, 3, [&] { primary->Shutdown(); });
  FetchOptions options;
  options.max_bytes_in_flight = 1;  // one block at a time, so the kill lands mid-fetch
  ShuffleClient client;
  auto stats = client.Fetch(kApp, Blocks(primary->control_target(), {replica->control_target()}),
                            sink, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(seen.size(), kSizes.size());
  for (auto& [index, count] : seen) EXPECT_EQ(count, 1) << "block " << index;
  EXPECT_GT(replica->data_server().connections_accepted(), 0u);
  // One failover, its cause named: the primary's stream, cut off.
  ASSERT_EQ(stats->retried.size(), 1u);
  EXPECT_NE(stats->retried[0].message().find("from server " + primary->control_target()),
            std::string::npos)
      << stats->retried[0];
}

TEST_F(FailoverTest, ServerThatComesBackIsResumedAfterTheLastWholeBlock) {
  auto server = Start(primary_dir_.path(), "127.0.0.1:0", "127.0.0.1:0");
  ASSERT_TRUE(server);
  const std::string control = server->control_target();
  const std::string data = absl::StrCat("127.0.0.1:", server->data_port());
  std::unique_ptr<FerryServer> restarted;
  std::map<size_t, int> seen;
  CallbackSink sink = CountingSink(seen, 4, [&] {
    server->Shutdown();                                     // killed mid-fetch ...
    restarted = Start(primary_dir_.path(), control, data);  // ... and back on its ports
  });
  FetchOptions options;
  options.max_bytes_in_flight = 1;
  ShuffleClient client;
  auto stats = client.Fetch(kApp, Blocks(control, {}), sink, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_TRUE(restarted != nullptr);
  ASSERT_EQ(seen.size(), kSizes.size());
  for (auto& [index, count] : seen) EXPECT_EQ(count, 1) << "block " << index;
  // The restarted server served only what was left: 4 whole blocks came before.
  EXPECT_EQ(restarted->data_server().connections_accepted(), 1u);
}

TEST_F(FailoverTest, NothingAnsweringFailsWithinTheDeadline) {
  auto server = Start(primary_dir_.path(), "127.0.0.1:0", "127.0.0.1:0");
  ASSERT_TRUE(server);
  const std::string control = server->control_target();
  server->Shutdown();
  server.reset();
  FetchOptions options;
  options.max_attempts = 3;
  options.io_timeout = absl::Seconds(2);
  ShuffleClient client(absl::Seconds(2));
  std::map<size_t, int> seen;
  CallbackSink sink = CountingSink(seen, -1, [] {});
  const absl::Time start = absl::Now();
  auto stats = client.Fetch(kApp, Blocks(control, {}), sink, options);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kUnavailable) << stats.status();
  EXPECT_NE(stats.status().message().find("8 of 8 blocks not fetched"), std::string::npos)
      << stats.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_TRUE(seen.empty());
}

TEST_F(FailoverTest, ErrorsAnotherAttemptCannotFixAreNotRetried) {
  auto primary = Start(primary_dir_.path(), "127.0.0.1:0", "127.0.0.1:0");
  ASSERT_TRUE(primary);
  std::vector<BlockLocation> blocks = Blocks(primary->control_target(), {});
  blocks.push_back({primary->control_target(), {0, 99, 0, 1}, {}});  // no such map output
  FetchOptions options;
  options.retry_backoff = absl::Seconds(30);  // a retry would show as a 30 s stall
  ShuffleClient client;
  std::map<size_t, int> seen;
  CallbackSink sink = CountingSink(seen, -1, [] {});
  const absl::Time start = absl::Now();
  auto stats = client.Fetch(kApp, blocks, sink, options);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kNotFound) << stats.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace ferry
