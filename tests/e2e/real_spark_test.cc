// Real Spark applications on ferry_server: a standalone Spark cluster (a master and two
// workers, separate JVMs, tests/testing/spark_cluster.h) whose node shuffle service is
// ferry_server's Spark front door. Spark's sort shuffle writes the map outputs, the
// executors register themselves, and the reducers fetch through Spark's own
// ShuffleBlockFetcherIterator. Each application runs three times on the same cluster:
// with no external shuffle service, with Spark's own (a process of its own, serving the
// host as ferry_server does) and with ferry_server; all three give the same answers, and
// ferry_server's counters show it served the blocks. Then once more with ferry_server,
// the reducers fetching to disk over Spark's old fetch protocol.
//
// A second application reads its shuffles while the executors that wrote them come and
// go: released by dynamic allocation, SIGKILLed mid-reduce, with ferry_server restarted
// between two jobs and a byte of its files flipped on disk; then the driver removes its
// shuffles through ferry_server, and when it ends, ferry_server forgets its executors
// once their worker has deleted their dirs.
//
// Every Spark version scripts/setup installed runs (3.5.x and the newest 4.x); without
// any, or without Java, the test skips, saying so. Reducers fetch every remote block
// through the service (spark.shuffle.readHostLocalDisk=false): all executors share one
// host here, where Spark would otherwise read each other's files straight from disk.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/spark/layout.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/certificate.h"
#include "tests/testing/host_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/server_process.h"
#include "tests/testing/spark_apps.h"
#include "tests/testing/spark_cluster.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::AnswersDiffer;
using ::ferry::testing::DataFilesByShuffle;
using ::ferry::testing::EnvironmentOf;
using ::ferry::testing::ExecutorOf;
using ::ferry::testing::ExecutorsBeneath;
using ::ferry::testing::JsonField;
using ::ferry::testing::kRddAnswers;
using ::ferry::testing::kSqlAnswers;
using ::ferry::testing::ResultsByJob;
using ::ferry::testing::ShuffleFiles;
using ::ferry::testing::SparkCluster;
using ::ferry::testing::SparkDistribution;
using ::ferry::testing::SumsDiffer;
using ::ferry::testing::TempDir;
using ::ferry::testing::Touch;

constexpr char kJobs[] = "tests/e2e/spark_jobs.py";
constexpr absl::Duration kJobTimeout = absl::Minutes(3);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The block manager dir (blockmgr-*) a shuffle file is in: its executor's
// (blockmgr-UUID/NN/shuffle_...).
std::string BlockManagerDirOf(const std::string& path) {
  return std::filesystem::path(path).parent_path().parent_path();
}

// Flips one byte in the middle of the largest partition of a data file (its index file
// beside it: big-endian offsets), as a disk that returns wrong bytes would. The file's
// size and its checksum file stay as they were.
absl::Status FlipAByte(const std::string& data_path, const std::string& index_path) {
  const std::string index = ReadFile(index_path);
  if (index.size() < 16 || index.size() % 8 != 0) {
    return absl::DataLossError(absl::StrCat(index_path, ": ", index.size(), " bytes"));
  }
  uint64_t best_start = 0;
  uint64_t best_length = 0;
  uint64_t previous = 0;
  for (size_t i = 0; i < index.size(); i += 8) {
    uint64_t offset = 0;
    for (size_t b = 0; b < 8; ++b) offset = offset << 8 | static_cast<uint8_t>(index[i + b]);
    if (i > 0 && offset - previous > best_length) {
      best_start = previous;
      best_length = offset - previous;
    }
    previous = offset;
  }
  if (best_length == 0) return absl::NotFoundError(absl::StrCat(data_path, ": no partition"));
  UniqueFd fd(::open(data_path.c_str(), O_RDWR | O_CLOEXEC));
  char byte = 0;
  const off_t at = static_cast<off_t>(best_start + best_length / 2);
  if (!fd.valid() || ::pread(fd.get(), &byte, 1, at) != 1) {
    return absl::ErrnoToStatus(errno, absl::StrCat("read ", data_path, " at ", at));
  }
  byte = static_cast<char>(byte ^ 0x5A);
  if (::pwrite(fd.get(), &byte, 1, at) != 1) {
    return absl::ErrnoToStatus(errno, absl::StrCat("write ", data_path, " at ", at));
  }
  return absl::OkStatus();
}

// What every run shares: two one-core executors of 512 MiB, no UI.
std::map<std::string, std::string> BaseConf() {
  return {{"spark.executor.memory", "512m"}, {"spark.executor.cores", "1"},
          {"spark.cores.max", "2"},          {"spark.driver.memory", "512m"},
          {"spark.ui.enabled", "false"},     {"spark.shuffle.readHostLocalDisk", "false"}};
}
std::map<std::string, std::string> WithService(uint16_t port) {
  std::map<std::string, std::string> conf = BaseConf();
  conf["spark.shuffle.service.enabled"] = "true";
  conf["spark.shuffle.service.port"] = absl::StrCat(port);
  return conf;
}

// The clusters the plain RealSparkTest cases share (spark.authenticate and TLS are the
// whole cluster's, so those cases start their own), one per Spark version: started by
// the first case of that version and kept until the suite ends (GoogleTest runs the
// versions' cases in turn). A case finds its cluster with no application running
// (Submit waits for the driver), no Spark shuffle service (each case's are stopped when
// it ends) and no shuffle file of an earlier case left (a worker deletes an
// application's dirs when it ends; SetUp waits for that): its ferry_server, data dirs
// and state dir are its own.
struct SharedSparkCluster {
  TempDir work;
  TempDir local;
  std::unique_ptr<SparkCluster> cluster;
};
std::map<std::string, std::unique_ptr<SharedSparkCluster>>& SharedClusters() {
  static auto* shared = new std::map<std::string, std::unique_ptr<SharedSparkCluster>>();
  return *shared;
}

class RealSparkTest : public ::testing::TestWithParam<SparkDistribution> {
 protected:
  static void TearDownTestSuite() { SharedClusters().clear(); }

  void SetUp() override {
    SparkCluster::Options cluster;
    cluster.spark = GetParam();
    cluster.auth_secret = auth_secret_;
    cluster.defaults = cluster_defaults_;
    SharedSparkCluster* shared = nullptr;
    if (auth_secret_.empty() && cluster_defaults_.empty()) {
      std::unique_ptr<SharedSparkCluster>& slot = SharedClusters()[GetParam().version];
      if (slot == nullptr) slot = std::make_unique<SharedSparkCluster>();
      shared = slot.get();
    }
    local_root_ = shared != nullptr ? shared->local.path() : local_.path();
    std::unique_ptr<SparkCluster>& owner = shared != nullptr ? shared->cluster : own_cluster_;
    if (owner == nullptr) {
      cluster.work_dir = shared != nullptr ? shared->work.path() : work_.path();
      cluster.local_dir_root = local_root_;
      absl::StatusOr<std::unique_ptr<SparkCluster>> started = SparkCluster::Start(cluster);
      ASSERT_TRUE(started.ok()) << started.status();
      owner = *std::move(started);
    }
    cluster_ = owner.get();
    if (shared != nullptr) {
      std::map<std::string, std::string> left;
      ASSERT_TRUE(testing::WaitFor([&] { return (left = ShuffleFiles(local_root_)).empty(); },
                                   absl::Seconds(30)))
          << left.size() << " shuffle files of an earlier case left, " << left.begin()->second;
    }
    options_ = testing::TestServerOptions(data_.path(), {});
    options_.spark.address = "127.0.0.1:0";
    options_.spark.executors.dir_roots = {local_root_};
    options_.spark.executors.state_dir = state_.path();
    options_.sweep_interval = absl::Seconds(1);
    options_.spark.service.serve_rdd_blocks = true;  // CachedRddBlocksOutliveTheirExecutors
    options_.spark.tls = tls_;
    if (!auth_secret_.empty()) {
      options_.spark.auth.secret_file = absl::StrCat(secrets_.path(), "/secret");
      std::ofstream(options_.spark.auth.secret_file) << auth_secret_;
    }
    server_ = testing::StartServer(options_);
  }

  void TearDown() override {
    // A shared cluster's shuffle services are this case's: the next case finds none.
    if (own_cluster_ == nullptr && cluster_ != nullptr) cluster_->StopSparkShuffleServices();
  }

  // WithService, and dynamic allocation that releases executors idle for 2 s (at most 2
  // at once), so that shuffles outlive the executors that wrote them.
  static std::map<std::string, std::string> WithDynamicAllocation(uint16_t port) {
    std::map<std::string, std::string> conf = WithService(port);
    conf["spark.dynamicAllocation.enabled"] = "true";
    conf["spark.dynamicAllocation.executorIdleTimeout"] = "2s";
    conf["spark.dynamicAllocation.minExecutors"] = "0";
    conf["spark.dynamicAllocation.maxExecutors"] = "2";
    return conf;
  }

  // Runs the jobs; their RESULT lines.
  std::vector<std::string> Run(const std::string& what,
                               const std::map<std::string, std::string>& conf,
                               const std::vector<std::string>& jobs,
                               absl::Duration timeout = kJobTimeout) {
    const absl::Time start = absl::Now();
    absl::StatusOr<SparkCluster::Submitted> ran = cluster_->Submit(kJobs, jobs, conf, timeout);
    EXPECT_TRUE(ran.ok()) << ran.status();
    if (!ran.ok()) return {};
    const std::string tail =
        ran->output.substr(ran->output.size() > 6000 ? ran->output.size() - 6000 : 0);
    EXPECT_EQ(ran->exit_code, 0) << what << ": the application failed:\n"
                                 << tail << "\n"
                                 << cluster_->DiagnosticLogs();
    std::printf("Spark %s, %s: %zu results in %s\n", GetParam().version.c_str(), what.c_str(),
                ran->results.size(), absl::FormatDuration(absl::Now() - start).c_str());
    last_output_ = ran->output;
    return ran->results;
  }

  // Runs the checked jobs, which must fail; the driver's output.
  std::string RunToFailure(const std::string& what,
                           const std::map<std::string, std::string>& conf) {
    absl::StatusOr<SparkCluster::Submitted> ran =
        cluster_->Submit(kJobs, {"checked"}, conf, kJobTimeout);
    EXPECT_TRUE(ran.ok()) << ran.status();
    if (!ran.ok()) return "";
    EXPECT_NE(ran->exit_code, 0) << what << ": the application did not fail";
    EXPECT_NE(ran->exit_code, -1) << what << ": the application hung";
    for (absl::string_view line : absl::StrSplit(ran->output, '\n')) {
      if (absl::StrContains(line, "Job aborted")) {
        std::printf("Spark %s, %s: %s\n", GetParam().version.c_str(), what.c_str(),
                    std::string(line.substr(0, 600)).c_str());
        break;
      }
    }
    return ran->output;
  }

  // Ferry's Spark plugin of this Spark's line, registering with the ferry_server on
  // 127.0.0.1:`port`, and no shuffle service of Spark's.
  std::map<std::string, std::string> PluginConf(uint16_t port) const {
    const std::string jar = std::filesystem::absolute(
        absl::StrCat("client/spark/ferry-spark-plugin_",
                     absl::StartsWith(GetParam().version, "3.") ? "2.12" : "2.13", ".jar"));
    std::map<std::string, std::string> conf = BaseConf();
    conf["spark.shuffle.sort.io.plugin.class"] = "org.ferry.spark.FerryShuffleDataIO";
    conf["spark.driver.extraClassPath"] = jar;
    conf["spark.executor.extraClassPath"] = jar;
    conf["spark.ferry.node.host"] = "127.0.0.1";
    conf["spark.shuffle.service.port"] = absl::StrCat(port);
    return conf;
  }

  // ferry_server's Spark front door sent blocks since `before` (a CollectMetrics()).
  // Ferry's C++ client against Spark's own shuffle service of this version, started on
  // this cluster with `conf` over its defaults: registers an executor of `app` whose one
  // map output it wrote, and fetches its blocks in memory and to disk with `options`;
  // `refused` (a client the service must not serve) fails.
  void FetchFromSparksOwnService(const std::map<std::string, std::string>& conf,
                                 const std::string& app, SparkFetchOptions options,
                                 const SparkFetchOptions& refused) {
    const uint16_t port = testing::FreeLoopbackPort();
    ASSERT_TRUE(cluster_->StartSparkShuffleService(port, conf).ok());
    // An executor's dirs beneath the service's own SPARK_LOCAL_DIRS, as Spark's requires.
    const std::vector<std::string> dirs = {local_root_ + "/" + app + "/blockmgr-0",
                                           local_root_ + "/" + app + "/blockmgr-1"};
    for (const std::string& dir : dirs) std::filesystem::create_directories(dir);
    const std::vector<size_t> sizes = {100, 70000, 0, 5};
    ASSERT_TRUE(testing::WriteSparkMapOutput(dirs, 8, 0, 7, sizes).ok());
    const std::string address = absl::StrCat("127.0.0.1:", port);
    SparkShuffleClient client;
    ASSERT_TRUE(client
                    .RegisterExecutor(
                        address,
                        {app, "0", {dirs, 8, "org.apache.spark.shuffle.sort.SortShuffleManager"}},
                        options)
                    .ok());
    std::vector<spark::ShuffleBlockId> blocks;
    for (int32_t r = 0; r < 4; ++r) blocks.push_back({0, 7, r, r + 1});
    for (const bool to_disk : {false, true}) {
      options.fetch_to_disk = to_disk;
      BuffersSink sink(blocks.size());
      absl::StatusOr<SparkFetchStats> fetched =
          client.Fetch(address, app, "0", blocks, sink, options);
      ASSERT_TRUE(fetched.ok()) << fetched.status();
      for (int32_t r = 0; r < 4; ++r) {
        EXPECT_EQ(sink.blocks()[r], testing::PartitionBytes(0, 7, r, sizes[r])) << r;
      }
    }
    BuffersSink sink(1);
    EXPECT_FALSE(client.Fetch(address, app, "0", {blocks[0]}, sink, refused).ok());
  }

  void ExpectBlocksSentSince(const std::vector<MetricFamilySamples>& before) const {
    const std::vector<MetricFamilySamples> after = server_->CollectMetrics();
    auto sent = [&](const char* name) {
      return testing::MetricSum(after, name, "front_door", "spark") -
             testing::MetricSum(before, name, "front_door", "spark");
    };
    const double blocks = sent("ferry_sent_blocks_total");
    const double bytes = sent("ferry_sent_bytes_total");
    std::printf("ferry_server sent Spark's reducers %.0f blocks, %.0f bytes\n", blocks, bytes);
    EXPECT_GT(blocks, 0);
    EXPECT_GT(bytes, 0);
  }

  // What RunHandingOver did.
  struct HandedOver {
    int times = 0;
    size_t connections = 0;                  // handed over with the server, in all
    std::vector<MetricFamilySamples> first;  // the first server's metrics at its hand-over
    std::string failure;
  };
  // Runs `jobs` while ferry_server is handed over to a new server (HandOverServer) each
  // time the one serving has sent Spark's reducers 200 blocks, at most `max` times; the
  // jobs' results. Checks, by the lines Spark's executors log for each, that none
  // retried or failed a fetch, or found its connection to ferry_server closed.
  std::vector<std::string> RunHandingOver(const std::string& what,
                                          const std::map<std::string, std::string>& conf,
                                          const std::vector<std::string>& jobs, int max,
                                          HandedOver* did) {
    const auto trouble = [&] {
      return testing::FetchTroubleIn(cluster_->ExecutorLogs(), server_->spark_port());
    };
    // Read from the first hand-over on (a connection may be closed before, silent past
    // ferry_server's first-request timeout).
    std::optional<testing::LogLines> before;
    std::atomic<bool> ended{false};
    std::vector<std::string> results;
    std::thread app([&] {
      results = Run(what, conf, jobs);
      ended = true;
    });
    const auto sent = [&] {
      return testing::MetricSum(server_->CollectMetrics(), "ferry_sent_blocks_total", "front_door",
                                "spark");
    };
    while (did->times < max) {
      if (!testing::WaitFor([&] { return ended.load() || sent() >= 200; }, kJobTimeout) || ended) {
        break;
      }
      if (!before.has_value()) {
        before = trouble();
        did->first = server_->CollectMetrics();
      }
      absl::StatusOr<size_t> handed = testing::HandOverServer(&server_, options_);
      if (!handed.ok()) {
        did->failure = handed.status().ToString();
        break;
      }
      did->times++;
      did->connections += *handed;
    }
    app.join();
    std::printf("Spark %s, %s: handed over %d times, %zu connections with it\n",
                GetParam().version.c_str(), what.c_str(), did->times, did->connections);
    EXPECT_EQ(did->failure, "");
    if (before.has_value()) {
      const std::vector<std::string> since = testing::FetchTroubleSince(*before, trouble());
      EXPECT_TRUE(since.empty()) << absl::StrJoin(since, "\n");
    }
    EXPECT_FALSE(absl::StrContains(last_output_, "FetchFailed")) << last_output_;
    return results;
  }

  // A cluster of the case's own (with spark.authenticate or TLS): its dirs.
  TempDir work_;
  TempDir local_;
  TempDir data_;
  TempDir state_;
  TempDir secrets_;
  // spark.authenticate's secret for the cluster and ferry_server; empty: off.
  std::string auth_secret_;
  // Settings of the whole cluster, and ferry_server's TLS (both empty: none).
  std::map<std::string, std::string> cluster_defaults_;
  SparkTls::Options tls_;
  FerryServerOptions options_;
  std::string last_output_;  // the driver's, of the last application run
  std::unique_ptr<FerryServer> server_;
  // The case's own cluster, destroyed first: no executor outlives the server.
  std::unique_ptr<SparkCluster> own_cluster_;
  // The cluster the case runs on (its own or the shared one), and its executors' root.
  SparkCluster* cluster_ = nullptr;
  std::string local_root_;
};

// The answers of the RDD and SQL jobs are the same computed without Spark, with Spark's
// shuffle service and with ferry_server: fetched to memory, and streamed to disk over the
// old protocol.
TEST_P(RealSparkTest, JobsGiveTheAnswersComputedWithoutSparkWithFerryAndSparksService) {
  const std::vector<std::string> jobs = {"rdd", "sql"};
  const uint16_t spark_port = testing::FreeLoopbackPort();
  ASSERT_TRUE(cluster_->StartSparkShuffleService(spark_port).ok());
  const std::vector<std::string> spark =
      Run("Spark's shuffle service", WithService(spark_port), jobs);
  EXPECT_EQ(AnswersDiffer(spark, kRddAnswers), "");
  EXPECT_EQ(AnswersDiffer(spark, kSqlAnswers), "");

  const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
  const std::vector<std::string> ferry =
      Run("ferry_server", WithService(server_->spark_port()), jobs);
  EXPECT_EQ(AnswersDiffer(ferry, kRddAnswers), "");
  EXPECT_EQ(AnswersDiffer(ferry, kSqlAnswers), "");
  EXPECT_EQ(ferry, spark);
  ExpectBlocksSentSince(before);

  // The other ways Spark's reducers fetch: every block over 1 KiB streamed to a file
  // (StreamRequest, not ChunkFetch), and the old protocol (OpenBlocks of block ids).
  std::map<std::string, std::string> conf = WithService(server_->spark_port());
  conf["spark.network.maxRemoteBlockSizeFetchToMem"] = "1k";
  conf["spark.shuffle.useOldFetchProtocol"] = "true";
  EXPECT_EQ(AnswersDiffer(Run("ferry_server, fetched to disk over the old protocol", conf, {"rdd"}),
                          kRddAnswers),
            "");
}

// spark.shuffle.service.fetch.rdd.enabled: a disk-persisted RDD outlives the executors
// that cached it, and the executors after them fetch its blocks from ferry_server
// (--spark-rdd-blocks) instead of computing them again. All executors share this host,
// where Spark's driver would send them to read the gone executor's files from disk
// themselves; spark.storage.localDiskByExecutors.cacheSize=0 leaves it no dirs to send.
// An upgrade mid-shuffle costs Spark nothing: while an application's 240 reducers fetch
// from ferry_server, it is handed over to a new server again and again, its connections
// with it. The answers are right, and no executor retried or failed a fetch or found
// its connection closed. (Restarts instead, in the same loop, make Spark log each.)
TEST_P(RealSparkTest, HandOversMidShuffleCostNoFetch) {
  HandedOver did;
  const std::vector<std::string> results = RunHandingOver(
      "ferry_server handed over mid-shuffle", WithService(server_->spark_port()), {"many-reduces"},
      /*max=*/8, &did);
  std::map<std::string, std::string> by_job = testing::ResultsByJob(results);
  EXPECT_EQ(SumsDiffer(by_job, "shuffled", "expected"), "") << last_output_;
  EXPECT_GE(did.times, 3);
  EXPECT_GT(did.connections, 0u);
}

TEST_P(RealSparkTest, CachedRddBlocksOutliveTheirExecutors) {
  std::map<std::string, std::string> conf = WithDynamicAllocation(server_->spark_port());
  conf["spark.shuffle.service.fetch.rdd.enabled"] = "true";
  conf["spark.storage.localDiskByExecutors.cacheSize"] = "0";
  const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
  const std::vector<std::string> results =
      Run("ferry_server, cached RDD blocks of executors gone", conf, {"cached"});
  std::map<std::string, std::string> by_job;
  for (const std::string& line : results) by_job[JsonField(line, "job")] = line;
  ASSERT_EQ(by_job.size(), 3u) << absl::StrJoin(results, "\n");
  const std::string& expected = by_job["expected-cached"];
  for (const char* job : {"cached", "cached-after-executors-gone"}) {
    EXPECT_EQ(JsonField(by_job[job], "n"), JsonField(expected, "n")) << by_job[job];
    EXPECT_EQ(JsonField(by_job[job], "total"), JsonField(expected, "total")) << by_job[job];
  }
  EXPECT_EQ(JsonField(by_job["cached"], "computed"), "8") << by_job["cached"];
  EXPECT_EQ(JsonField(by_job["cached-after-executors-gone"], "recomputed"), "0")
      << by_job["cached-after-executors-gone"] << "\n"
      << cluster_->DiagnosticLogs();
  ExpectBlocksSentSince(before);
}

// Ferry's Spark plugin (client/spark: spark.shuffle.sort.io.plugin.class) with no
// shuffle service of Spark's and no shuffle tracking: executors write their map outputs
// into ferry_server's dirs and register them there, dynamic allocation releases every
// executor once the checked shuffle is written, and new executors read it from
// ferry_server. Answers checked against the same sums computed without Spark.
TEST_P(RealSparkTest, FerrysPluginLetsExecutorsGoWithoutAServiceOfSparks) {
  std::map<std::string, std::string> conf = PluginConf(server_->spark_port());
  conf["spark.dynamicAllocation.enabled"] = "true";
  conf["spark.dynamicAllocation.shuffleTracking.enabled"] = "false";
  conf["spark.dynamicAllocation.executorIdleTimeout"] = "2s";
  conf["spark.dynamicAllocation.minExecutors"] = "0";
  conf["spark.dynamicAllocation.maxExecutors"] = "2";
  TempDir handshakes;
  std::atomic<bool> app_ended{false};
  size_t registered = 0;
  std::map<std::string, std::string> held;
  std::vector<MetricFamilySamples> at_held;
  std::thread director([&] {
    if (!testing::WaitFor(
            [&] { return app_ended || std::filesystem::exists(handshakes.path() + "/held.ready"); },
            absl::Minutes(3))) {
      return;
    }
    // Every executor is gone; what they wrote is in ferry_server's dirs, registered.
    registered = server_->spark_door()->executors()->size();
    held = ShuffleFiles(local_root_);
    at_held = server_->CollectMetrics();
    Touch(handshakes.path() + "/held.done");
  });
  const std::vector<std::string> results =
      Run("Ferry's plugin, executors released", conf, {"hold-idle=" + handshakes.path()});
  app_ended = true;
  director.join();
  std::map<std::string, std::string> by_job = testing::ResultsByJob(results);
  EXPECT_EQ(SumsDiffer(by_job, "shuffled", "expected"), "") << last_output_;
  EXPECT_EQ(SumsDiffer(by_job, "read-again", "expected"), "") << last_output_;
  EXPECT_GT(registered, 0u);
  size_t in_ferry_dirs = 0;
  for (const auto& [name, path] : held) {
    if (absl::StrContains(path, "/ferry-app-")) ++in_ferry_dirs;
  }
  EXPECT_GT(in_ferry_dirs, 0u) << "no map output in the plugin's dirs";
  // Read again by new executors, from ferry_server: the map outputs of the executors that
  // went stayed registered (nothing was computed again).
  ASSERT_FALSE(at_held.empty()) << "the application did not reach held";
  ExpectBlocksSentSince(at_held);
  EXPECT_EQ(JsonField(by_job["read-again"], "stages_run"), "1") << by_job["read-again"];
}

// What Ferry's plugin does not run on: a ferry_server it cannot reach, and one that does
// not serve the executors' dirs. Either way the first map task fails with the reason,
// which the driver reports as the job's failure (in seconds, not a hang), and the
// plugin's dirs, empty, go: nothing is left where nothing serves it.
TEST_P(RealSparkTest, FerrysPluginFailsTheJobWithTheReasonWhenItsServerWillNotKeepIt) {
  const uint16_t closed = testing::FreeLoopbackPort();
  std::string driver = RunToFailure("Ferry's plugin, nothing listening", PluginConf(closed));
  EXPECT_TRUE(absl::StrContains(
      driver, absl::StrCat("with the node's ferry_server at 127.0.0.1:", closed, " failed: ")))
      << driver;
  EXPECT_TRUE(absl::StrContains(driver, "Connection refused")) << driver;

  TempDir elsewhere_data;
  TempDir elsewhere_root;
  FerryServerOptions elsewhere = testing::TestServerOptions(elsewhere_data.path(), {});
  elsewhere.spark.address = "127.0.0.1:0";
  elsewhere.spark.executors.dir_roots = {elsewhere_root.path()};
  std::unique_ptr<FerryServer> other = testing::StartServer(elsewhere);
  driver = RunToFailure("Ferry's plugin, its dirs not served", PluginConf(other->spark_port()));
  EXPECT_TRUE(absl::StrContains(driver, "is not beneath a root this server serves")) << driver;
  EXPECT_EQ(other->spark_door()->executors()->size(), 0u);

  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(local_root_)) {
    if (absl::StartsWith(entry.path().filename().string(), "ferry-")) {
      left.push_back(entry.path());
    }
  }
  EXPECT_EQ(absl::StrJoin(left, ", "), "");
}

// spark.authenticate on the whole cluster (master, workers, applications) and on
// ferry_server, with one shared secret, as a standalone cluster sets it.
class RealSparkAuthTest : public RealSparkTest {
 protected:
  void SetUp() override {
    auth_secret_ = "the-cluster-secret-0f9e";
    RealSparkTest::SetUp();
  }
};

// Executors register and reducers fetch after authenticating: once with SASL, once
// with Spark's AuthEngine and AES-CTR on every byte (spark.network.crypto.enabled), in
// AuthEngine version 1 (Spark's default) on Spark 3.x and version 2 on Spark 4, and on
// Spark 4 once with SASL encryption (spark.authenticate.enableSaslEncryption: Spark
// 3.5's client does it against ferry_server in spark_test). An encrypted application's
// executors must not fall back to plain SASL with ferry_server. Then Ferry's client
// reads the version's own service in those modes.
TEST_P(RealSparkAuthTest,
       JobsWithSparkAuthenticateShuffleThroughFerryAndFerrysClientReadsSparksService) {
  const bool spark3 = absl::StartsWith(GetParam().version, "3.");
  const int engine_version = spark3 ? 1 : 2;
  enum class Mode { kSasl, kSaslEncryption, kAuthEngine };
  std::vector<Mode> modes = {Mode::kSasl, Mode::kAuthEngine};
  if (!spark3) modes.push_back(Mode::kSaslEncryption);
  for (const Mode mode : modes) {
    std::map<std::string, std::string> conf = WithService(server_->spark_port());
    std::string name = "ferry_server, spark.authenticate (SASL)";
    if (mode == Mode::kAuthEngine) {
      conf["spark.network.crypto.enabled"] = "true";
      conf["spark.network.crypto.authEngineVersion"] = absl::StrCat(engine_version);
      name = absl::StrCat("ferry_server, spark.authenticate, AuthEngine v", engine_version,
                          " and AES-CTR");
    } else if (mode == Mode::kSaslEncryption) {
      conf["spark.authenticate.enableSaslEncryption"] = "true";
      name = "ferry_server, spark.authenticate, SASL encryption";
    }
    const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
    // With SASL (plain frames after it) ferry_server is handed over mid-shuffle too:
    // the authenticated connections go on with the new server.
    HandedOver handed;
    const std::vector<std::string> results =
        mode == Mode::kSasl ? RunHandingOver(name, conf, {"many-reduces"}, 4, &handed)
                            : Run(name, conf, {"checked"});
    ASSERT_EQ(results.size(), 2u) << absl::StrJoin(results, "\n");
    EXPECT_EQ(absl::StrReplaceAll(results[0], {{"\"expected\"", "\"shuffled\""}}), results[1]);
    if (mode == Mode::kSasl) {
      EXPECT_GE(handed.times, 2);
      EXPECT_GT(handed.connections, 0u);
      // The executors authenticated with the first server, plain after SASL.
      const auto grew = [&](const char* outcome) {
        return testing::MetricSum(handed.first, "ferry_spark_authentications_total", "outcome",
                                  outcome) -
               testing::MetricSum(before, "ferry_spark_authentications_total", "outcome", outcome);
      };
      EXPECT_GT(grew("authenticated"), 0);
      EXPECT_EQ(grew("encrypted"), 0);
      continue;
    }
    ExpectBlocksSentSince(before);
    const std::vector<MetricFamilySamples> after = server_->CollectMetrics();
    const auto grew = [&](const char* family, const char* label, const std::string& value) {
      return testing::MetricSum(after, family, label, value) -
             testing::MetricSum(before, family, label, value);
    };
    // Every handshake with ferry_server encrypted: none fell back to plain SASL.
    EXPECT_GT(grew("ferry_spark_authentications_total", "outcome", "encrypted"), 0) << name;
    EXPECT_EQ(grew("ferry_spark_authentications_total", "outcome", "authenticated"), 0) << name;
    if (mode == Mode::kAuthEngine) {
      // (Executors' logs do say "New auth protocol failed, trying SASL": for their
      // worker, whose own settings do not enable spark.network.crypto.)
      EXPECT_GT(
          grew("ferry_spark_auth_engine_sessions_total", "version", absl::StrCat(engine_version)),
          0);
      EXPECT_EQ(grew("ferry_spark_auth_engine_sessions_total", "version",
                     absl::StrCat(3 - engine_version)),
                0);
    }
  }
  EXPECT_EQ(testing::MetricSum(server_->CollectMetrics(), "ferry_spark_authentications_total",
                               "outcome", "refused"),
            0);

  // The other way round on the same cluster: Ferry's client against this version's own
  // shuffle service, with its AuthEngine (3.x: version 1; 4.x: version 2, which a
  // version-1 client is not served by) and with SASL encryption (which, with
  // serverAlwaysEncrypt, a client that does not encrypt is not served by).
  SparkFetchOptions engine;
  engine.auth_secret = Secret(auth_secret_);
  engine.auth_engine_version = engine_version;
  SparkFetchOptions other_engine = engine;
  other_engine.auth_engine_version = 3 - engine_version;
  other_engine.io_timeout = absl::Seconds(10);
  SCOPED_TRACE("Ferry's client, Spark's own service");
  FetchFromSparksOwnService(
      {{"spark.network.crypto.enabled", "true"},
       {"spark.network.crypto.authEngineVersion", absl::StrCat(engine_version)}},
      "app-ferry-aes", engine, spark3 ? SparkFetchOptions{} : other_engine);
  SparkFetchOptions sealed;
  sealed.auth_secret = Secret(auth_secret_);
  sealed.sasl_encryption = true;
  SparkFetchOptions unsealed = sealed;
  unsealed.sasl_encryption = false;
  unsealed.io_timeout = absl::Seconds(10);
  FetchFromSparksOwnService({{"spark.authenticate.enableSaslEncryption", "true"},
                             {"spark.network.sasl.serverAlwaysEncrypt", "true"}},
                            "app-ferry-sasl", sealed, unsealed);
}

// Spark 4's TLS for RPC and shuffle (spark.ssl.rpc.enabled) on the whole cluster, one
// self-signed certificate for all (Spark's client trusts the certChain it is given), and
// ferry_server's front door given the same certificate and key; with spark.authenticate
// too, whose SASL runs inside TLS.
class RealSparkTlsTest : public RealSparkTest {
 protected:
  void SetUp() override {
    if (absl::StartsWith(GetParam().version, "3.")) {
      GTEST_SKIP() << "spark.ssl.rpc.enabled is Spark 4's";
    }
    absl::StatusOr<testing::CertificateFiles> made =
        testing::MakeSelfSignedCertificate(certs_.path());
    ASSERT_TRUE(made.ok()) << made.status();
    tls_.cert_file = made->cert;
    tls_.key_file = made->key;
    // PEM files are Netty's way (spark.ssl.rpc.openSslEnabled; without netty-tcnative
    // Netty reads them with the JDK's TLS); Spark's own takes keystores only.
    cluster_defaults_ = {{"spark.ssl.rpc.enabled", "true"},
                         {"spark.ssl.rpc.openSslEnabled", "true"},
                         {"spark.ssl.rpc.certChain", tls_.cert_file},
                         {"spark.ssl.rpc.privateKey", tls_.key_file}};
    auth_secret_ = "the-tls-cluster-secret";
    RealSparkTest::SetUp();
  }

  TempDir certs_;
};

TEST_P(RealSparkTlsTest, JobsOverTlsShuffleThroughFerryAndFerrysClientReadsSparksService) {
  const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
  const std::vector<std::string> results =
      Run("ferry_server, spark.ssl.rpc.enabled and spark.authenticate",
          WithService(server_->spark_port()), {"checked"});
  ASSERT_EQ(results.size(), 2u) << absl::StrJoin(results, "\n");
  EXPECT_EQ(absl::StrReplaceAll(results[0], {{"\"expected\"", "\"shuffled\""}}), results[1]);
  ExpectBlocksSentSince(before);
  const std::vector<MetricFamilySamples> after = server_->CollectMetrics();
  EXPECT_GT(testing::MetricSum(after, "ferry_spark_tls_handshakes_total", "outcome", "completed"),
            0);
  EXPECT_GT(
      testing::MetricSum(after, "ferry_spark_authentications_total", "outcome", "authenticated"),
      0);
  EXPECT_EQ(testing::MetricSum(after, "ferry_spark_authentications_total", "outcome", "refused"),
            0);

  // The other way round on the same cluster: Ferry's client against Spark 4.3.0's own
  // shuffle service, with SASL inside TLS; without TLS, Spark's service does not answer.
  SparkFetchOptions options;
  options.auth_secret = Secret(auth_secret_);
  options.tls_trust_file = tls_.cert_file;
  SparkFetchOptions plain;
  plain.auth_secret = Secret(auth_secret_);
  plain.io_timeout = absl::Seconds(10);
  FetchFromSparksOwnService({}, "app-ferry-tls", options, plain);
}

// Ferry's plugin on the same TLS cluster: its executors register their dirs over TLS and
// authenticated, as Spark's own shuffle client would, and the reducers read from
// ferry_server.
TEST_P(RealSparkTlsTest, FerrysPluginRegistersOverTlsAuthenticated) {
  const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
  const std::vector<std::string> results =
      Run("Ferry's plugin, spark.ssl.rpc.enabled and spark.authenticate",
          PluginConf(server_->spark_port()), {"checked"});
  std::map<std::string, std::string> by_job = testing::ResultsByJob(results);
  EXPECT_EQ(SumsDiffer(by_job, "shuffled", "expected"), "") << last_output_;
  ExpectBlocksSentSince(before);
  const std::vector<MetricFamilySamples> after = server_->CollectMetrics();
  const auto handshakes = [](const std::vector<MetricFamilySamples>& at) {
    return testing::MetricSum(at, "ferry_spark_tls_handshakes_total", "outcome", "completed");
  };
  EXPECT_GT(handshakes(after), handshakes(before));
  EXPECT_EQ(testing::MetricSum(after, "ferry_spark_authentications_total", "outcome", "refused"),
            0);
}

// What the test does at lifecycle_jobs' handshakes (tests/e2e/spark_jobs.py), on a
// thread of its own while the application runs.
struct LifecycleActions {
  size_t registered_before_restart = 0;
  size_t registered_after_restart = 0;
  pid_t killed = 0;
  size_t killed_map_outputs = 0;    // of the shuffle being reduced, beneath its dirs
  std::set<std::string> corrupted;  // shuffle_S_M_0 of each data file corrupted
  // The block manager dirs (blockmgr-*) the corrupted files were in: of the executors
  // the reducers' fetch failures blame, whose every map output Spark then forgets.
  std::set<std::string> blamed_dirs;
  // The .data and .index files left after the driver removed the shuffles, by shuffle,
  // with their block manager dirs.
  std::map<int, std::vector<std::pair<std::string, std::string>>> left_after_removal;
  std::string failure;  // what could not be done
};

TEST_P(RealSparkTest, ShufflesOutliveExecutorsThatLeaveOrDieARestartAndACorruptDisk) {
  TempDir handshakes;
  const std::string dir = handshakes.path();
  std::map<std::string, std::string> conf = WithDynamicAllocation(server_->spark_port());
  conf["spark.shuffle.service.removeShuffle"] = "true";

  std::atomic<bool> app_ended{false};
  LifecycleActions did;
  std::thread director([&] {
    const auto await = [&](const std::string& what, auto ready) {
      if (testing::WaitFor([&] { return app_ended || ready(); }, absl::Minutes(5)) && !app_ended) {
        return true;
      }
      did.failure = absl::StrCat("the application did not reach ", what);
      return false;
    };
    const auto exists = [&](const std::string& name) {
      return [path = dir + "/" + name] { return ::access(path.c_str(), F_OK) == 0; };
    };
    if (!await("restart", exists("restart.ready"))) return;
    // Same ports and state dir: the application's executors (some long gone) find it
    // again, and their registrations come back from the state file.
    did.registered_before_restart = server_->spark_door()->executors()->size();
    if (absl::Status restarted = testing::RestartServer(&server_, options_); !restarted.ok()) {
      did.failure = restarted.ToString();
      return;
    }
    did.registered_after_restart = server_->spark_door()->executors()->size();
    Touch(dir + "/restart.done");

    pid_t reducer = 0;
    const auto reducing = [&] {
      for (const std::string& name : handshakes.ListFiles()) {
        if (absl::StartsWith(name, "reducing.") && absl::SimpleAtoi(name.substr(9), &reducer)) {
          return true;
        }
      }
      return false;
    };
    if (!await("a reduce task of the kill job", reducing)) return;
    const pid_t first_reducer = ExecutorOf(reducer);
    if (first_reducer == 0) {
      did.failure = absl::StrCat("no executor JVM above reduce task process ", reducer);
      return;
    }
    const auto everywhere = DataFilesByShuffle(ShuffleFiles(local_root_));
    const int reduced = everywhere.empty() ? -1 : everywhere.rbegin()->first;
    const auto map_outputs_of = [&](pid_t executor) {
      size_t outputs = 0;
      for (absl::string_view executor_dir :
           absl::StrSplit(EnvironmentOf(executor, "SPARK_EXECUTOR_DIRS"), ':', absl::SkipEmpty())) {
        const auto mine = DataFilesByShuffle(ShuffleFiles(std::string(executor_dir)));
        if (auto it = mine.find(reduced); it != mine.end()) outputs += it->second.size();
      }
      return outputs;
    };
    // The first reduce task's executor, if it wrote map outputs of the shuffle; else
    // the other, which then wrote them all (it was up first, and took every map task
    // before the first reducer's executor came).
    pid_t executor = first_reducer;
    did.killed_map_outputs = map_outputs_of(executor);
    for (pid_t other : ExecutorsBeneath(local_root_)) {
      if (did.killed_map_outputs > 0) break;
      executor = other;
      did.killed_map_outputs = map_outputs_of(other);
    }
    if (::kill(executor, SIGKILL) == 0) did.killed = executor;

    if (!await("corrupt", exists("corrupt.ready"))) return;
    const std::map<std::string, std::string> files = ShuffleFiles(local_root_);
    const auto data = DataFilesByShuffle(files);
    if (data.empty()) did.failure = "no shuffle data files to corrupt";
    for (const std::string& name :
         data.empty() ? std::vector<std::string>{} : data.rbegin()->second) {
      const auto index = files.find(name.substr(0, name.size() - 5) + ".index");
      if (index == files.end()) {
        did.failure = absl::StrCat("no index file for ", files.at(name));
      } else if (absl::Status flipped = FlipAByte(files.at(name), index->second); flipped.ok()) {
        did.corrupted.insert(name.substr(0, name.size() - 5));
        did.blamed_dirs.insert(BlockManagerDirOf(files.at(name)));
      } else {
        did.failure = flipped.ToString();
      }
    }
    Touch(dir + "/corrupt.done");

    if (!await("removed", exists("removed.ready"))) return;
    // The driver's RemoveBlocks may still be on their way: wait, bounded, until nothing
    // is left but outputs of blamed executors (which a shuffle the driver failed to
    // remove never reaches).
    const auto scan = [&] {
      did.left_after_removal.clear();
      bool only_blamed = true;
      for (const auto& [name, path] : ShuffleFiles(local_root_)) {
        absl::StatusOr<spark::ShuffleBlockId> file = spark::ParseShuffleFileName(name);
        if (!file.ok()) continue;
        const std::string stem = name.substr(0, name.rfind('.'));
        const std::string blockmgr = BlockManagerDirOf(path);
        did.left_after_removal[file->shuffle_id].emplace_back(stem, blockmgr);
        only_blamed = only_blamed && did.blamed_dirs.count(blockmgr) == 1;
      }
      return only_blamed;
    };
    testing::WaitFor(scan, absl::Seconds(20));
    Touch(dir + "/removed.done");
  });
  const std::vector<std::string> results =
      Run("ferry_server, executors coming and going", conf, {"lifecycle=" + dir}, absl::Minutes(6));
  app_ended = true;
  director.join();
  EXPECT_EQ(did.failure, "");

  std::map<std::string, std::string> by_job = ResultsByJob(results);
  ASSERT_EQ(by_job.size(), 9u) << absl::StrJoin(results, "\n");
  const auto same_sums = [&](const std::string& job, const std::string& expected) {
    EXPECT_EQ(SumsDiffer(by_job, job, expected), "");
  };
  // Dynamic allocation released the executors that wrote the map outputs; new ones
  // fetched them from ferry_server, before and after it restarted.
  for (const std::string job : {"written", "executors-gone", "service-restarted"}) {
    same_sums(job, "expected");
  }
  EXPECT_GT(did.registered_before_restart, 2u);
  EXPECT_EQ(did.registered_after_restart, did.registered_before_restart);

  // The killed executor had written map outputs of the shuffle being reduced; its task
  // failed and ran again elsewhere, and no fetch failed: no stage ran a second time.
  EXPECT_NE(did.killed, 0);
  EXPECT_GT(did.killed_map_outputs, 0u);
  same_sums("kill", "expected-kill");
  EXPECT_EQ(JsonField(by_job["kill"], "max_attempt"), "0") << by_job["kill"];
  EXPECT_NE(JsonField(by_job["kill"], "failed_tasks"), "0") << by_job["kill"];

  // Every data file of the shuffle had a byte flipped: the reducers' checksum diagnosis,
  // answered by ferry_server, blamed the disk, and the stage that wrote them ran again.
  EXPECT_FALSE(did.corrupted.empty());
  same_sums("before-corruption", "expected-corrupt");
  same_sums("corrupt", "expected-corrupt");
  EXPECT_NE(JsonField(by_job["corrupt"], "max_attempt"), "0") << by_job["corrupt"];
  const std::vector<std::string> diagnosed = cluster_->ExecutorLogLines("is corrupted due to");
  ASSERT_FALSE(diagnosed.empty()) << cluster_->DiagnosticLogs();
  std::printf("%zu diagnoses, the first: %s\n", diagnosed.size(), diagnosed[0].c_str());
  for (const std::string& line : diagnosed)
    EXPECT_TRUE(absl::StrContains(line, "DISK_ISSUE")) << line;

  // The driver removed the shuffles: for each it removed, ferry_server deleted the .data
  // and .index files of every map output Spark still knew. Spark forgets every map
  // output of an executor a fetch failed from (DAGScheduler: fileLost on FetchFailed),
  // which leaves the corrupted outputs and, when an executor that wrote them had also
  // written map outputs of an earlier shuffle (dynamic allocation kept it between
  // jobs), those too, until the application ends. Spark 3.5.9's driver fails
  // on a shuffle with a map output it forgot, before it asks any service (a
  // NullPointerException on the missing output); 4.3.0's passes over those.
  int removed = 0;
  for (int shuffle = 0; shuffle < 3; ++shuffle) {
    const size_t failed = last_output_.find(absl::StrCat("Error cleaning shuffle ", shuffle, "\n"));
    if (failed != std::string::npos) {
      // The exception and its causes, stack frames and all, follow the line.
      const std::string trace = last_output_.substr(failed, 30000);
      const size_t cause = trace.find("Caused by: java.lang.NullPointerException");
      ASSERT_NE(cause, std::string::npos) << trace.substr(0, 3000);
      std::printf("Spark's driver did not remove shuffle %d: %s\n", shuffle,
                  trace.substr(cause, trace.find('\n', cause) - cause).c_str());
      continue;
    }
    ++removed;
    size_t forgotten = 0;
    for (const auto& [stem, blockmgr] : did.left_after_removal[shuffle]) {
      EXPECT_EQ(did.blamed_dirs.count(blockmgr), 1u)
          << stem << " was left in " << blockmgr << ", of no executor a fetch failed from";
      forgotten += did.corrupted.count(stem) == 0 ? 1 : 0;
    }
    if (forgotten > 0) {
      std::printf("shuffle %d: %zu files of map outputs Spark forgot with a blamed executor left\n",
                  shuffle, forgotten);
    }
  }
  EXPECT_GE(removed, 2);
  // The application ended; its worker deleted the executors' dirs, and ferry_server's
  // sweep forgot their registrations.
  EXPECT_TRUE(testing::WaitFor([&] { return server_->spark_door()->executors()->size() == 0; },
                               absl::Seconds(30)))
      << server_->spark_door()->executors()->size() << " registrations left";
  EXPECT_EQ(ShuffleFiles(local_root_).size(), 0u);
}

std::vector<SparkDistribution> Sparks() { return testing::InstalledSparks(); }

// A job's reducers fetching across hosts, as on a real cluster: the two workers (and
// their executors) on two hosts of a HostCluster (network namespaces on a bridge), each
// host with its own ferry_server on the port spark.shuffle.service.port names, the
// master and the driver in this namespace. Each reducer reads its own executor's map
// outputs from its disk and the other host's from that host's ferry_server.
class RealSparkHostsTest : public ::testing::TestWithParam<SparkDistribution> {};

TEST_P(RealSparkHostsTest, ReducersFetchFromTheFerryServerOfEachHost) {
  absl::StatusOr<std::unique_ptr<testing::HostCluster>> hosts = testing::HostCluster::Create(2);
  if (absl::IsUnimplemented(hosts.status())) GTEST_SKIP() << hosts.status();
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  constexpr uint16_t kServicePort = 7337;
  TempDir work, local, data;
  std::vector<std::unique_ptr<testing::ServerProcess>> servers;
  for (int i = 0; i < 2; ++i) {
    testing::ServerProcessOptions options;
    options.netns = (*hosts)->host(i).netns;
    options.host = (*hosts)->host(i).ipv4;
    options.log_path = absl::StrCat(work.path(), "/ferry_server", i, ".log");
    auto started = testing::ServerProcess::Start(
        "server/ferry_server", data.path(),
        {absl::StrCat("--spark-address=", options.host, ":", kServicePort),
         "--spark-dir-roots=" + local.path(), "--threads=1",
         "--metrics-address=" + options.host + ":0"},
        options);
    ASSERT_TRUE(started.ok()) << started.status();
    servers.push_back(*std::move(started));
  }
  SparkCluster::Options options;
  options.spark = GetParam();
  options.work_dir = work.path();
  options.local_dir_root = local.path();
  options.worker_netns = {(*hosts)->host(0).netns, (*hosts)->host(1).netns};
  options.worker_hosts = {(*hosts)->host(0).ipv4, (*hosts)->host(1).ipv4};
  options.host = (*hosts)->client_ipv4();
  absl::StatusOr<std::unique_ptr<SparkCluster>> cluster = SparkCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Both hosts must write map outputs and run reducers: Spark's standalone scheduler
  // starts tasks once one executor is up (the minimum ratio is 0), and when the other
  // host's executor comes late the first runs every map task and the other host's
  // ferry_server has nothing to send.
  std::map<std::string, std::string> conf = WithService(kServicePort);
  conf["spark.scheduler.minRegisteredResourcesRatio"] = "1.0";
  conf["spark.scheduler.maxRegisteredResourcesWaitingTime"] = "120s";
  absl::StatusOr<SparkCluster::Submitted> ran =
      (*cluster)->Submit(kJobs, {"checked"}, conf, kJobTimeout);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->exit_code, 0) << ran->output.substr(ran->output.size() -
                                                     std::min<size_t>(ran->output.size(), 6000))
                               << (*cluster)->DiagnosticLogs();
  ASSERT_EQ(ran->results.size(), 2u) << absl::StrJoin(ran->results, "\n");
  EXPECT_EQ(absl::StrReplaceAll(ran->results[0], {{"\"expected\"", "\"shuffled\""}}),
            ran->results[1]);
  // The driver began once both executors were up, not when its wait ran out.
  EXPECT_TRUE(absl::StrContains(ran->output, "reached minRegisteredResourcesRatio: 1.0"))
      << (*cluster)->DiagnosticLogs();
  // Each host's ferry_server sent the other host's reducers blocks.
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<double> sent = testing::ScrapeMetric(
        servers[i]->metrics_port(), "ferry_sent_bytes_total{front_door=\"spark\",mode=\"splice\"}",
        (*hosts)->host(i).ipv4);
    ASSERT_TRUE(sent.ok()) << sent.status();
    std::printf("Spark %s: host %d's ferry_server sent %.0f bytes to the other host\n",
                GetParam().version.c_str(), i, *sent);
    EXPECT_GT(*sent, 0) << "host " << i;
  }
  cluster->reset();  // no executor outlives the servers
}

TEST(RealSparkAvailabilityTest, ScriptsSetupInstalledSpark) {
  std::string why;
  if (testing::InstalledSparks(&why).empty()) GTEST_SKIP() << why;
}

std::string VersionName(const ::testing::TestParamInfo<SparkDistribution>& param) {
  std::string name = "Spark" + param.param.version;
  for (char& c : name) {
    if (c == '.' || c == '-') c = '_';
  }
  return name;
}
INSTANTIATE_TEST_SUITE_P(Versions, RealSparkTest, ::testing::ValuesIn(Sparks()), VersionName);
INSTANTIATE_TEST_SUITE_P(Versions, RealSparkAuthTest, ::testing::ValuesIn(Sparks()), VersionName);
INSTANTIATE_TEST_SUITE_P(Versions, RealSparkTlsTest, ::testing::ValuesIn(Sparks()), VersionName);
INSTANTIATE_TEST_SUITE_P(Versions, RealSparkHostsTest, ::testing::ValuesIn(Sparks()), VersionName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealSparkTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealSparkAuthTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealSparkTlsTest);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealSparkHostsTest);

}  // namespace
}  // namespace ferry
