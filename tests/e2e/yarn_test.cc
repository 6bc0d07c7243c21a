// Real Spark applications on a real YARN cluster whose NodeManagers run Ferry's
// spark_shuffle aux service (server/yarn) and whose node shuffle service is ferry_server
// (tests/testing/yarn_cluster.h: a ResourceManager and two NodeManagers, processes of
// their own, with NodeManager recovery). Applications are submitted with spark-submit
// --master yarn; the aux service hands ferry_server (--spark-yarn-dir) each
// application's start, secret and end. Each answer is checked against the same job
// computed without Spark, or without an external shuffle service:
//   * the RDD and SQL jobs, with dynamic allocation releasing executors between jobs;
//     once the application ends, ferry_server holds nothing of it;
//   * spark.authenticate with YARN's secret per application: two applications at once,
//     one with SASL and one with the AuthEngine, each refused the other's secret;
//   * a NodeManager restarted (recovery) and ferry_server restarted between two jobs of
//     one application, and an executor container SIGKILLed mid-reduce;
//   * push-based shuffle merged by ferry_server and read merged (Spark's push-read
//     metrics), with spark.authenticate, and read again by new executors after
//     ferry_server restarted; an application stopped mid-merge leaves nothing open;
//     an executor killed mid-push leaves the merges whole; pushes after the finalize
//     are answered too late and read unmerged.
// Every Spark version scripts/setup installed runs on the YARN its line bundles; without
// Java, Spark or YARN's jars the test skips, saying so.
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/spark/layout.h"
#include "gtest/gtest.h"
#include "server/spark/apps/handed_off_apps.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/server_process.h"
#include "tests/testing/spark_apps.h"
#include "tests/testing/spark_cluster.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"
#include "tests/testing/yarn_cluster.h"

namespace ferry {
namespace {

using ::ferry::testing::JsonField;
using ::ferry::testing::SparkDistribution;
using ::ferry::testing::TempDir;
using ::ferry::testing::YarnCluster;

constexpr char kJobs[] = "tests/e2e/spark_jobs.py";
constexpr char kShimJar[] = "server/yarn/ferry-yarn-shuffle.jar";
constexpr absl::Duration kJobTimeout = absl::Minutes(4);

// One YARN cluster per Spark version, started by its first case and kept until a case
// of another version starts; each case has its own ferry_server (and port), data and
// state dirs.
struct SharedYarn {
  TempDir work;
  TempDir handoff;  // ferry.yarn.dir
  std::unique_ptr<YarnCluster> cluster;
  absl::Status started;  // why the cluster is not up, for the cases after the first
};
std::map<std::string, std::unique_ptr<SharedYarn>>& SharedClusters() {
  static auto* shared = new std::map<std::string, std::unique_ptr<SharedYarn>>();
  return *shared;
}

// The application id spark-submit's output names ("Submitted application ...").
std::string ApplicationOf(const std::string& output) {
  const std::string submitted = "Submitted application ";
  const size_t at = output.find(submitted);
  if (at == std::string::npos) return "";
  const size_t start = at + submitted.size();
  return output.substr(start, output.find_first_of(" \n", start) - start);
}

std::string LastLines(const std::vector<std::string>& lines, size_t n) {
  return absl::StrJoin(lines.size() > n ? lines.end() - n : lines.begin(), lines.end(), "\n");
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    names.push_back(entry.path().filename());
  }
  return names;
}

class YarnTest : public ::testing::TestWithParam<SparkDistribution> {
 protected:
  static void TearDownTestSuite() { SharedClusters().clear(); }

  void SetUp() override {
    absl::StatusOr<std::string> jars = testing::YarnJarsFor(GetParam());
    if (!jars.ok()) GTEST_SKIP() << jars.status().message();
    // GoogleTest runs each case for every version in turn: one version's cluster at a
    // time (two would share these two cores and the memory).
    for (auto it = SharedClusters().begin(); it != SharedClusters().end();) {
      it = it->first == GetParam().version ? std::next(it) : SharedClusters().erase(it);
    }
    std::unique_ptr<SharedYarn>& slot = SharedClusters()[GetParam().version];
    if (slot == nullptr) {
      slot = std::make_unique<SharedYarn>();
      YarnCluster::Options options;
      options.spark = GetParam();
      options.hadoop_jars = *jars;
      options.work_dir = slot->work.path();
      options.aux_service_class = "org.ferry.yarn.FerryShuffleService";
      options.aux_service_jar = std::filesystem::absolute(kShimJar);
      // End markers are the aux service's to delete, a second after they are written
      // here (an hour by default).
      options.node_manager_site = {{"ferry.yarn.dir", slot->handoff.path()},
                                   {"ferry.yarn.stopped-retention-ms", "1000"}};
      const absl::Time start = absl::Now();
      absl::StatusOr<std::unique_ptr<YarnCluster>> started = YarnCluster::Start(options);
      if (started.ok()) {
        slot->cluster = *std::move(started);
        std::printf("YARN (%s) for Spark %s up in %s\n", jars->c_str(), GetParam().version.c_str(),
                    absl::FormatDuration(absl::Now() - start).c_str());
      } else {
        slot->started = started.status();
      }
    }
    ASSERT_NE(slot->cluster, nullptr) << "YARN did not start: " << slot->started;
    yarn_ = slot->cluster.get();
    handoff_ = slot->handoff.path();
    options_ = testing::TestServerOptions(data_.path(), {});
    options_.spark.address = "127.0.0.1:0";
    // Both NodeManagers of this host share one ferry_server (and hand-off dir): the
    // NodeManagers' local dirs' parent is the root. One NodeManager's own local dirs as
    // the roots (none given): FerryTakesTheNodeManagersLocalDirs.
    options_.spark.executors.dir_roots = {yarn_->local_dirs_root()};
    options_.spark.executors.state_dir = state_.path();
    options_.spark.apps.yarn_dir = handoff_;
    options_.sweep_interval = absl::Milliseconds(500);
  }

  void StartFerry() { server_ = testing::StartServer(options_); }
  std::map<std::string, std::string> Conf() const {
    return {{"spark.executor.memory", "512m"}, {"spark.executor.cores", "1"},
            {"spark.executor.instances", "2"}, {"spark.driver.memory", "512m"},
            {"spark.ui.enabled", "false"},     {"spark.shuffle.readHostLocalDisk", "false"}};
  }
  std::map<std::string, std::string> WithFerry() const {
    std::map<std::string, std::string> conf = Conf();
    conf["spark.shuffle.service.enabled"] = "true";
    conf["spark.shuffle.service.port"] = absl::StrCat(server_->spark_port());
    conf["spark.dynamicAllocation.enabled"] = "true";
    conf["spark.dynamicAllocation.executorIdleTimeout"] = "2s";
    conf["spark.dynamicAllocation.minExecutors"] = "0";
    conf["spark.dynamicAllocation.maxExecutors"] = "2";
    conf.erase("spark.executor.instances");
    return conf;
  }

  struct Ran {
    std::string app;
    std::vector<std::string> results;
    std::string output;
  };
  Ran Run(const std::string& what, const std::map<std::string, std::string>& conf,
          const std::vector<std::string>& jobs, absl::Duration timeout = kJobTimeout) {
    const absl::Time start = absl::Now();
    absl::StatusOr<YarnCluster::Submitted> ran = yarn_->Submit(kJobs, jobs, conf, timeout);
    EXPECT_TRUE(ran.ok()) << ran.status();
    if (!ran.ok()) return {};
    const std::string tail =
        ran->output.substr(ran->output.size() > 6000 ? ran->output.size() - 6000 : 0);
    EXPECT_EQ(ran->exit_code, 0) << what << ": the application failed:\n"
                                 << tail << "\n"
                                 << yarn_->DiagnosticLogs();
    Ran done{ApplicationOf(ran->output), ran->results, ran->output};
    std::printf("Spark %s on YARN, %s (%s): %zu results in %s\n", GetParam().version.c_str(),
                what.c_str(), done.app.c_str(), done.results.size(),
                absl::FormatDuration(absl::Now() - start).c_str());
    return done;
  }

  // Run() on a thread of its own, so that this one can act at the application's
  // handshakes: *ran holds what it gave and *ended turns true once it has returned.
  std::thread RunAside(std::string what, std::map<std::string, std::string> conf,
                       std::vector<std::string> jobs, Ran* ran, std::atomic<bool>* ended,
                       absl::Duration timeout = kJobTimeout) {
    return std::thread([=, this] {
      *ran = Run(what, conf, jobs, timeout);
      *ended = true;
    });
  }

  // The application ended: the NodeManagers told the aux service, ferry_server forgot its
  // executors, and nothing of it is left in the hand-off dir.
  void ExpectForgotten(const std::string& app) {
    ASSERT_FALSE(app.empty());
    EXPECT_TRUE(testing::WaitFor(
        [&] {
          return server_->spark_door()->executors()->size() == 0 &&
                 FilesIn(handoff_ + "/apps").empty() && FilesIn(handoff_ + "/stopped").empty();
        },
        absl::Seconds(60)))
        << server_->spark_door()->executors()->size()
        << " registrations left; apps/: " << absl::StrJoin(FilesIn(handoff_ + "/apps"), " ")
        << "; stopped/: " << absl::StrJoin(FilesIn(handoff_ + "/stopped"), " ") << "\n"
        << "--- the NodeManagers' log lines of it\n"
        << LastLines(yarn_->NodeManagerLogLines(app), 40) << "\n--- the ResourceManager's\n"
        << LastLines(yarn_->ResourceManagerLogLines(app), 30);
    EXPECT_FALSE(yarn_->NodeManagerLogLines(absl::StrCat("Application ", app, " stopped")).empty());
  }

  void ExpectSameSums(const std::map<std::string, std::string>& by_job, const std::string& job,
                      const std::string& expected) {
    EXPECT_EQ(testing::SumsDiffer(by_job, job, expected), "");
  }
  // Waits (4 minutes at most) until a process of the application is named, by a file
  // `prefix`<pid> in `handshakes` whose pid `victim` maps to it, and ferry_server has
  // merged some of its pushes with a partition still open. Its pid, or 0 if the
  // application ended first or none was seen; *merged: the blocks merged then.
  // KillWhenMerging SIGKILLs it then.
  pid_t KillWhenMerging(
      const TempDir& handshakes, const std::string& prefix, const std::atomic<bool>& app_ended,
      double* merged, absl::FunctionRef<pid_t(pid_t)> victim = [](pid_t pid) { return pid; }) {
    const pid_t target = WhenMerging(handshakes, prefix, app_ended, merged, victim);
    return target > 0 && ::kill(target, SIGKILL) == 0 ? target : 0;
  }
  pid_t WhenMerging(
      const TempDir& handshakes, const std::string& prefix, const std::atomic<bool>& app_ended,
      double* merged, absl::FunctionRef<pid_t(pid_t)> victim = [](pid_t pid) { return pid; }) {
    pid_t target = 0;
    const bool merging = testing::WaitFor(
        [&] {
          for (const std::string& name : handshakes.ListFiles()) {
            pid_t named = 0;
            if (absl::StartsWith(name, prefix) &&
                absl::SimpleAtoi(name.substr(prefix.size()), &named)) {
              target = victim(named);
              if (target != 0) break;
            }
          }
          const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
          *merged =
              testing::MetricSum(metrics, "ferry_spark_push_blocks_total", "outcome", "merged");
          return app_ended || (target > 0 && *merged > 0 &&
                               testing::MetricSum(metrics, "ferry_spark_push_open_partitions") > 0);
        },
        absl::Minutes(4));
    return merging && !app_ended ? target : 0;
  }
  // Spark's push-read metric `name` in the push-read job's RESULT line `read`.
  static int64_t PushRead(const std::string& read, const char* name) {
    int64_t value = -1;
    EXPECT_TRUE(absl::SimpleAtoi(JsonField(read, name), &value)) << name << " in " << read;
    return value;
  }
  // Once `app` has ended: ferry_server has forgotten it and holds nothing of its merges,
  // no partition open and no block waiting.
  void ExpectMergesClosed(const std::string& app) {
    ExpectForgotten(app);
    EXPECT_TRUE(testing::WaitFor([&] {
      const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
      return testing::MetricSum(metrics, "ferry_spark_push_open_partitions") == 0 &&
             testing::MetricSum(metrics, "ferry_spark_push_deferred_bytes") == 0;
    }));
  }
  static std::map<std::string, std::string> ByJob(const std::vector<std::string>& results) {
    return testing::ResultsByJob(results);
  }

  YarnCluster* yarn_ = nullptr;
  std::string handoff_;
  TempDir data_;
  TempDir state_;
  FerryServerOptions options_;
  std::unique_ptr<FerryServer> server_;
};

TEST_P(YarnTest, JobsShuffleThroughFerryUnderDynamicAllocationAndItForgetsTheEndedApp) {
  StartFerry();
  const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
  const Ran ferry = Run("ferry_server, dynamic allocation", WithFerry(), {"rdd", "sql", "checked"});
  EXPECT_EQ(testing::AnswersDiffer(ferry.results, testing::kRddAnswers), "");
  EXPECT_EQ(testing::AnswersDiffer(ferry.results, testing::kSqlAnswers), "");
  const std::map<std::string, std::string> by_job = ByJob(ferry.results);
  ExpectSameSums(by_job, "shuffled", "expected");
  const std::vector<MetricFamilySamples> after = server_->CollectMetrics();
  const double blocks =
      testing::MetricSum(after, "ferry_sent_blocks_total", "front_door", "spark") -
      testing::MetricSum(before, "ferry_sent_blocks_total", "front_door", "spark");
  std::printf("ferry_server sent Spark's reducers %.0f blocks\n", blocks);
  EXPECT_GT(blocks, 0);
  std::printf(
      "%zu containers of %s\n",
      yarn_->NodeManagerLogLines(absl::StrCat("of application ", ferry.app, " initialized")).size(),
      ferry.app.c_str());
  ExpectForgotten(ferry.app);
}

// Push-based shuffle (spark.shuffle.push.enabled, which Spark runs only on YARN) into
// ferry_server, the node's merger (one host: the mergers' thresholds are lowered to one),
// with every shuffle waiting for its pushes however small, a serializer whose records can
// be moved (the RDD jobs' shuffles are pushed too), and the application's push-read
// metrics in its event log (one plain file, not Spark 4's default of zstd rolled over in
// a dir of files), under `event_log`.
std::map<std::string, std::string> WithPush(std::map<std::string, std::string> conf,
                                            const std::string& event_log) {
  conf["spark.shuffle.push.enabled"] = "true";
  conf["spark.shuffle.push.mergersMinStaticThreshold"] = "1";
  conf["spark.shuffle.push.mergersMinThresholdRatio"] = "0.01";
  conf["spark.shuffle.push.minShuffleSizeToWait"] = "0";
  conf["spark.serializer"] = "org.apache.spark.serializer.KryoSerializer";
  conf["spark.eventLog.enabled"] = "true";
  conf["spark.eventLog.dir"] = "file://" + event_log;
  conf["spark.eventLog.compress"] = "false";
  conf["spark.eventLog.rolling.enabled"] = "false";
  return conf;
}

// The map tasks push their blocks to ferry_server, the driver finalizes, and the
// reducers read the merged partitions: from the disk (the merger is on their host; its
// merge dirs are the local dirs of "shuffle-push-merger"), as Spark's push-read metrics
// say, with no fallback to the unmerged blocks. With spark.authenticate, YARN's secret
// for the application: its pushes, finalizes and merged reads are all authenticated.
// Then the merges outlive ferry_server and the executors that pushed them: dynamic
// allocation releases every executor, ferry_server restarts (its finalized merges, and
// the registrations that give them their dirs, kept in its state dir), and new executors,
// which know nothing of the merge dirs and ask the restarted ferry_server for them, read
// the checked shuffle again, merged. The answers are checked against the same sums
// computed without Spark; once the application ends its merged files are gone.
TEST_P(YarnTest, PushedBlocksMergeInFerryAndReducersReadTheMergesAlsoAfterARestart) {
  options_.spark.push.enabled = true;
  options_.spark.auth.yarn = true;
  StartFerry();
  TempDir handshakes;
  TempDir event_log;
  std::map<std::string, std::string> conf = WithPush(WithFerry(), event_log.path());
  conf["spark.authenticate"] = "true";
  std::atomic<bool> app_ended{false};
  Ran pushed;
  std::thread application =
      RunAside("push-based shuffle, ferry_server restarted between the merge and a read", conf,
               {"sql", "hold-idle=" + handshakes.path(), "push-read=" + event_log.path()}, &pushed,
               &app_ended);
  std::string failure;
  double merged = 0, authenticated = 0;
  [&] {
    const std::string held = handshakes.path() + "/held.ready";
    if (!testing::WaitFor([&] { return app_ended || ::access(held.c_str(), F_OK) == 0; },
                          absl::Minutes(5)) ||
        app_ended) {
      failure = "the application did not reach held";
      return;
    }
    const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
    merged = testing::MetricSum(metrics, "ferry_spark_push_blocks_total", "outcome", "merged");
    authenticated = testing::MetricSum(metrics, "ferry_spark_authentications_total", "outcome",
                                       "authenticated");
    if (absl::Status restarted = testing::RestartServer(&server_, options_); !restarted.ok()) {
      failure = restarted.ToString();
      return;
    }
    testing::Touch(handshakes.path() + "/held.done");
  }();
  application.join();
  ASSERT_EQ(failure, "");
  const std::map<std::string, std::string> by_job = ByJob(pushed.results);
  EXPECT_EQ(testing::AnswersDiffer(pushed.results, testing::kSqlAnswers), "");
  ExpectSameSums(by_job, "shuffled", "expected");
  ExpectSameSums(by_job, "read-again", "expected");
  ASSERT_EQ(by_job.count("push-read"), 1u) << absl::StrJoin(pushed.results, "\n");
  const std::string& read = by_job.at("push-read");
  std::printf("Spark %s's reducers: %s\n", GetParam().version.c_str(), read.c_str());
  std::printf("ferry_server merged %.0f pushed blocks, authenticated %.0f connections\n", merged,
              authenticated);
  const auto metric = [&](const char* name) { return PushRead(read, name); };
  EXPECT_GT(metric("tasks"), 0) << read;
  EXPECT_GT(metric("shuffleMergedLocalBytesRead") + metric("shuffleMergedRemoteBytesRead"), 0)
      << read;
  // The read after the restart, by new executors, is the last stage.
  EXPECT_GT(metric("last_stage_chunks"), 0) << read;
  EXPECT_EQ(metric("shuffleMergedFetchFallbackCount"), 0) << read;
  EXPECT_EQ(metric("shuffleCorruptMergedBlockChunks"), 0) << read;
  EXPECT_GT(merged, 0);
  EXPECT_GT(authenticated, 0);
  ExpectMergesClosed(pushed.app);
}

// An application stopped while its blocks are being merged (its driver SIGKILLed; its
// executors, some mid-push, go with it): YARN ends it, and ferry_server forgets it and
// keeps nothing open of its merges: no partition, no deferred block, no file.
TEST_P(YarnTest, AnApplicationStoppedMidMergeLeavesNothingOpen) {
  options_.spark.push.enabled = true;
  StartFerry();
  TempDir handshakes;
  TempDir event_log;
  std::atomic<bool> app_ended{false};
  absl::StatusOr<YarnCluster::Submitted> submitted = absl::UnknownError("not run");
  std::thread application([&] {
    submitted = yarn_->Submit(kJobs, {"stop-mid-push=" + handshakes.path()},
                              WithPush(WithFerry(), event_log.path()), kJobTimeout);
    app_ended = true;
  });
  double merged = 0;
  const pid_t driver = KillWhenMerging(handshakes, "driver.", app_ended, &merged);
  const bool stopped = driver > 0;
  application.join();
  ASSERT_TRUE(stopped) << "the application was not seen merging (" << merged << " blocks merged)";
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_FALSE(absl::StrContains(submitted->output, "not-stopped"));
  std::printf("Spark %s on YARN: driver %d SIGKILLed once ferry_server had merged %.0f blocks\n",
              GetParam().version.c_str(), driver, merged);
  ExpectMergesClosed(ApplicationOf(submitted->output));
  // ferry_server runs in this process: none of its descriptors is a merged file.
  std::vector<std::string> held;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (absl::StrContains(target, "shuffleMerged_")) held.push_back(target);
  }
  EXPECT_TRUE(held.empty()) << absl::StrJoin(held, "\n");
}

// An executor SIGKILLed while the map stage pushes (ferry_server has merged some of the
// stage's blocks, and its running map task is lost): its pushes in flight are cut and
// not merged, Spark runs its lost tasks again on another executor, whose pushes of the
// same map indexes merge or are answered as duplicates, and the reducers read the
// merges whole: the sums are right, merged chunks are read, none is corrupt.
TEST_P(YarnTest, AnExecutorKilledMidPushLeavesTheMergesWhole) {
  options_.spark.push.enabled = true;
  StartFerry();
  TempDir handshakes;
  TempDir event_log;
  std::atomic<bool> app_ended{false};
  Ran ran;
  std::thread application = RunAside(
      "push-based shuffle, an executor killed mid-push", WithPush(WithFerry(), event_log.path()),
      {"kill-mid-push=" + handshakes.path(), "push-read=" + event_log.path()}, &ran, &app_ended);
  double merged = 0;
  const pid_t executor = KillWhenMerging(handshakes, "mapping.", app_ended, &merged,
                                         [](pid_t mapper) { return testing::ExecutorOf(mapper); });
  const bool killed = executor > 0;
  std::ofstream(handshakes.path() + "/killed").close();  // the waiting map tasks go on
  application.join();
  ASSERT_TRUE(killed) << "no executor was seen pushing (" << merged << " blocks merged)";
  std::printf("Spark %s on YARN: executor %d SIGKILLed once ferry_server had merged %.0f blocks\n",
              GetParam().version.c_str(), executor, merged);
  const std::map<std::string, std::string> by_job = ByJob(ran.results);
  ExpectSameSums(by_job, "killed-mid-push", "expected-killed-mid-push");
  ASSERT_EQ(by_job.count("killed-mid-push"), 1u) << absl::StrJoin(ran.results, "\n");
  EXPECT_NE(JsonField(by_job.at("killed-mid-push"), "failed_tasks"), "0")
      << by_job.at("killed-mid-push");
  ASSERT_EQ(by_job.count("push-read"), 1u) << absl::StrJoin(ran.results, "\n");
  const std::string& read = by_job.at("push-read");
  std::printf("Spark %s's reducers: %s\n", GetParam().version.c_str(), read.c_str());
  const auto metric = [&](const char* name) { return PushRead(read, name); };
  EXPECT_GT(metric("shuffleMergedLocalBytesRead") + metric("shuffleMergedRemoteBytesRead"), 0)
      << read;
  EXPECT_EQ(metric("shuffleCorruptMergedBlockChunks"), 0) << read;
  EXPECT_EQ(metric("shuffleMergedFetchFallbackCount"), 0) << read;
  ExpectMergesClosed(ran.app);
}

// Upgrades mid-push lose no push: while the map tasks of a pushed shuffle push,
// ferry_server is handed over to a new server again and again (as ferry_server
// --take-over does), the merges being written going with it: first with half the maps'
// blocks merged and the others' still to come, then each time the server serving has
// merged 20 more. The reducers read every block merged, as they do with no hand-over,
// and the sums are right.
TEST_P(YarnTest, HandOversMidPushLoseNoPush) {
  options_.spark.push.enabled = true;
  StartFerry();
  TempDir handshakes;
  TempDir event_log;
  std::atomic<bool> app_ended{false};
  Ran ran;
  std::thread application =
      RunAside("push-based shuffle, ferry_server handed over mid-push",
               WithPush(WithFerry(), event_log.path()),
               {"hand-over-mid-push=" + handshakes.path(), "push-read=" + event_log.path()}, &ran,
               &app_ended);
  const auto merged = [&] {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_blocks_total", "outcome",
                              "merged");
  };
  int hand_overs = 0;
  std::string failure;
  // What the executors logged of their fetches before the first hand-over.
  const auto trouble = [&] {
    return testing::FetchTroubleIn(yarn_->ContainerLogs(""), server_->spark_port());
  };
  std::optional<testing::LogLines> before;
  const auto hand_over = [&] {
    if (!before.has_value()) before = trouble();
    absl::StatusOr<size_t> handed = testing::HandOverServer(&server_, options_);
    if (!handed.ok()) failure = handed.status().ToString();
    hand_overs += handed.ok();
    return handed.ok();
  };
  // Half the maps pushed, the others waiting: their merges are open.
  double first = 0;
  if (WhenMerging(handshakes, "mapping.", app_ended, &first) > 0 && hand_over()) {
    testing::Touch(handshakes.path() + "/handed-over");
    while (hand_overs < 5 &&
           testing::WaitFor([&] { return app_ended || merged() >= 20; }, absl::Minutes(2)) &&
           !app_ended && hand_over()) {
    }
  }
  testing::Touch(handshakes.path() + "/handed-over");
  application.join();
  ASSERT_EQ(failure, "");
  const std::map<std::string, std::string> by_job = ByJob(ran.results);
  ExpectSameSums(by_job, "handed-over-mid-push", "expected-handed-over-mid-push");
  ASSERT_EQ(by_job.count("push-read"), 1u) << absl::StrJoin(ran.results, "\n");
  const std::string& read = by_job.at("push-read");
  const auto metric = [&](const char* name) { return PushRead(read, name); };
  const int64_t merged_read =
      metric("shuffleMergedLocalBlocksFetched") + metric("shuffleMergedRemoteBlocksFetched");
  std::printf(
      "Spark %s on YARN: ferry_server handed over %d times mid-push; the reducers read %lld of "
      "%lld blocks merged\n",
      GetParam().version.c_str(), hand_overs, static_cast<long long>(merged_read),
      static_cast<long long>(metric("blocksFetched")));
  EXPECT_GE(hand_overs, 2);
  EXPECT_GT(merged_read, 0) << read;
  EXPECT_EQ(merged_read, metric("blocksFetched")) << read;
  EXPECT_EQ(metric("shuffleMergedFetchFallbackCount"), 0) << read;
  EXPECT_EQ(metric("shuffleCorruptMergedBlockChunks"), 0) << read;
  // Nor did an executor retry or fail a fetch, or find its connection to ferry_server
  // closed, after the first hand-over, by its own log (as
  // RealSparkTest.HandOversMidShuffleCostNoFetch reads it).
  ASSERT_TRUE(before.has_value());
  const std::vector<std::string> since = testing::FetchTroubleSince(*before, trouble());
  EXPECT_TRUE(since.empty()) << absl::StrJoin(since, "\n");
  EXPECT_GT(yarn_->ContainerLogLines(ran.app, "ShuffleBlockFetcherIterator").size(), 0u)
      << "the executors' logs were not found";
  ExpectMergesClosed(ran.app);
}

// Pushes that reach ferry_server after the driver finalized their merge: the finalize at
// the map stage's end (spark.shuffle.push.finalize.timeout=0s) while the last map task's
// 36 MB are still being pushed, one request in flight. ferry_server answers them too late
// (Spark's pusher then stops), the merge holds the blocks that came in time, and the
// reducers read those merged and the rest unmerged: the sums are right.
TEST_P(YarnTest, PushesAfterTheFinalizeAreAnsweredTooLateAndReadUnmerged) {
  options_.spark.push.enabled = true;
  StartFerry();
  const auto blocks = [&](const char* outcome) {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_blocks_total", "outcome",
                              outcome);
  };
  // The last map task's pushes race the driver's finalize: a run whose pushes all came
  // first (a busy machine's driver can be that slow) exercises nothing, and runs again,
  // at most three times.
  for (int attempt = 1; attempt <= 3; ++attempt) {
    TempDir event_log;
    TempDir handshakes;
    std::map<std::string, std::string> conf = WithPush(WithFerry(), event_log.path());
    conf["spark.shuffle.push.finalize.timeout"] = "0s";
    conf["spark.reducer.maxSizeInFlight"] = "1m";
    const double merged_before = blocks("merged");
    const double too_late_before = blocks("too_late");
    const Ran ran = Run("push-based shuffle, pushes after the finalize", conf,
                        {"late-push=" + handshakes.path(), "push-read=" + event_log.path()});
    const std::map<std::string, std::string> by_job = ByJob(ran.results);
    ExpectSameSums(by_job, "late-push", "expected-late-push");
    const double merged = blocks("merged") - merged_before;
    const double too_late = blocks("too_late") - too_late_before;
    std::printf(
        "Spark %s on YARN, run %d: ferry_server merged %.0f blocks, answered %.0f too "
        "late\n",
        GetParam().version.c_str(), attempt, merged, too_late);
    EXPECT_GT(merged, 0);
    ASSERT_EQ(by_job.count("push-read"), 1u) << absl::StrJoin(ran.results, "\n");
    const std::string& read = by_job.at("push-read");
    std::printf("Spark %s's reducers: %s\n", GetParam().version.c_str(), read.c_str());
    const auto metric = [&](const char* name) { return PushRead(read, name); };
    EXPECT_EQ(metric("shuffleCorruptMergedBlockChunks"), 0) << read;
    EXPECT_EQ(metric("shuffleMergedFetchFallbackCount"), 0) << read;
    ExpectMergesClosed(ran.app);
    if (too_late == 0 && attempt < 3) continue;
    EXPECT_GT(too_late, 0) << "in 3 runs every push came before the finalize";
    // 8 maps x 60 partitions: the merges hold the blocks that came in time.
    const int64_t merged_read =
        metric("shuffleMergedLocalBlocksFetched") + metric("shuffleMergedRemoteBlocksFetched");
    EXPECT_GT(merged_read, 0) << read;
    EXPECT_LT(merged_read, 8 * 60) << read;
    break;
  }
}

// A map output of executor `exec_id` of `app` that ferry_server serves (found beneath
// its registered local dirs), as a block of its first reduce partition; nullopt if none.
std::optional<std::pair<std::string, spark::ShuffleBlockId>> AMapOutputOf(
    const ExecutorRegistry& registry, const std::string& app) {
  for (int exec = 1; exec <= 16; ++exec) {
    absl::StatusOr<spark::ExecutorShuffleInfo> info = registry.Find(app, absl::StrCat(exec));
    if (!info.ok()) continue;
    for (const std::string& dir : info->local_dirs) {
      for (const auto& [name, path] : testing::ShuffleFiles(dir)) {
        absl::StatusOr<spark::ShuffleBlockId> file = spark::ParseShuffleFileName(name);
        if (file.ok() && absl::EndsWith(name, ".data")) {
          return std::make_pair(absl::StrCat(exec),
                                spark::ShuffleBlockId{file->shuffle_id, file->map_id, 0, 1});
        }
      }
    }
  }
  return std::nullopt;
}

// spark.authenticate on YARN: each application has the secret YARN's client generated
// for it, which reaches ferry_server only through the NodeManagers' aux service. Two
// applications at once, one authenticating with SASL, the other with the AuthEngine
// (and every byte encrypted): each application's blocks are served with its own secret
// and refused with the other's.
TEST_P(YarnTest, TwoApplicationsAtOnceEachWithTheSecretYarnGaveIt) {
  options_.spark.auth.yarn = true;
  StartFerry();
  TempDir sasl_dir, engine_dir;
  std::map<std::string, std::string> engine = WithFerry();
  engine["spark.authenticate"] = "true";
  engine["spark.network.crypto.enabled"] = "true";
  // This one's secret reaches the NodeManager in Spark's JSON payload, which asks that
  // the service keep nothing of it across a restart.
  std::map<std::string, std::string> sasl = WithFerry();
  sasl["spark.authenticate"] = "true";
  sasl["spark.yarn.shuffle.server.recovery.disabled"] = "true";
  Ran sasl_ran, engine_ran;
  std::thread sasl_app([&] { sasl_ran = Run("SASL", sasl, {"hold=" + sasl_dir.path()}); });
  std::thread engine_app(
      [&] { engine_ran = Run("AuthEngine", engine, {"hold=" + engine_dir.path()}); });
  const auto held = [](const TempDir& dir) {
    return ::access((dir.path() + "/held.ready").c_str(), F_OK) == 0;
  };
  const bool both_held =
      testing::WaitFor([&] { return held(sasl_dir) && held(engine_dir); }, absl::Minutes(4));
  EXPECT_TRUE(both_held) << yarn_->DiagnosticLogs();
  if (both_held) {
    // The operator's view: the hand-off dir holds each running application's secret.
    std::vector<std::string> apps = FilesIn(handoff_ + "/apps");
    ASSERT_EQ(apps.size(), 2u) << absl::StrJoin(apps, " ");
    std::map<std::string, Secret> secret;
    std::string unrecovered;  // the SASL application's
    for (const std::string& app : apps) {
      absl::StatusOr<HandedOffApps::ServiceData> data = HandedOffApps::ParseServiceData(
          testing::ReadTextFile(absl::StrCat(handoff_, "/apps/", app)));
      ASSERT_TRUE(data.ok()) << app << ": " << data.status();
      ASSERT_TRUE(data->secret.has_value()) << app;
      secret[app] = *data->secret;
      if (data->recovery_disabled) unrecovered = app;
    }
    EXPECT_NE(secret[apps[0]], secret[apps[1]]);
    ASSERT_FALSE(unrecovered.empty()) << "no service data said recovery.disabled";
    const std::string journal = testing::ReadTextFile(state_.path() + "/spark-executors");
    for (const std::string& app : apps) {
      EXPECT_EQ(journal.find(app) == std::string::npos, app == unrecovered)
          << app << " in ferry_server's state file";
    }
    const std::string address = absl::StrCat("127.0.0.1:", server_->spark_port());
    for (size_t i = 0; i < 2; ++i) {
      const std::string& app = apps[i];
      const std::string& other = apps[1 - i];
      const auto output = AMapOutputOf(*server_->spark_door()->executors(), app);
      ASSERT_TRUE(output.has_value()) << "no map output of " << app;
      SparkShuffleClient client;
      SparkFetchOptions own;
      own.auth_secret = secret[app];
      BuffersSink sink(1);
      absl::StatusOr<SparkFetchStats> fetched =
          client.Fetch(address, app, output->first, {output->second}, sink, own);
      EXPECT_TRUE(fetched.ok()) << app << ": " << fetched.status();
      SparkFetchOptions others = own;
      others.auth_secret = secret[other];
      BuffersSink refused_sink(1);
      EXPECT_FALSE(
          client.Fetch(address, app, output->first, {output->second}, refused_sink, others).ok())
          << app << "'s blocks were served with " << other << "'s secret";
    }
  }
  testing::Touch(sasl_dir.path() + "/held.done");
  testing::Touch(engine_dir.path() + "/held.done");
  sasl_app.join();
  engine_app.join();
  for (const Ran* ran : {&sasl_ran, &engine_ran}) {
    const std::map<std::string, std::string> by_job = ByJob(ran->results);
    ExpectSameSums(by_job, "shuffled", "expected");
    ExpectSameSums(by_job, "read-again", "expected");
  }
  const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
  EXPECT_GT(
      testing::MetricSum(metrics, "ferry_spark_authentications_total", "outcome", "authenticated"),
      0);
  EXPECT_GT(
      testing::MetricSum(metrics, "ferry_spark_authentications_total", "outcome", "encrypted"), 0);
  EXPECT_GT(testing::MetricSum(metrics, "ferry_spark_authentications_total", "outcome", "refused"),
            0);
  ExpectForgotten(sasl_ran.app);
  ExpectForgotten(engine_ran.app);
}

// One application's shuffles outlive what a YARN node goes through: the executors that
// wrote them released by dynamic allocation, the NodeManager restarted (recovery: its
// containers keep running) and ferry_server restarted between two jobs, and an executor
// container SIGKILLed while the reducers run (YARN reports it lost): the next jobs read
// the earlier shuffles from ferry_server, and no fetch fails.
TEST_P(YarnTest, ShufflesOutliveANodeManagerAndAFerryRestartAndAKilledContainer) {
  StartFerry();
  TempDir handshakes;
  const std::string dir = handshakes.path();
  std::atomic<bool> app_ended{false};
  std::string failure;
  size_t registered_before_restart = 0, registered_after_restart = 0;
  int restarted_node = -1;
  pid_t killed = 0;
  // The application runs on a thread of its own and this one acts at its handshakes:
  // a process a thread starts (the restarted NodeManager) dies with the thread that
  // forked it (PR_SET_PDEATHSIG), and this one lives as long as the test.
  Ran ran;
  std::thread application =
      RunAside("ferry_server, a NodeManager and ferry_server restarted, a container killed",
               WithFerry(), {"lifecycle=" + dir}, &ran, &app_ended, absl::Minutes(6));
  [&] {
    const auto await = [&](const std::string& what, auto ready) {
      if (testing::WaitFor([&] { return app_ended || ready(); }, absl::Minutes(5)) && !app_ended) {
        return true;
      }
      failure = absl::StrCat("the application did not reach ", what);
      return false;
    };
    const auto exists = [&](const std::string& name) {
      return [path = dir + "/" + name] { return ::access(path.c_str(), F_OK) == 0; };
    };
    if (!await("restart", exists("restart.ready"))) return;
    // The NodeManager of the application's master: its container outlives the restart
    // (recovered, not restarted) and must still be seen to end with the application.
    const std::vector<std::string> apps = FilesIn(handoff_ + "/apps");
    if (apps.size() != 1) {
      failure = absl::StrCat("not one application running: ", absl::StrJoin(apps, " "));
      return;
    }
    const std::string master =
        absl::StrCat(absl::StrReplaceAll(apps[0], {{"application_", "container_"}}), "_01_000001");
    restarted_node = yarn_->NodeManagerOf(master);
    if (restarted_node < 0) {
      failure = absl::StrCat("no NodeManager runs ", master);
      return;
    }
    if (absl::Status s = yarn_->RestartNodeManager(restarted_node); !s.ok()) {
      failure = s.ToString();
      return;
    }
    registered_before_restart = server_->spark_door()->executors()->size();
    if (absl::Status restarted = testing::RestartServer(&server_, options_); !restarted.ok()) {
      failure = restarted.ToString();
      return;
    }
    registered_after_restart = server_->spark_door()->executors()->size();
    testing::Touch(dir + "/restart.done");

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
    const pid_t executor = testing::ExecutorOf(reducer);
    if (executor == 0) {
      failure = absl::StrCat("no executor JVM above reduce task process ", reducer);
      return;
    }
    if (::kill(executor, SIGKILL) == 0) killed = executor;
    // The standalone test flips bytes on disk here; on YARN the job reads on unharmed.
    for (const char* step : {"corrupt", "removed"}) {
      if (!await(step, exists(absl::StrCat(step, ".ready")))) return;
      testing::Touch(absl::StrCat(dir, "/", step, ".done"));
    }
  }();
  application.join();
  EXPECT_EQ(failure, "");
  const std::map<std::string, std::string> by_job = ByJob(ran.results);
  ASSERT_EQ(by_job.size(), 9u) << absl::StrJoin(ran.results, "\n");
  for (const std::string job : {"written", "executors-gone", "service-restarted"}) {
    ExpectSameSums(by_job, job, "expected");
  }
  std::printf("restarted NodeManager %d, which runs the application master\n", restarted_node);
  EXPECT_GT(registered_before_restart, 0u);
  EXPECT_EQ(registered_after_restart, registered_before_restart);
  EXPECT_NE(killed, 0);
  ExpectSameSums(by_job, "kill", "expected-kill");
  EXPECT_EQ(JsonField(by_job.at("kill"), "max_attempt"), "0") << by_job.at("kill");
  EXPECT_NE(JsonField(by_job.at("kill"), "failed_tasks"), "0") << by_job.at("kill");
  ExpectSameSums(by_job, "corrupt", "expected-corrupt");
  EXPECT_EQ(JsonField(by_job.at("corrupt"), "max_attempt"), "0") << by_job.at("corrupt");
  EXPECT_TRUE(absl::StrContains(ran.output, "Lost executor") ||
              absl::StrContains(ran.output, "lost executor"))
      << "YARN did not report the killed container";
  ExpectForgotten(ran.app);
}

// The two-user deployment of docs/spark.md ("YARN"): the NodeManagers run as one user
// (root here) and ferry_server as another (nobody, in the NodeManagers' group, as the
// package's ferry user is put in the NodeManager's), over a hand-off dir of the
// NodeManagers' user, 0750. An application authenticates with the secret YARN gave it,
// shuffles through ferry_server, ends, and nothing of it is left: ferry_server forgot
// it without a warning, and the aux service deleted its files. Its own cluster and
// ferry_server process, in /tmp (nobody cannot reach the test's own dirs under /root).
class YarnTwoUsersTest : public ::testing::TestWithParam<SparkDistribution> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "running ferry_server as nobody needs root";
    if (::getpwnam("nobody") == nullptr) GTEST_SKIP() << "no user nobody";
    jars_ = testing::YarnJarsFor(GetParam());
    if (!jars_.ok()) GTEST_SKIP() << jars_.status().message();
    SharedClusters().clear();  // one cluster at a time on these two cores
    char dir[] = "/tmp/ferry-yarn-users-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    scratch_ = dir;
    ASSERT_EQ(::chmod(dir, 0755), 0);
  }
  void TearDown() override {
    server_.reset();
    cluster_.reset();
    if (!scratch_.empty()) std::filesystem::remove_all(scratch_);
  }

  absl::StatusOr<std::string> jars_ = absl::UnknownError("unset");
  std::string scratch_;
  std::unique_ptr<YarnCluster> cluster_;
  std::unique_ptr<testing::ServerProcess> server_;
};

TEST_P(YarnTwoUsersTest, TheNodeManagersAndFerrysUsersAsDocsSay) {
  const passwd* nobody = ::getpwnam("nobody");
  const std::string handoff = scratch_ + "/handoff", work = scratch_ + "/work";
  ASSERT_EQ(::mkdir(work.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(handoff.c_str(), 0750), 0);  // the NodeManagers' user's
  for (const char* sub : {"/data", "/state"}) {
    ASSERT_EQ(::mkdir((scratch_ + sub).c_str(), 0750), 0);
    ASSERT_EQ(::chown((scratch_ + sub).c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  }
  std::filesystem::copy_file("server/ferry_server", scratch_ + "/ferry_server");
  ASSERT_EQ(::chmod((scratch_ + "/ferry_server").c_str(), 0755), 0);

  YarnCluster::Options options;
  options.spark = GetParam();
  options.hadoop_jars = *jars_;
  options.work_dir = work;
  options.aux_service_class = "org.ferry.yarn.FerryShuffleService";
  options.aux_service_jar = std::filesystem::absolute(kShimJar);
  options.node_manager_site = {{"ferry.yarn.dir", handoff},
                               {"ferry.yarn.stopped-retention-ms", "1000"}};
  absl::StatusOr<std::unique_ptr<YarnCluster>> started = YarnCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  cluster_ = *std::move(started);

  testing::ServerProcessOptions as_ferry;
  as_ferry.log_path = scratch_ + "/ferry_server.log";
  as_ferry.user = "nobody";
  as_ferry.groups = {0};  // the NodeManagers' group
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server = testing::ServerProcess::Start(
      scratch_ + "/ferry_server", scratch_ + "/data",
      {"--spark-address=127.0.0.1:0", "--spark-yarn-dir=" + handoff, "--spark-auth-yarn",
       // Both NodeManagers of this host share it: their local dirs' parent.
       "--spark-dir-roots=" + cluster_->local_dirs_root(), "--state-dir=" + scratch_ + "/state",
       "--sweep-interval=500ms", "--metrics-address=127.0.0.1:0"},
      as_ferry);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);

  std::map<std::string, std::string> conf = {
      {"spark.executor.memory", "512m"},
      {"spark.executor.cores", "1"},
      {"spark.executor.instances", "2"},
      {"spark.driver.memory", "512m"},
      {"spark.ui.enabled", "false"},
      {"spark.shuffle.readHostLocalDisk", "false"},
      {"spark.shuffle.service.enabled", "true"},
      {"spark.authenticate", "true"},
      {"spark.shuffle.service.port", absl::StrCat(server_->spark_port())}};
  const absl::Time start = absl::Now();
  absl::StatusOr<YarnCluster::Submitted> ran =
      cluster_->Submit(kJobs, {"rdd", "sql", "checked"}, conf, kJobTimeout);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->exit_code, 0) << ran->output.substr(
                                      ran->output.size() > 6000 ? ran->output.size() - 6000 : 0)
                               << "\n--- ferry_server's log\n"
                               << testing::ReadTextFile(as_ferry.log_path)
                               << cluster_->DiagnosticLogs();
  const std::string app = ApplicationOf(ran->output);
  std::printf("Spark %s on YARN, ferry_server as nobody (%s): %zu results in %s\n",
              GetParam().version.c_str(), app.c_str(), ran->results.size(),
              absl::FormatDuration(absl::Now() - start).c_str());
  EXPECT_EQ(testing::SumsDiffer(testing::ResultsByJob(ran->results), "shuffled", "expected"), "")
      << absl::StrJoin(ran->results, "\n");
  EXPECT_EQ(testing::AnswersDiffer(ran->results, testing::kRddAnswers), "");
  EXPECT_EQ(testing::AnswersDiffer(ran->results, testing::kSqlAnswers), "");
  const std::string log = testing::ReadTextFile(as_ferry.log_path);
  EXPECT_TRUE(absl::StrContains(log, "registered Spark executor")) << log;
  EXPECT_GT(testing::ScrapeMetric(server_->metrics_port(),
                                  R"(ferry_spark_authentications_total{outcome="authenticated"})")
                .value_or(0),
            0);
  // Ended: forgotten by ferry_server, its files deleted by the aux service.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return testing::ScrapeMetric(server_->metrics_port(), "ferry_spark_executors_registered")
                       .value_or(-1) == 0 &&
               FilesIn(handoff + "/apps").empty() && FilesIn(handoff + "/stopped").empty();
      },
      absl::Seconds(60)))
      << "apps/: " << absl::StrJoin(FilesIn(handoff + "/apps"), " ")
      << "; stopped/: " << absl::StrJoin(FilesIn(handoff + "/stopped"), " ");
  std::vector<std::string> warnings;
  for (absl::string_view line : absl::StrSplit(testing::ReadTextFile(as_ferry.log_path), '\n')) {
    if (!line.empty() && (line[0] == 'W' || line[0] == 'E') &&
        (absl::StrContains(line, "yarn") || absl::StrContains(line, "ferry_server.cc"))) {
      warnings.emplace_back(line);
    }
  }
  EXPECT_TRUE(warnings.empty()) << absl::StrJoin(warnings, "\n");
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

std::vector<SparkDistribution> Sparks() { return testing::InstalledSparks(); }
std::string VersionName(const ::testing::TestParamInfo<SparkDistribution>& param) {
  std::string name = "Spark" + param.param.version;
  for (char& c : name) {
    if (c == '.' || c == '-') c = '_';
  }
  return name;
}
INSTANTIATE_TEST_SUITE_P(Versions, YarnTest, ::testing::ValuesIn(Sparks()), VersionName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(YarnTest);
INSTANTIATE_TEST_SUITE_P(Versions, YarnTwoUsersTest, ::testing::ValuesIn(Sparks()), VersionName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(YarnTwoUsersTest);

TEST(YarnAvailabilityTest, ScriptsSetupInstalledSparkAndYarn) {
  std::string why;
  const std::vector<SparkDistribution> sparks = testing::InstalledSparks(&why);
  if (sparks.empty()) GTEST_SKIP() << why;
  for (const SparkDistribution& spark : sparks) {
    absl::StatusOr<std::string> jars = testing::YarnJarsFor(spark);
    if (!jars.ok()) GTEST_SKIP() << jars.status().message();
  }
  if (::access(kShimJar, R_OK) != 0) GTEST_SKIP() << "no " << kShimJar;
}

}  // namespace
}  // namespace ferry
