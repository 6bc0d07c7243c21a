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
// Every Spark version scripts/setup installed runs (3.5.x and the newest 4.x); without
// any, or without Java, the test skips, saying so. Reducers fetch every remote block
// through the service (spark.shuffle.readHostLocalDisk=false): all executors share one
// host here, where Spark would otherwise read each other's files straight from disk.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/loopback.h"
#include "tests/testing/spark_cluster.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::SparkCluster;
using ::ferry::testing::SparkDistribution;
using ::ferry::testing::TempDir;

constexpr char kJobs[] = "tests/e2e/spark_jobs.py";
constexpr absl::Duration kJobTimeout = absl::Minutes(3);

double Sample(const std::vector<MetricFamilySamples>& families, const std::string& name,
              const std::string& door) {
  double sum = 0;
  for (const MetricFamilySamples& family : families) {
    if (family.name != name) continue;
    for (const MetricSample& s : family.samples) {
      for (const auto& [key, value] : s.labels) {
        if (key == "front_door" && value == door) sum += s.value;
      }
    }
  }
  return sum;
}

class RealSparkTest : public ::testing::TestWithParam<SparkDistribution> {
 protected:
  void SetUp() override {
    FerryServerOptions options = testing::TestServerOptions(data_.path(), {});
    options.spark_address = "127.0.0.1:0";
    options.spark_executors.dir_roots = {local_.path()};
    options.spark_executors.state_dir = state_.path();
    server_ = testing::StartServer(options);
    SparkCluster::Options cluster;
    cluster.spark = GetParam();
    cluster.work_dir = work_.path();
    cluster.local_dir_root = local_.path();
    absl::StatusOr<std::unique_ptr<SparkCluster>> started = SparkCluster::Start(cluster);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
  }

  // What every run shares: two one-core executors of 512 MiB, no UI.
  static std::map<std::string, std::string> BaseConf() {
    return {{"spark.executor.memory", "512m"},
            {"spark.executor.cores", "1"},
            {"spark.cores.max", "2"},
            {"spark.driver.memory", "512m"},
            {"spark.ui.enabled", "false"},
            {"spark.shuffle.readHostLocalDisk", "false"}};
  }
  static std::map<std::string, std::string> WithService(uint16_t port) {
    std::map<std::string, std::string> conf = BaseConf();
    conf["spark.shuffle.service.enabled"] = "true";
    conf["spark.shuffle.service.port"] = absl::StrCat(port);
    return conf;
  }

  // Runs the jobs; their RESULT lines.
  std::vector<std::string> Run(const std::string& what, const std::map<std::string, std::string>& conf,
                               const std::vector<std::string>& jobs) {
    const absl::Time start = absl::Now();
    absl::StatusOr<SparkCluster::Submitted> ran = cluster_->Submit(kJobs, jobs, conf, kJobTimeout);
    EXPECT_TRUE(ran.ok()) << ran.status();
    if (!ran.ok()) return {};
    const std::string tail = ran->output.substr(ran->output.size() > 6000 ? ran->output.size() - 6000 : 0);
    EXPECT_EQ(ran->exit_code, 0) << what << ": the application failed:\n"
                                 << tail << "\n" << cluster_->DiagnosticLogs();
    std::printf("Spark %s, %s: %zu results in %s\n", GetParam().version.c_str(), what.c_str(),
                ran->results.size(), absl::FormatDuration(absl::Now() - start).c_str());
    return ran->results;
  }

  TempDir work_;
  TempDir local_;
  TempDir data_;
  TempDir state_;
  std::unique_ptr<FerryServer> server_;
  std::unique_ptr<SparkCluster> cluster_;  // destroyed first: no executor outlives the server
};

TEST_P(RealSparkTest, JobsGiveTheSameAnswersWithFerrySparksServiceAndNone) {
  const std::vector<std::string> jobs = {"rdd", "sql"};
  const std::vector<std::string> none = Run("no shuffle service", BaseConf(), jobs);
  ASSERT_EQ(none.size(), 5u) << absl::StrJoin(none, "\n");

  uint16_t spark_port = 0;
  { testing::ListenLoopback(&spark_port, 1); }
  ASSERT_TRUE(cluster_->StartSparkShuffleService(spark_port).ok());
  EXPECT_EQ(Run("Spark's shuffle service", WithService(spark_port), jobs), none);

  const std::vector<MetricFamilySamples> before = server_->CollectMetrics();
  EXPECT_EQ(Run("ferry_server", WithService(server_->spark_port()), jobs), none);
  const std::vector<MetricFamilySamples> after = server_->CollectMetrics();
  const double bytes = Sample(after, "ferry_sent_bytes_total", "spark") -
                       Sample(before, "ferry_sent_bytes_total", "spark");
  const double blocks = Sample(after, "ferry_sent_blocks_total", "spark") -
                        Sample(before, "ferry_sent_blocks_total", "spark");
  std::printf("ferry_server sent Spark's reducers %.0f blocks, %.0f bytes\n", blocks, bytes);
  EXPECT_GT(blocks, 0);
  EXPECT_GT(bytes, 0);

  // The other ways Spark's reducers fetch: every block over 1 KiB streamed to a file
  // (StreamRequest, not ChunkFetch), and the old protocol (OpenBlocks of block ids).
  std::map<std::string, std::string> conf = WithService(server_->spark_port());
  conf["spark.network.maxRemoteBlockSizeFetchToMem"] = "1k";
  conf["spark.shuffle.useOldFetchProtocol"] = "true";
  const std::vector<std::string> rdd(none.begin(), none.begin() + 3);
  EXPECT_EQ(Run("ferry_server, fetched to disk over the old protocol", conf, {"rdd"}), rdd);
}

std::vector<SparkDistribution> Sparks() { return testing::InstalledSparks(); }

TEST(RealSparkAvailabilityTest, ScriptsSetupInstalledSpark) {
  std::string why;
  if (testing::InstalledSparks(&why).empty()) GTEST_SKIP() << why;
}

INSTANTIATE_TEST_SUITE_P(Versions, RealSparkTest, ::testing::ValuesIn(Sparks()),
                         [](const ::testing::TestParamInfo<SparkDistribution>& param) {
                           std::string name = "Spark" + param.param.version;
                           for (char& c : name) {
                             if (c == '.' || c == '-') c = '_';
                           }
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealSparkTest);

}  // namespace
}  // namespace ferry
