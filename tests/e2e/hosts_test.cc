// Ferry across hosts: ferry_server (the real binary) on each host of a HostCluster
// (network namespaces on a bridge, MTU 1500), and a reducer in this process fetching its
// partitions from all of them at once, over IPv4 and IPv6; then the faults of a real
// network: a host killed mid-block, a link pulled mid-stream, a host that accepts and
// stalls, links shaped with tc. Every byte is compared with what was written, and the
// servers' own counters say what each failure cost them in calls.
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/shuffle_client.h"
#include "client/spark_client.h"
#include "common/io/ops.h"
#include "common/net_address.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/command.h"
#include "tests/testing/host_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/spark_ess.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::HostCluster;
using ::ferry::testing::ServerProcess;
using ::ferry::testing::ServerProcessOptions;
using ::ferry::testing::TempDir;
using ::ferry::testing::WaitFor;

constexpr char kServerBinary[] = "server/ferry_server";
constexpr char kApp[] = "app-hosts";
constexpr int kHosts = 8;
// Each map output: 7.8 MiB in 8 partitions from empty to 3 MiB.
const std::vector<size_t> kSizes = {1 << 20, 3 << 20, 64 << 10, 0, 5000, 2 << 20, 1, 700000};
// A host shaped this way sends a map output in about 1.6 s.
const std::vector<std::string> kSlowLink = {"tbf", "rate",    "40mbit", "burst",
                                            "32k", "latency", "400ms"};

enum class Family { kIpv4, kIpv6 };

using MonotonicTime = std::chrono::steady_clock::time_point;
MonotonicTime MonotonicNow() { return std::chrono::steady_clock::now(); }
absl::Duration Since(MonotonicTime start) { return absl::FromChrono(MonotonicNow() - start); }

// One cluster for the whole test binary, torn down when it ends.
class ClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HostCluster>> made = HostCluster::Create(kHosts);
    if (made.ok()) {
      cluster = *std::move(made);
    } else {
      why = made.status().ToString();
    }
  }
  void TearDown() override { cluster.reset(); }

  static inline std::unique_ptr<HostCluster> cluster;
  static inline std::string why;
};
const ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

class HostsTest : public ::testing::Test {
 protected:
  HostsTest() : cluster_(ClusterEnvironment::cluster.get()) {}

  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << ClusterEnvironment::why;
    // Map output i lives on host i and, as its replica, on host i + 1.
    for (int i = 0; i < kHosts; ++i) {
      dirs_.push_back(absl::StrCat(dir_.path(), "/host", i));
      ASSERT_EQ(::mkdir(dirs_.back().c_str(), 0755), 0);
    }
    for (int i = 0; i < kHosts; ++i) {
      data_.AddMapOutput(dirs_[i], kApp, 0, i, kSizes);
      data_.AddMapOutput(dirs_[(i + 1) % kHosts], kApp, 0, i, kSizes);
    }
  }

  void TearDown() override {
    if (cluster_ == nullptr) return;
    for (int i = 0; i < kHosts; ++i) {
      EXPECT_TRUE(cluster_->SetLinkUp(i, true).ok());
      EXPECT_TRUE(cluster_->Shape(i, {}).ok());
    }
    for (auto& server : servers_) {
      if (server != nullptr) ::kill(server->pid(), SIGCONT);
    }
  }

  const std::string& HostAddress(int i, Family family) const {
    return family == Family::kIpv6 ? cluster_->host(i).ipv6 : cluster_->host(i).ipv4;
  }

  // ferry_server on hosts [0, n), both planes on the host's address of `family`, its
  // metrics on its IPv4 one (the metrics' HTTP server has no IPv6).
  void StartServers(int n, Family family, const std::vector<std::string>& extra = {}) {
    for (int i = 0; i < n; ++i) {
      ServerProcessOptions options;
      options.netns = cluster_->host(i).netns;
      options.host = HostAddress(i, family);
      options.log_path = absl::StrCat(dir_.path(), "/server", i, ".log");
      std::vector<std::string> args = {"--threads=1",
                                       "--metrics-address=" + cluster_->host(i).ipv4 + ":0"};
      for (const std::string& a : extra) {
        // "{host}" and "{dir}": this host's address and data dir.
        std::string arg = a;
        for (const auto& [key, value] :
             {std::pair<std::string, std::string>{"{host}", options.host}, {"{dir}", dirs_[i]}}) {
          for (size_t at; (at = arg.find(key)) != std::string::npos;) {
            arg.replace(at, key.size(), value);
          }
        }
        args.push_back(std::move(arg));
      }
      auto started = ServerProcess::Start(kServerBinary, dirs_[i], args, options);
      ASSERT_TRUE(started.ok()) << started.status();
      servers_.push_back(*std::move(started));
    }
  }

  // Every partition of map outputs [0, n), each at its host, with the next host as its
  // replica when `replicas`.
  std::vector<BlockLocation> Blocks(int n, bool replicas) const {
    std::vector<BlockLocation> blocks;
    for (int i = 0; i < n; ++i) {
      for (int32_t r = 0; r < static_cast<int32_t>(kSizes.size()); ++r) {
        BlockLocation b{servers_[i]->control_target(), {0, i, r, r + 1}};
        if (replicas) b.replicas = {servers_[(i + 1) % n]->control_target()};
        blocks.push_back(std::move(b));
      }
    }
    return blocks;
  }

  // A sink that checks every block's bytes and notes in `last` when each map output's
  // last block arrived, after `start`. Monotonic: gRPC's deadlines are, and a step of
  // the wall clock must not move an arrival across one.
  CallbackSink Arrivals(const std::vector<BlockLocation>& blocks, MonotonicTime start,
                        std::map<int64_t, absl::Duration>& last) const {
    return CallbackSink([&blocks, start, &last, this](size_t index, absl::string_view bytes) {
      const BlockId& b = blocks[index].block;
      EXPECT_TRUE(bytes == data_.Expected(0, b.map_id, b.start_reduce_id, b.end_reduce_id));
      last[b.map_id] = Since(start);
      return absl::OkStatus();
    });
  }

  void ExpectEveryByte(const std::vector<BlockLocation>& blocks,
                       const std::vector<std::string>& fetched) const {
    ASSERT_EQ(fetched.size(), blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
      const BlockId& b = blocks[k].block;
      EXPECT_TRUE(fetched[k] ==
                  data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id))
          << "block " << k << " (map " << b.map_id << ")";
    }
  }

  // One sample of a metric at host i's metrics endpoint ("name" or "name{labels}").
  double Metric(int i, const std::string& sample) const {
    absl::StatusOr<double> value =
        testing::ScrapeMetric(servers_[i]->metrics_port(), sample, cluster_->host(i).ipv4);
    EXPECT_TRUE(value.ok()) << value.status();
    return value.ok() ? *value : -1;
  }
  double OpenStreamCalls(int i) const {
    return Metric(i, "ferry_control_calls_total{method=\"OpenStream\"}");
  }
  double SentBytes(int i) const {
    return Metric(i, "ferry_sent_bytes_total{front_door=\"ferry\",mode=\"splice\"}");
  }

  HostCluster* const cluster_;
  TempDir dir_;
  std::vector<std::string> dirs_;
  DataSet data_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

// Options for the fault tests: a lost peer is noticed in 2 s, by the data plane's
// deadline or the control call's.
FetchOptions QuickToNotice() {
  FetchOptions options;
  options.io_timeout = absl::Seconds(2);
  options.retry_backoff = absl::Milliseconds(50);
  return options;
}

class FanInTest : public HostsTest,
                  public ::testing::WithParamInterface<std::tuple<int, Family>> {};

TEST_P(FanInTest, OneReducerFetchesFromEveryHostAtOnce) {
  const auto [n, family] = GetParam();
  StartServers(n, family);
  const std::vector<BlockLocation> blocks = Blocks(n, false);
  ShuffleClient client;
  BuffersSink sink(blocks.size());
  absl::StatusOr<FetchStats> stats = client.Fetch(kApp, blocks, sink);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ExpectEveryByte(blocks, sink.blocks());
  EXPECT_EQ(stats->servers, static_cast<size_t>(n));
  uint64_t total = 0;
  for (size_t r : kSizes) total += r;
  for (int i = 0; i < n; ++i) {
    // Each host sent its own map output and was asked once.
    EXPECT_EQ(SentBytes(i), static_cast<double>(total)) << "host " << i;
    EXPECT_EQ(OpenStreamCalls(i), 1) << "host " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Hosts, FanInTest,
                         ::testing::Combine(::testing::Values(4, 8),
                                            ::testing::Values(Family::kIpv4, Family::kIpv6)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Family>>& param) {
                           return absl::StrCat(
                               std::get<0>(param.param), "Hosts",
                               std::get<1>(param.param) == Family::kIpv6 ? "Ipv6" : "Ipv4");
                         });

// A BuffersSink that counts, as they arrive, the bytes of the block at caller index
// `watched` (another thread may read the count): it reads through a PlainReader of its
// own, as the sinks read an encrypted connection.
class WatchedSink final : public BlockSink {
 public:
  WatchedSink(size_t blocks, size_t watched) : inner_(blocks), watched_(watched) {}
  absl::Status Receive(const BlockSource& source, size_t index, uint64_t offset, uint64_t length,
                       BlockVerifier& verifier, const std::string& name,
                       absl::Time deadline) override {
    if (index != watched_) {
      return inner_.Receive(source, index, offset, length, verifier, name, deadline);
    }
    Counting counting(source.socket, received_);
    return inner_.Receive(BlockSource{source.socket, &counting}, index, offset, length, verifier,
                          name, deadline);
  }
  uint64_t Kept(size_t index) const override { return inner_.Kept(index); }
  std::vector<std::string>& blocks() { return inner_.blocks(); }
  uint64_t received() const { return received_.load(); }

 private:
  class Counting final : public PlainReader {
   public:
    Counting(int socket, std::atomic<uint64_t>& count) : socket_(socket), count_(count) {}
    ssize_t Read(char* buf, size_t len, absl::Time deadline) override {
      const ssize_t n = Recv(socket_, buf, len, 0, deadline);
      if (n > 0) count_ += static_cast<uint64_t>(n);
      return n;
    }

   private:
    const int socket_;
    std::atomic<uint64_t>& count_;
  };

  BuffersSink inner_;
  const size_t watched_;
  std::atomic<uint64_t> received_{0};
};

// Fetches Blocks(4, true) on a thread while `fault` runs on this one, once 1 MiB of
// host 0's second block (3 MiB, after one of 1 MiB) has arrived: its link is slowed to
// 5 MB/s, so the fault lands mid-block. Returns the fetch's result and how long it took.
class FaultTest : public HostsTest {
 protected:
  static constexpr uint64_t kCutAt = 1 << 20;
  struct Outcome {
    absl::Status status;
    absl::Duration elapsed;
    std::vector<std::string> blocks;
  };
  Outcome FetchThrough(const std::function<void()>& fault, Family family = Family::kIpv4,
                       bool replicas = true) {
    StartServers(4, family);
    EXPECT_TRUE(cluster_->Shape(0, kSlowLink).ok());
    const std::vector<BlockLocation> blocks = Blocks(4, replicas);
    Outcome outcome;
    ShuffleClient client(absl::Seconds(2));
    WatchedSink sink(blocks.size(), /*watched=*/1);  // map 0's second partition
    const absl::Time start = absl::Now();
    std::thread fetch([&] {
      outcome.status = client.Fetch(kApp, blocks, sink, QuickToNotice()).status();
      outcome.elapsed = absl::Now() - start;
    });
    EXPECT_TRUE(WaitFor([&] { return sink.received() >= kCutAt; }));
    fault();
    fetch.join();
    if (outcome.status.ok()) ExpectEveryByte(blocks, sink.blocks());
    outcome.blocks = std::move(sink.blocks());
    return outcome;
  }

  // The failure cost one more stream at host 0's replica and nothing anywhere else, and
  // the replica sent only what had not arrived: not the first block, which had, nor
  // the part of the second received before the fault.
  void ExpectOneMoreStreamAtTheReplicaOnly() {
    EXPECT_EQ(OpenStreamCalls(1), 2);
    EXPECT_EQ(OpenStreamCalls(2), 1);
    EXPECT_EQ(OpenStreamCalls(3), 1);
    uint64_t total = 0;
    for (size_t r : kSizes) total += r;
    EXPECT_LT(SentBytes(1), static_cast<double>(2 * total - kSizes[0] - kCutAt))
        << "the replica sent the cut-off block again from its start";
  }
};

TEST_F(FaultTest, HostKilledMidBlockFailsOverToItsReplica) {
  Outcome outcome = FetchThrough([&] { ::kill(servers_[0]->pid(), SIGKILL); });
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  ExpectOneMoreStreamAtTheReplicaOnly();
}

TEST_F(FaultTest, LinkDownMidStreamFailsOverWithinTheIoTimeout) {
  Outcome outcome =
      FetchThrough([&] { ASSERT_TRUE(cluster_->SetLinkUp(0, false).ok()); }, Family::kIpv6);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  // Noticed within the 2 s deadline, then the replica's share at full speed.
  EXPECT_LT(outcome.elapsed, absl::Seconds(8));
  ExpectOneMoreStreamAtTheReplicaOnly();
}

TEST_F(FaultTest, HostThatStallsMidStreamFailsOverWithinTheIoTimeout) {
  // SIGSTOP: the kernel keeps the connections and acknowledges what is queued; the
  // server sends nothing more.
  Outcome outcome = FetchThrough([&] { ::kill(servers_[0]->pid(), SIGSTOP); });
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_LT(outcome.elapsed, absl::Seconds(8));
  ExpectOneMoreStreamAtTheReplicaOnly();
}

TEST_F(FaultTest, WithoutAReplicaTheFetchFailsNamingTheBlockTheHostAndTheCause) {
  Outcome outcome = FetchThrough([&] { ASSERT_TRUE(cluster_->SetLinkUp(0, false).ok()); },
                                 Family::kIpv4, /*replicas=*/false);
  ASSERT_FALSE(outcome.status.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(outcome.status) || absl::IsUnavailable(outcome.status))
      << outcome.status;
  const std::string message(outcome.status.message());
  EXPECT_NE(message.find("map 0"), std::string::npos) << message;
  EXPECT_NE(message.find(servers_[0]->control_target()), std::string::npos) << message;
  // Four attempts of at most 2 s each, and the pauses between them.
  EXPECT_LT(outcome.elapsed, absl::Seconds(14));
  // The other hosts' blocks all arrived, each asked once.
  for (int i = 1; i < 4; ++i) EXPECT_EQ(OpenStreamCalls(i), 1) << "host " << i;
}

// `ferry fetch` over four hosts, as an operator runs a reducer by hand: each map output
// from the first host that lists it; with host 1 killed mid-block, its map output from
// host 2, which also holds it. (Host i holds map outputs i and i - 1: here host 0 has
// 0 and 7, host 1 has 1 and 0, and so on.)
TEST_F(HostsTest, TheCliFetchesEveryMapOutputOnceAndFailsOverToTheHostThatAlsoListsIt) {
  StartServers(4, Family::kIpv6);
  ASSERT_TRUE(cluster_->Shape(1, kSlowLink).ok());
  std::string servers;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&servers, i > 0 ? "," : "", servers_[i]->control_target());
  }
  absl::StatusOr<testing::CommandResult> cli;
  std::thread fetch([&] {
    cli = testing::RunCommand(
        {"client/ferry", "fetch", "--server=" + servers, "--app=" + std::string(kApp), "--json"},
        absl::Seconds(60));
  });
  EXPECT_TRUE(WaitFor([&] { return SentBytes(1) >= (1 << 20); }));
  ::kill(servers_[1]->pid(), SIGKILL);
  fetch.join();
  ASSERT_TRUE(cli.ok()) << cli.status();
  ASSERT_EQ(cli->exit_code, 0) << cli->output;
  uint64_t total = 0;
  for (size_t r : kSizes) total += r;
  // Map outputs 7 and 0 to 3.
  EXPECT_TRUE(absl::StrContains(cli->output, absl::StrCat("\"blocks\":", 5 * kSizes.size())))
      << cli->output;
  EXPECT_TRUE(absl::StrContains(cli->output, absl::StrCat("\"bytes\":", 5 * total))) << cli->output;
  // One failover, told on stderr and counted in the JSON.
  EXPECT_TRUE(absl::StrContains(cli->output, "\"retried\":1")) << cli->output;
  EXPECT_TRUE(absl::StrContains(cli->output, "ferry fetch: tried again after: ")) << cli->output;
  // Host 0 sent map outputs 0 and 7, host 3 its own; host 2 its own and what host 1 had
  // not sent whole of map output 1.
  EXPECT_EQ(SentBytes(0), static_cast<double>(2 * total));
  EXPECT_EQ(SentBytes(3), static_cast<double>(total));
  EXPECT_GT(SentBytes(2), static_cast<double>(total));
  EXPECT_LE(SentBytes(2), static_cast<double>(2 * total));
}

TEST_F(HostsTest, HostThatAcceptsButNeverAnswersHoldsBackNoOtherAndIsPassedOver) {
  StartServers(4, Family::kIpv4);
  // Stopped: the kernel completes its connections; nothing answers on them.
  ASSERT_EQ(::kill(servers_[0]->pid(), SIGSTOP), 0);
  const std::vector<BlockLocation> blocks = Blocks(4, true);
  std::map<int64_t, absl::Duration> last;  // when each map output's last block arrived
  const MonotonicTime start = MonotonicNow();
  CallbackSink sink = Arrivals(blocks, start, last);
  const absl::Duration rpc_timeout = absl::Seconds(3);
  ShuffleClient client(rpc_timeout);
  absl::StatusOr<FetchStats> stats = client.Fetch(kApp, blocks, sink, QuickToNotice());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_LT(Since(start), absl::Seconds(10));
  // The others' blocks came while host 0's OpenStream waited for its deadline; host 0's
  // came from its replica after it, in the one round that followed.
  for (int64_t i = 1; i < 4; ++i) EXPECT_LT(last[i], rpc_timeout / 2) << "map " << i;
  ASSERT_EQ(stats->retried.size(), 1u);
  const absl::Status& why = stats->retried[0];
  EXPECT_TRUE(absl::StrContains(why.message(), "OpenStream to " + servers_[0]->control_target()))
      << why;
  // The call's deadline gave up on it, unless gRPC's connection did first (UNAVAILABLE).
  EXPECT_TRUE(absl::IsDeadlineExceeded(why) || absl::IsUnavailable(why)) << why;
  if (absl::IsDeadlineExceeded(why)) {
    EXPECT_GE(last[0], rpc_timeout) << why;
  }
  for (int64_t i = 1; i < 4; ++i) EXPECT_GT(last[0], last[i]) << "map " << i << ": " << why;
  ASSERT_EQ(::kill(servers_[0]->pid(), SIGCONT), 0);
  EXPECT_EQ(OpenStreamCalls(1), 2);
  EXPECT_EQ(OpenStreamCalls(2), 1);
  EXPECT_EQ(OpenStreamCalls(3), 1);
}

TEST_F(HostsTest, ASlowHostDoesNotHoldBackTheOthersBytes) {
  StartServers(4, Family::kIpv6);
  ASSERT_TRUE(cluster_->Shape(0, kSlowLink).ok());
  const std::vector<BlockLocation> blocks = Blocks(4, false);
  std::map<int64_t, absl::Duration> last;  // when each map output's last block arrived
  CallbackSink sink = Arrivals(blocks, MonotonicNow(), last);
  ShuffleClient client;
  absl::StatusOr<FetchStats> stats = client.Fetch(kApp, blocks, sink);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const absl::Duration slow = last[0];
  EXPECT_GT(slow, absl::Seconds(1)) << "the shaped host was not slow";
  for (int64_t i = 1; i < 4; ++i) {
    EXPECT_LT(last[i], slow / 2) << "host " << i << " finished at " << absl::FormatDuration(last[i])
                                 << ", the slow host at " << absl::FormatDuration(slow);
  }
}

// Spark 3.5.0's own client (spark-ess-fetch), one per host and all at once, as the
// reducers of a job read every node: each registers its host's executor with that
// host's ferry_server and fetches every block of it over IPv6, every byte checked
// against the files.
TEST_F(HostsTest, SparksOwnClientFetchesFromEveryHostsSparkFrontDoorAtOnce) {
  std::string why;
  const std::string ess = testing::SparkEssDir(&why);
  if (ess.empty()) GTEST_SKIP() << "Spark's own client is not available: " << why;
  constexpr char kSparkApp[] = "app-20261202120000-0000";
  constexpr int kSubdirs = 8;
  constexpr int kHostsUsed = 4;
  // Executor i's map outputs 10 i .. 10 i + 2, in Spark's layout on host i.
  std::vector<std::vector<std::string>> local_dirs(kHostsUsed);
  for (int i = 0; i < kHostsUsed; ++i) {
    for (int d = 0; d < 2; ++d) {
      const std::string dir = absl::StrCat(dirs_[i], "/spark/local", d, "/blockmgr-", i);
      std::filesystem::create_directories(dir);
      local_dirs[i].push_back(dir);
    }
    for (int64_t m = 10 * i; m < 10 * i + 3; ++m) {
      ASSERT_TRUE(testing::WriteSparkMapOutput(local_dirs[i], kSubdirs, 0, m, kSizes).ok());
    }
  }
  StartServers(kHostsUsed, Family::kIpv6,
               {"--spark-address=[{host}]:0", "--spark-dir-roots={dir}/spark"});
  std::vector<absl::StatusOr<testing::CommandResult>> fetched(kHostsUsed);
  std::vector<std::thread> reducers;
  for (int i = 0; i < kHostsUsed; ++i) {
    reducers.emplace_back([&, i] {
      fetched[i] = testing::RunCommand({ess + "/spark-ess-fetch",
                                        "--host",
                                        cluster_->host(i).ipv6,
                                        "--port",
                                        absl::StrCat(servers_[i]->spark_port()),
                                        "--app",
                                        kSparkApp,
                                        "--exec-id",
                                        absl::StrCat(i),
                                        "--register",
                                        "--local-dirs",
                                        absl::StrJoin(local_dirs[i], ","),
                                        "--subdirs",
                                        absl::StrCat(kSubdirs),
                                        "--shuffle",
                                        "0",
                                        "--maps",
                                        absl::StrCat(10 * i, ",", 10 * i + 1, ",", 10 * i + 2),
                                        "--partitions",
                                        absl::StrCat(kSizes.size()),
                                        "--connections",
                                        "2",
                                        "--timeout",
                                        "60"},
                                       absl::Seconds(120));
    });
  }
  for (std::thread& t : reducers) t.join();
  uint64_t total = 0;
  for (size_t r : kSizes) total += r;
  for (int i = 0; i < kHostsUsed; ++i) {
    ASSERT_TRUE(fetched[i].ok()) << fetched[i].status();
    EXPECT_EQ(fetched[i]->exit_code, 0) << "host " << i << ":\n" << fetched[i]->output;
    EXPECT_TRUE(
        absl::StrContains(fetched[i]->output, absl::StrCat("OK: total ", 3 * total, " bytes")))
        << "host " << i << ":\n"
        << fetched[i]->output;
    EXPECT_EQ(Metric(i, "ferry_sent_bytes_total{front_door=\"spark\",mode=\"splice\"}"),
              static_cast<double>(3 * total))
        << "host " << i;
  }
  // Ferry's own Spark client, over IPv6 too: host 1's executor's first map output.
  std::vector<spark::ShuffleBlockId> ids;
  for (int32_t r = 0; r < static_cast<int32_t>(kSizes.size()); ++r) {
    ids.push_back({0, 10, r, r + 1});
  }
  BuffersSink sink(ids.size());
  absl::StatusOr<SparkFetchStats> got = SparkShuffleClient().Fetch(
      FormatHostPort(cluster_->host(1).ipv6, servers_[1]->spark_port()), kSparkApp, "1", ids, sink);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t r = 0; r < kSizes.size(); ++r) {
    EXPECT_TRUE(sink.blocks()[r] ==
                testing::PartitionBytes(0, 10, static_cast<int32_t>(r), kSizes[r]))
        << "partition " << r;
  }
}

TEST_F(HostsTest, DelayedAndLossyLinksDeliverEveryByte) {
  if (!cluster_->HasQdisc("netem")) {
    GTEST_SKIP() << "this kernel has no sch_netem (tc qdisc netem: unknown qdisc kind); "
                    "the tbf tests shape links instead";
  }
  StartServers(4, Family::kIpv4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        cluster_->Shape(i, {"netem", "delay", "20ms", "5ms", "loss", "1%", "reorder", "2%"}).ok());
  }
  const std::vector<BlockLocation> blocks = Blocks(4, false);
  ShuffleClient client;
  BuffersSink sink(blocks.size());
  absl::StatusOr<FetchStats> stats = client.Fetch(kApp, blocks, sink);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ExpectEveryByte(blocks, sink.blocks());
}

}  // namespace
}  // namespace ferry
