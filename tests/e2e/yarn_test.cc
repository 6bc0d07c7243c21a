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
//     one application, and an executor container SIGKILLed mid-reduce.
// Every Spark version scripts/setup installed runs on the YARN its line bundles; without
// Java, Spark or YARN's jars the test skips, saying so.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/spark_layout.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/process_groups.h"
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

// One YARN cluster per Spark version, started by its first case and kept until the
// suite ends; each case has its own ferry_server (and port), data and state dirs.
struct SharedYarn {
  TempDir work;
  TempDir handoff;  // ferry.yarn.dir
  std::unique_ptr<YarnCluster> cluster;
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
    std::unique_ptr<SharedYarn>& slot = SharedClusters()[GetParam().version];
    if (slot == nullptr) {
      slot = std::make_unique<SharedYarn>();
      YarnCluster::Options options;
      options.spark = GetParam();
      options.hadoop_jars = *jars;
      options.work_dir = slot->work.path();
      options.aux_service_class = "org.ferry.yarn.FerryShuffleService";
      options.aux_service_jar = std::filesystem::absolute(kShimJar);
      options.node_manager_site = {{"ferry.yarn.dir", slot->handoff.path()}};
      const absl::Time start = absl::Now();
      absl::StatusOr<std::unique_ptr<YarnCluster>> started = YarnCluster::Start(options);
      ASSERT_TRUE(started.ok()) << started.status();
      slot->cluster = *std::move(started);
      std::printf("YARN (%s) for Spark %s up in %s\n", jars->c_str(), GetParam().version.c_str(),
                  absl::FormatDuration(absl::Now() - start).c_str());
    }
    yarn_ = slot->cluster.get();
    handoff_ = slot->handoff.path();
    options_ = testing::TestServerOptions(data_.path(), {});
    options_.spark_address = "127.0.0.1:0";
    // Both NodeManagers of this host share one ferry_server (and hand-off dir): the
    // NodeManagers' local dirs' parent is the root. One NodeManager's own local dirs as
    // the roots (none given): FerryTakesTheNodeManagersLocalDirs.
    options_.spark_executors.dir_roots = {yarn_->local_dirs_root()};
    options_.spark_executors.state_dir = state_.path();
    options_.spark_yarn.dir = handoff_;
    options_.sweep_interval = absl::Milliseconds(500);
  }

  void StartFerry() { server_ = testing::StartServer(options_); }

  std::map<std::string, std::string> Conf() const {
    return {{"spark.executor.memory", "512m"},
            {"spark.executor.cores", "1"},
            {"spark.executor.instances", "2"},
            {"spark.driver.memory", "512m"},
            {"spark.ui.enabled", "false"},
            {"spark.shuffle.readHostLocalDisk", "false"}};
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

  // The application ended: the NodeManagers told the aux service, ferry_server forgot its
  // executors, and nothing of it is left in the hand-off dir.
  void ExpectForgotten(const std::string& app) {
    ASSERT_FALSE(app.empty());
    EXPECT_TRUE(testing::WaitFor(
        [&] {
          return server_->spark_executors()->size() == 0 && FilesIn(handoff_ + "/apps").empty() &&
                 FilesIn(handoff_ + "/stopped").empty();
        },
        absl::Seconds(60)))
        << server_->spark_executors()->size() << " registrations left; apps/: "
        << absl::StrJoin(FilesIn(handoff_ + "/apps"), " ")
        << "; stopped/: " << absl::StrJoin(FilesIn(handoff_ + "/stopped"), " ");
    EXPECT_FALSE(yarn_->NodeManagerLogLines(absl::StrCat("Application ", app, " stopped")).empty());
  }

  void ExpectSameSums(const std::map<std::string, std::string>& by_job, const std::string& job,
                      const std::string& expected) {
    ASSERT_EQ(by_job.count(job), 1u) << job;
    ASSERT_EQ(by_job.count(expected), 1u) << expected;
    for (const char* field : {"keys", "total", "weighted"}) {
      EXPECT_EQ(JsonField(by_job.at(job), field), JsonField(by_job.at(expected), field))
          << field << " of " << by_job.at(job) << " vs " << by_job.at(expected);
    }
  }
  static std::map<std::string, std::string> ByJob(const std::vector<std::string>& results) {
    std::map<std::string, std::string> by_job;  // RESULT {"job": J, ...}
    for (const std::string& line : results) by_job[JsonField(line, "job")] = line;
    return by_job;
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
  const std::vector<std::string> jobs = {"rdd", "sql"};
  const Ran none = Run("no shuffle service", Conf(), jobs);
  ASSERT_EQ(none.results.size(), 5u) << absl::StrJoin(none.results, "\n");

  const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
  const Ran ferry = Run("ferry_server, dynamic allocation", WithFerry(), {"rdd", "sql", "checked"});
  ASSERT_EQ(ferry.results.size(), 7u) << absl::StrJoin(ferry.results, "\n");
  EXPECT_EQ(std::vector<std::string>(ferry.results.begin(), ferry.results.begin() + 5),
            none.results);
  const std::map<std::string, std::string> by_job = ByJob(ferry.results);
  ExpectSameSums(by_job, "shuffled", "expected");
  const std::vector<MetricFamilySamples> after = server_->CollectMetrics();
  const double blocks = testing::MetricSum(after, "ferry_sent_blocks_total", "front_door", "spark") -
                        testing::MetricSum(before, "ferry_sent_blocks_total", "front_door", "spark");
  std::printf("ferry_server sent Spark's reducers %.0f blocks\n", blocks);
  EXPECT_GT(blocks, 0);
  std::printf("%zu containers of %s\n",
              yarn_->NodeManagerLogLines(absl::StrCat("of application ", ferry.app, " initialized"))
                  .size(),
              ferry.app.c_str());
  ExpectForgotten(ferry.app);
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
