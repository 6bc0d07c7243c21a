// The Spark front door's bounds as the packaged service runs: ferry_server as an
// unprivileged user (nobody), with its binary, data, roots and state dir outside /root.
// Each attack is one of spark_attacks_test's, scaled down (tests/adversarial/spark_attacks_test.cc
// has them in process, as root).
#include <pwd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/control_client.h"
#include "common/spark/wire.h"
#include "gtest/gtest.h"
#include "tests/e2e/spark_raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/loopback.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/server_process.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::Reply;
using ::ferry::testing::ServerProcess;
using ::ferry::testing::SparkClient;
using ::ferry::testing::StreamHandleOf;
namespace sw = ::ferry::spark;
namespace fs = ::std::filesystem;

constexpr char kServerBinary[] = "server/ferry_server";
constexpr int kThreads = 2;
constexpr char kUser[] = "nobody";
constexpr char kApp[] = "app-1";
constexpr int kSubdirs = 8;
// Spliced, not copied (SegmentSender copies segments of at most 16 KiB).
constexpr size_t kBigBlockBytes = size_t{16} << 20;

class UnprivilegedSparkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "starting the server as " << kUser << " needs root";
    const passwd* account = ::getpwnam(kUser);
    if (account == nullptr) GTEST_SKIP() << "no user " << kUser;
    uid_ = account->pw_uid;
    char dir[] = "/tmp/ferry-unprivileged-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    scratch_ = dir;
    ASSERT_EQ(::chmod(dir, 0755), 0);
    for (const char* sub : {"data", "roots", "roots/a", "roots/b", "roots/c", "state"}) {
      ASSERT_EQ(::mkdir((scratch_ + "/" + sub).c_str(), 0755), 0) << sub;
    }
    ASSERT_EQ(::chown((scratch_ + "/state").c_str(), account->pw_uid, account->pw_gid), 0);
    fs::copy_file(kServerBinary, scratch_ + "/ferry_server");
    ASSERT_EQ(::chmod((scratch_ + "/ferry_server").c_str(), 0755), 0);
    dirs_ = {scratch_ + "/roots/a", scratch_ + "/roots/b"};
    ASSERT_TRUE(testing::WriteSparkMapOutput(dirs_, kSubdirs, 3, 1000, {10, 20, 30}).ok());
    ASSERT_TRUE(testing::WriteSparkMapOutput(dirs_, kSubdirs, 4, 1, {kBigBlockBytes}).ok());
    big_block_ = testing::PartitionBytes(4, 1, 0, kBigBlockBytes);
  }
  void TearDown() override {
    server_.reset();
    if (!scratch_.empty()) fs::remove_all(scratch_);
  }

  void Start(const std::vector<std::string>& extra = {}) {
    absl::StatusOr<std::unique_ptr<ServerProcess>> started = StartServer(extra, "server.log");
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(const std::vector<std::string>& extra,
                                                             const std::string& log) {
    std::vector<std::string> args = {
        "--spark-address=127.0.0.1:0",        "--spark-dir-roots=" + scratch_ + "/roots",
        "--state-dir=" + scratch_ + "/state", "--max-spark-open-chunks-per-client=100",
        "--metrics-address=127.0.0.1:0",      "--max-connections-per-client=4096",
        absl::StrCat("--threads=", kThreads)};
    args.insert(args.end(), extra.begin(), extra.end());
    return ServerProcess::Start(scratch_ + "/ferry_server", scratch_ + "/data", args,
                                scratch_ + "/" + log, 4096, kUser);
  }
  std::string Log(const std::string& name) const {
    std::ifstream in(scratch_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // A hand-off dir (--spark-yarn-dir, --spark-apps-dir) as its writer lays it out, the
  // NodeManager or the node agent (root here): dirs 0750 and files 0640 of root, in
  // ferry_server's user's group, which only reads them. Made once; its path.
  std::string HandOffDir() {
    const std::string handoff = scratch_ + "/handoff";
    for (const std::string& d : {handoff, handoff + "/apps", handoff + "/stopped"}) {
      EXPECT_EQ(::mkdir(d.c_str(), 0750), 0) << d;
      AsHandOffWriter(d, 0750);
    }
    return handoff;
  }
  // A file of the hand-off dir, written as its writer does: a temporary name, renamed.
  void WriteHandedOff(const std::string& relative, const std::string& contents) {
    const std::string path = scratch_ + "/handoff/" + relative;
    std::ofstream(path + ".tmp") << contents;
    AsHandOffWriter(path + ".tmp", 0640);
    ASSERT_EQ(::rename((path + ".tmp").c_str(), path.c_str()), 0);
  }
  void AsHandOffWriter(const std::string& path, mode_t mode) const {
    const passwd* account = ::getpwnam(kUser);
    ASSERT_NE(account, nullptr);
    ASSERT_EQ(::chown(path.c_str(), 0, account->pw_gid), 0) << path;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
  }
  uid_t ServerUid() const {
    std::ifstream status(absl::StrCat("/proc/", server_->pid(), "/status"));
    std::string key;
    uid_t uid = 0;
    while (status >> key) {
      if (key == "Uid:" && (status >> uid)) return uid;
    }
    return 0;
  }
  static std::string Registration(const std::string& exec, std::vector<std::string> dirs) {
    return sw::EncodeRegisterExecutor({kApp, exec, {std::move(dirs), kSubdirs, "sort"}});
  }
  static std::string Fetch(std::vector<int32_t> reduces) {
    return sw::EncodeFetchShuffleBlocks({kApp, "1", 3, {1000}, {std::move(reduces)}, false});
  }
  // Partition 1 of map 1000, or what went wrong.
  std::string FetchOne(SparkClient& client) { return testing::FetchFirstChunk(client, Fetch({1})); }

  static std::string BigFetch() {
    return sw::EncodeFetchShuffleBlocks({kApp, "1", 4, {1}, {{0}}, false});
  }
  // Fetches shuffle 4's one block over `client`; whether all its bytes came.
  bool FetchBig(SparkClient& client) const {
    return testing::FetchFirstChunk(client, BigFetch()) == big_block_;
  }
  // A metric without labels, from the metrics endpoint.
  // The kernel's memory accounting of the Spark port's connections (`ss -tm`), a few
  // lines: what a failure about pipes needs to be read.
  std::string SocketMemory() const {
    const std::string command = absl::StrCat(
        "ss -tmnH state established '( sport = :", server_->spark_port(), " )' 2>&1 | head -8");
    std::string out;
    if (FILE* ss = ::popen(command.c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof(line), ss) != nullptr) out += line;
      ::pclose(ss);
    }
    return out;
  }

  double Metric(const std::string& metric) const {
    absl::StatusOr<double> value = testing::ScrapeMetric(server_->metrics_port(), metric);
    EXPECT_TRUE(value.ok()) << value.status();
    return value.ok() ? *value : -1;
  }

  std::string scratch_;
  std::string big_block_;
  uid_t uid_ = 0;
  std::vector<std::string> dirs_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(UnprivilegedSparkTest, TheSparkFrontDoorsBoundsHoldAsNobody) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_EQ(ServerUid(), uid_);
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(Registration("1", dirs_)).type, sw::MessageType::kRpcResponse);
    ASSERT_EQ(client.Call(Registration("2", {scratch_ + "/roots/c"})).type,
              sw::MessageType::kRpcResponse);
    EXPECT_EQ(FetchOne(client), testing::PartitionBytes(3, 1000, 1, 20));
  }
  // Announced frames hold nothing; a 16 KB request is still served.
  std::vector<std::unique_ptr<SparkClient>> announcers;
  for (int i = 0; i < 20; ++i) {
    announcers.push_back(std::make_unique<SparkClient>(server_->spark_port()));
    announcers.back()->Send(std::string("\x00\x00\x00\x00\x01\x00\x00\x00\x03", 9));
  }
  SparkClient client(server_->spark_port());
  const std::string wide =
      sw::EncodeFetchShuffleBlocks({kApp, "1", 3, std::vector<int64_t>(90, 1000),
                                    std::vector<std::vector<int32_t>>(90, {0}), false});
  ASSERT_GT(wide.size(), 1000u);
  EXPECT_EQ(StreamHandleOf(client.Call(wide)).second, 90);
  // That stream holds 90 of this address's 100 chunks; another from it is refused,
  // another address is served.
  SparkClient again(server_->spark_port());
  again.Send(sw::EncodeRpcRequest(1, Fetch({0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1})));
  EXPECT_TRUE(again.Closed());
  SparkClient other(server_->spark_port(), "127.0.0.2");
  EXPECT_EQ(FetchOne(other), testing::PartitionBytes(3, 1000, 1, 20));
  announcers.clear();

  // The registrations are in the journal nobody wrote; one whose dir went while
  // the server was down is dropped, and the server starts and serves the others.
  ASSERT_TRUE(server_->SignalAndWait(SIGTERM, absl::Seconds(20)).ok());
  ASSERT_EQ(::rmdir((scratch_ + "/roots/c").c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(Start());
  SparkClient after(server_->spark_port());
  EXPECT_EQ(FetchOne(after), testing::PartitionBytes(3, 1000, 1, 20));
  const Reply gone = after.Call(sw::EncodeGetLocalDirsForExecutors({kApp, {"2"}}));
  EXPECT_EQ(gone.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(gone.text.find("Executor is not registered"), std::string::npos) << gone.text;
}

// As nobody, the 65th sending connection's pipe onward was 8 KiB, for the
// connection's life, and nothing said so. The pipes are a pool sized from the user's
// budget, and no pipe is ever short. Connections that asked for 16 MiB blocks and
// read nothing held every pipe, and a fast reader fell back to copying.
// A pipe takes only what the socket takes now, and a full socket is waited for with no
// pipe held: readers that do not read hold none.
// The two-user deployment of docs/spark.md ("YARN"): the NodeManager's user (root here)
// owns the hand-off dir and writes and deletes its files, 0640 in dirs of 0750 of
// ferry_server's group; ferry_server runs as its own user, reads them, and deletes
// nothing there. An application authenticates with its secret, registers, fetches, and
// is forgotten when it ends; ended applications' markers that ferry_server cannot delete
// (2,001 of them) cost no log line per sweep (they gave 1,924 warnings a second).
TEST_F(UnprivilegedSparkTest, OnYarnAsItsOwnUserBesideTheNodeManagers) {
  const std::string handoff = HandOffDir();
  const std::string local_dir = scratch_ + "/roots/nm";
  ASSERT_EQ(::mkdir(local_dir.c_str(), 0755), 0);
  WriteHandedOff("nodemanager-local-dirs", local_dir + "\n");
  for (int i = 0; i <= 2000; ++i)
    WriteHandedOff(absl::StrFormat("stopped/application_2_%04d", i), "");
  ASSERT_NO_FATAL_FAILURE(
      Start({"--spark-yarn-dir=" + handoff, "--spark-auth-yarn", "--sweep-interval=50ms"}));
  // Four applications one after the other, each ended and forgotten: four sweeps at least
  // over the 2,001 markers.
  for (int n = 1; n <= 4; ++n) {
    const std::string app = absl::StrFormat("application_1764000000000_%04d", n);
    const std::string secret = absl::StrCat("secret of ", app);
    const std::string blockmgr = local_dir + "/usercache/alice/appcache/" + app + "/blockmgr-1";
    fs::create_directories(blockmgr);
    ASSERT_TRUE(testing::WriteSparkMapOutput({blockmgr}, kSubdirs, 3, 1000, {10, 20, 30}).ok());
    WriteHandedOff("apps/" + app, absl::StrCat(R"({"secret":")", secret, R"("})"));
    SparkClient client(server_->spark_port());
    // The file is read when it appears, by the server's watch.
    ASSERT_TRUE(testing::WaitFor([&] {
      SparkClient probe(server_->spark_port());
      return testing::AuthenticateWithAuthEngine(probe, app, secret, 2).ok();
    }));
    ASSERT_TRUE(testing::AuthenticateWithAuthEngine(client, app, secret, 2).ok());
    ASSERT_EQ(
        client.Call(sw::EncodeRegisterExecutor({app, "1", {{blockmgr}, kSubdirs, "sort"}})).type,
        sw::MessageType::kRpcResponse);
    EXPECT_EQ(testing::FetchFirstChunk(
                  client, sw::EncodeFetchShuffleBlocks({app, "1", 3, {1000}, {{1}}, false})),
              testing::PartitionBytes(3, 1000, 1, 20));
    EXPECT_EQ(Metric("ferry_spark_executors_registered"), 1);
    // The application ends: the NodeManager's side writes its marker, deletes its file.
    WriteHandedOff("stopped/" + app, "");
    ASSERT_EQ(::unlink((handoff + "/apps/" + app).c_str()), 0);
    EXPECT_TRUE(testing::WaitFor([&] { return Metric("ferry_spark_executors_registered") == 0; }));
    EXPECT_TRUE(testing::WaitFor([&] {
      SparkClient probe(server_->spark_port());
      return !testing::AuthenticateWithAuthEngine(probe, app, secret, 2).ok();
    }));
  }
  std::ifstream log(scratch_ + "/server.log");
  std::vector<std::string> warnings;
  for (std::string line; std::getline(log, line);) {
    // Not the refusals of this test's own probes, nor the descriptor plan's.
    if (!line.empty() && (line[0] == 'W' || line[0] == 'E') &&
        line.find("peer_log.cc") == std::string::npos &&
        line.find("main.cc") == std::string::npos) {
      warnings.push_back(line);
    }
  }
  EXPECT_TRUE(warnings.empty()) << absl::StrJoin(warnings, "\n");
  int markers = 0;
  for (const auto& entry : fs::directory_iterator(handoff + "/stopped")) {
    markers += entry.is_regular_file() ? 1 : 0;
  }
  EXPECT_EQ(markers, 2005) << "the markers are the aux service's to delete";
}

// The Kubernetes deployment of docs/deploy.md: the node agent (root here) owns the
// hand-off dir (--spark-apps-dir) and writes each application's start with the secret
// from its executors' pods, then its end; ferry_server, as the executors' user, serves
// the application with that secret and at its end forgets it and deletes its executors'
// local dirs (no NodeManager does it there), and a later registration of it is refused.
TEST_F(UnprivilegedSparkTest, OnKubernetesAnEndedApplicationsDirsAreDeleted) {
  const passwd* account = ::getpwnam(kUser);
  ASSERT_NE(account, nullptr);
  const std::string handoff = HandOffDir();
  ASSERT_NO_FATAL_FAILURE(
      Start({"--spark-apps-dir=" + handoff, "--spark-auth-apps", "--sweep-interval=50ms"}));
  const std::string app = "spark-0f1e2d3c4b5a69788796a5b4c3d2e1f0";
  const std::string secret = "the secret Spark put in the executors' pods";
  // Two executors' local dirs in the served root (the executors' own: they make their
  // dirs in it), written as the executors' user.
  ASSERT_EQ(::chown((scratch_ + "/roots/c").c_str(), account->pw_uid, account->pw_gid), 0);
  const std::vector<std::string> blockmgrs = {scratch_ + "/roots/c/blockmgr-1",
                                              scratch_ + "/roots/c/blockmgr-2"};
  for (const std::string& dir : blockmgrs) {
    fs::create_directories(dir);
    ASSERT_TRUE(testing::WriteSparkMapOutput({dir}, kSubdirs, 3, 1000, {10, 20, 30}).ok());
    ASSERT_EQ(std::system(absl::StrCat("chown -R ", kUser, " ", dir).c_str()), 0);
  }
  WriteHandedOff("apps/" + app, absl::StrCat(R"({"secret":")", secret, R"("})"));
  ASSERT_TRUE(testing::WaitFor([&] {
    SparkClient probe(server_->spark_port());
    return testing::AuthenticateWithAuthEngine(probe, app, secret, 2).ok();
  }));
  for (int e = 0; e < 2; ++e) {
    SparkClient client(server_->spark_port());
    ASSERT_TRUE(testing::AuthenticateWithAuthEngine(client, app, secret, 2).ok());
    const std::string exec = absl::StrCat(e + 1);
    ASSERT_EQ(
        client.Call(sw::EncodeRegisterExecutor({app, exec, {{blockmgrs[e]}, kSubdirs, "sort"}}))
            .type,
        sw::MessageType::kRpcResponse);
    EXPECT_EQ(testing::FetchFirstChunk(
                  client, sw::EncodeFetchShuffleBlocks({app, exec, 3, {1000}, {{2}}, false})),
              testing::PartitionBytes(3, 1000, 2, 30));
  }
  EXPECT_EQ(Metric("ferry_spark_executors_registered"), 2);
  // It ends: the agent writes the marker and deletes the application's file.
  WriteHandedOff("stopped/" + app, "");
  ASSERT_EQ(::unlink((handoff + "/apps/" + app).c_str()), 0);
  EXPECT_TRUE(testing::WaitFor([&] { return Metric("ferry_spark_executors_registered") == 0; }));
  for (const std::string& dir : blockmgrs) {
    EXPECT_TRUE(testing::WaitFor([&] { return !fs::exists(dir); }))
        << dir << " is left; the server's log:\n"
        << testing::ReadTextFile(scratch_ + "/server.log");
  }
  EXPECT_TRUE(fs::exists(scratch_ + "/roots/c")) << "the root itself stays";
  // Its secret went with it; a registration of it, with the shared path, is refused.
  SparkClient late(server_->spark_port());
  EXPECT_FALSE(testing::AuthenticateWithAuthEngine(late, app, secret, 2).ok());
}

TEST_F(UnprivilegedSparkTest, PeersThatDoNotReadHoldNoPipes) {
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(Registration("1", dirs_)).type, sw::MessageType::kRpcResponse);
  }
  const int others = server_->PipeCount();  // the metrics endpoint's, for one
  // Three quarters of fs.pipe-user-pages-soft in 1 MiB pipes, split between the threads.
  std::ifstream soft("/proc/sys/fs/pipe-user-pages-soft");
  uint64_t pages = 0;
  ASSERT_TRUE(soft >> pages);
  if (pages == 0) GTEST_SKIP() << "no pipe budget for unprivileged users on this machine";
  const int budget = static_cast<int>(pages * 4096 / 4 * 3 / (1 << 20)) / kThreads * kThreads;
  EXPECT_EQ(Metric("ferry_pipes_max"), budget);
  // Each asks for the 16 MiB block and reads none of it. More connections than the
  // budget has pipes.
  const int connections = budget + 52;
  std::vector<std::unique_ptr<SparkClient>> clients;
  for (int i = 0; i < connections; ++i) {
    clients.push_back(std::make_unique<SparkClient>(server_->spark_port()));
    const int small = 64 << 10;
    ::setsockopt(clients.back()->fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    const Reply handle = clients.back()->Call(BigFetch());
    ASSERT_EQ(handle.type, sw::MessageType::kRpcResponse) << handle.text;
    clients.back()->Send(sw::EncodeChunkFetchRequest({StreamHandleOf(handle).first, 0}));
  }
  // Every response under way (its first bytes here), then stalled on a full socket.
  for (auto& client : clients) {
    ASSERT_TRUE(testing::WaitFor([&] {
      int queued = 0;
      return ::ioctl(client->fd(), FIONREAD, &queued) == 0 && queued > 0;
    }));
  }
  ASSERT_TRUE(testing::WaitFor([&] { return Metric("ferry_pipes_in_use") == 0; }))
      << Metric("ferry_pipes_in_use") << " pipes held by " << connections << " stalled peers ("
      << Metric("ferry_pipe_stalls_total") << " stalls); their sockets:\n"
      << SocketMemory();
  // A peer that reads is spliced to: no segment of it waits for a pipe or is copied.
  const double waits = Metric("ferry_pipe_waits_total");
  const double fallbacks = Metric("ferry_pipe_fallbacks_total");
  SparkClient fast(server_->spark_port(), "127.0.0.2");
  const absl::Time start = absl::Now();
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(FetchBig(fast));
  std::printf(
      "%d peers not reading, as %s (%.0f stalls): a reader fetched 128 MiB at %.2f GB/s, "
      "spliced\n",
      connections, kUser, Metric("ferry_pipe_stalls_total"),
      0.128 * 1.048576 / absl::ToDoubleSeconds(absl::Now() - start));
  EXPECT_EQ(Metric("ferry_pipe_fallbacks_total"), fallbacks);
  EXPECT_EQ(Metric("ferry_pipe_waits_total"), waits);
  EXPECT_LE(server_->PipeCount(), others + 2 * budget);
  // Read in full in any order, every response arrives whole.
  for (auto it = clients.rbegin(); it != clients.rend(); ++it) {
    std::optional<Reply> chunk = (*it)->Read();
    ASSERT_TRUE(chunk.has_value());
    EXPECT_TRUE(chunk->body == big_block_);
  }
  EXPECT_TRUE(testing::WaitFor([&] { return Metric("ferry_pipes_in_use") == 0; }));
  EXPECT_LE(server_->PipeCount(), others + 2 * budget);
  EXPECT_EQ(Metric("ferry_pipes_undersized_total"), 0);
}

// An upgrade as the service runs it: a second ferry_server, started with --take-over as
// the same user beside the first, takes its listening sockets, its connections and its
// state. The ports stay, no connection is refused meanwhile (a prober connects and
// fetches throughout), one kept open (as Spark's clients keep theirs) fetches on with
// no fetch failed, the registration made with the first is served by the second, and
// the first exits 0.
TEST_F(UnprivilegedSparkTest, ANewServerTakesOverWithNothingRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(Registration("1", dirs_)).type, sw::MessageType::kRpcResponse);
    ASSERT_EQ(FetchOne(client), testing::PartitionBytes(3, 1000, 1, 20));
  }
  const uint16_t spark_port = server_->spark_port();
  const uint16_t data_port = server_->data_port();
  const std::string expected = testing::PartitionBytes(3, 1000, 1, 20);
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::atomic<int> cut{0};
  std::atomic<int> wrong{0};
  std::atomic<int> kept_served{0};
  std::atomic<int> kept_failed{0};
  std::thread kept([&] {
    SparkClient client(spark_port);
    for (int i = 0; i < 20000 && !stop.load(); ++i) {
      if (FetchOne(client) != expected) {
        kept_failed++;
        return;
      }
      kept_served++;
    }
  });
  // Bounded: 20,000 fetches or the test's end.
  std::thread prober([&] {
    for (int i = 0; i < 20000 && !stop.load(); ++i) {
      SparkClient probe(spark_port);  // a refused connect fails the test here
      const std::string got = FetchOne(probe);
      if (got == expected) {
        served++;
      } else if (got == "closed" || absl::StartsWith(got, "rpc failure: ")) {
        cut++;  // ended by the old server's drain before it read the request
      } else {
        wrong++;
      }
    }
  });
  ASSERT_TRUE(testing::WaitFor([&] { return served.load() > 20 && kept_served.load() > 20; }));
  const int before = served.load();
  const int kept_before = kept_served.load();
  absl::StatusOr<std::unique_ptr<ServerProcess>> next = StartServer({"--take-over"}, "next.log");
  ASSERT_TRUE(next.ok()) << next.status();
  absl::StatusOr<int> old_exit = server_->SignalAndWait(0, absl::Seconds(30));
  ASSERT_TRUE(old_exit.ok()) << old_exit.status();
  EXPECT_TRUE(WIFEXITED(*old_exit) && WEXITSTATUS(*old_exit) == 0) << *old_exit;
  const pid_t old_pid = server_->pid();
  server_ = *std::move(next);
  ASSERT_TRUE(testing::WaitFor([&] {
    return served.load() > before + 20 &&
           (kept_served.load() > kept_before + 20 || kept_failed > 0);
  }));
  stop = true;
  prober.join();
  kept.join();
  std::printf(
      "across the hand-over: %d fetches served, %d cut, %d wrong; on the connection kept: %d "
      "served, %d failed\n",
      served.load(), cut.load(), wrong.load(), kept_served.load(), kept_failed.load());
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(kept_failed.load(), 0);
  EXPECT_EQ(server_->spark_port(), spark_port);
  EXPECT_EQ(server_->data_port(), data_port);
  EXPECT_EQ(ServerUid(), uid_);
  EXPECT_TRUE(absl::StrContains(Log("next.log"), absl::StrCat("taken over from pid ", old_pid)))
      << Log("next.log");
  EXPECT_TRUE(absl::StrContains(Log("next.log"), "connections handed over")) << Log("next.log");
  EXPECT_TRUE(absl::StrContains(Log("server.log"), "handed over")) << Log("server.log");
  // The registration came with the state: served without registering again.
  SparkClient after(server_->spark_port());
  EXPECT_EQ(FetchOne(after), expected);
  EXPECT_GE(Metric("ferry_spark_executors_registered"), 1);
}

// A stream a client opened and asks nothing more of (its task gone) does not hold a
// hand-over: its connection goes to the new server without it, none is cut, and the
// client fetches on over it.
TEST_F(UnprivilegedSparkTest, AStreamNobodyReadsDoesNotHoldAHandOver) {
  ASSERT_NO_FATAL_FAILURE(Start());
  SparkClient client(server_->spark_port());
  ASSERT_EQ(client.Call(Registration("1", dirs_)).type, sw::MessageType::kRpcResponse);
  // Two chunks; only the first is asked for.
  ASSERT_EQ(testing::FetchFirstChunk(client, Fetch({1, 2})),
            testing::PartitionBytes(3, 1000, 1, 20));
  absl::StatusOr<std::unique_ptr<ServerProcess>> next = StartServer({"--take-over"}, "next.log");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(server_->SignalAndWait(0, absl::Seconds(60)).ok());
  server_ = *std::move(next);
  EXPECT_TRUE(absl::StrContains(Log("server.log"), "1 connections released, 0 closed"))
      << Log("server.log");
  EXPECT_TRUE(absl::StrContains(Log("server.log"), " 0 cut")) << Log("server.log");
  EXPECT_EQ(FetchOne(client), testing::PartitionBytes(3, 1000, 1, 20));
}

// The new server fails after the old one handed over its sockets (here: its metrics
// address is taken): the old one serves again, on the same ports, and keeps its state
// files its own (a registration made after is there after a restart).
TEST_F(UnprivilegedSparkTest, AHandOverThatFailsLeavesTheOldServerServing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(Registration("1", dirs_)).type, sw::MessageType::kRpcResponse);
  }
  uint16_t busy = 0;
  const UniqueFd taken = testing::ListenLoopback(&busy, 1);
  absl::StatusOr<std::unique_ptr<ServerProcess>> next =
      StartServer({"--take-over", absl::StrCat("--metrics-address=127.0.0.1:", busy)}, "next.log");
  ASSERT_FALSE(next.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] { return absl::StrContains(Log("server.log"), "serving again"); }, absl::Seconds(30)))
      << Log("server.log");
  SparkClient client(server_->spark_port());
  EXPECT_EQ(FetchOne(client), testing::PartitionBytes(3, 1000, 1, 20));
  EXPECT_TRUE(ControlClient(absl::Seconds(5)).GetServerInfo(server_->control_target()).ok());
  EXPECT_GE(Metric("ferry_spark_executors_registered"), 1);
  ASSERT_EQ(client.Call(Registration("2", {scratch_ + "/roots/c"})).type,
            sw::MessageType::kRpcResponse);
  ASSERT_TRUE(server_->SignalAndWait(SIGTERM, absl::Seconds(20)).ok());
  ASSERT_NO_FATAL_FAILURE(Start());
  SparkClient after(server_->spark_port());
  const Reply dirs = after.Call(sw::EncodeGetLocalDirsForExecutors({kApp, {"1", "2"}}));
  EXPECT_EQ(dirs.type, sw::MessageType::kRpcResponse) << dirs.text;
}

// A server killed leaves its hand-over socket: the next one, asked to take over, finds
// no one there and starts on its own, with the state the killed one kept.
TEST_F(UnprivilegedSparkTest, TakingOverFromAKilledServerStartsAfresh) {
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(Registration("1", dirs_)).type, sw::MessageType::kRpcResponse);
  }
  ASSERT_TRUE(server_->SignalAndWait(SIGKILL, absl::Seconds(20)).ok());
  ASSERT_TRUE(fs::exists(scratch_ + "/state/ferry_server.sock"));
  absl::StatusOr<std::unique_ptr<ServerProcess>> next = StartServer({"--take-over"}, "next.log");
  ASSERT_TRUE(next.ok()) << next.status();
  server_ = *std::move(next);
  EXPECT_TRUE(absl::StrContains(Log("next.log"), "no server answers")) << Log("next.log");
  SparkClient client(server_->spark_port());
  EXPECT_EQ(FetchOne(client), testing::PartitionBytes(3, 1000, 1, 20));
  // That server hands over in turn, as each pod of a DaemonSet (all with --take-over) does.
  absl::StatusOr<std::unique_ptr<ServerProcess>> third = StartServer({"--take-over"}, "third.log");
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(absl::StrContains(Log("third.log"), "taken over from pid")) << Log("third.log");
  absl::StatusOr<int> second_exit = server_->SignalAndWait(0, absl::Seconds(30));
  ASSERT_TRUE(second_exit.ok()) << second_exit.status();
  server_ = *std::move(third);
  SparkClient after(server_->spark_port());
  EXPECT_EQ(FetchOne(after), testing::PartitionBytes(3, 1000, 1, 20));
}

}  // namespace
}  // namespace ferry
