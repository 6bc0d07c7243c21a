// A real standalone Spark cluster, on loopback or with its workers on hosts of a
// HostCluster, for tests of Spark applications whose
// shuffles go through an external shuffle service: a master and workers as separate JVM
// processes of a pinned Spark distribution (scripts/setup installs them under
// /opt/ferry-spark/<version>), applications submitted with spark-submit, and Spark's own
// external shuffle service as a process of its own when a test compares with it.
//
// Every process runs in a process group of its own (a worker's executors join its
// group) and dies with the test: the cluster kills each group when destroyed, and each
// daemon gets SIGKILL if the test process dies first.
#ifndef FERRY_TESTS_TESTING_SPARK_CLUSTER_H_
#define FERRY_TESTS_TESTING_SPARK_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tests/testing/process_groups.h"

namespace ferry::testing {

struct SparkDistribution {
  std::string version;  // "3.5.9"
  std::string home;     // SPARK_HOME: bin/, jars/, sbin/
  std::string python;   // the virtualenv's python, which has pyspark
};

// The distributions scripts/setup installed (under $FERRY_SPARK_ROOT, default
// /opt/ferry-spark), by version; empty when none is (the reason in *why). When
// $FERRY_SPARK_VERSIONS is set (comma-separated, "4.3.0"), only those.
std::vector<SparkDistribution> InstalledSparks(std::string* why = nullptr);

class SparkCluster {
 public:
  struct Options {
    SparkDistribution spark;
    // Logs, the workers' work dirs and the conf dir go here.
    std::string work_dir;
    // Each worker's local dirs (SPARK_LOCAL_DIRS) are <local_dir_root>/worker<i>, so
    // that an external shuffle service given that root may serve them.
    std::string local_dir_root;
    int workers = 2;
    int cores_per_worker = 1;
    // spark.authenticate with this secret on the master, the workers and every
    // application (SPARK_CONF_DIR/spark-defaults.conf); empty: off.
    std::string auth_secret;
    // More settings of the master, the workers and every application (also written to
    // spark-defaults.conf), such as spark.ssl.rpc.*.
    std::map<std::string, std::string> defaults;
    // Where the workers run: when not empty, worker i runs in network namespace
    // worker_netns[i] (a HostCluster's host) and binds worker_hosts[i], as do its
    // executors; the master and the drivers bind `host`, this namespace's address on the
    // hosts' bridge. Empty: everything on 127.0.0.1.
    std::vector<std::string> worker_netns;
    std::vector<std::string> worker_hosts;
    std::string host = "127.0.0.1";
  };

  static absl::StatusOr<std::unique_ptr<SparkCluster>> Start(const Options& options);
  SparkCluster(const SparkCluster&) = delete;
  SparkCluster& operator=(const SparkCluster&) = delete;
  ~SparkCluster();

  const std::string& master_url() const { return master_url_; }

  // Spark's own external shuffle service (org.apache.spark.deploy.ExternalShuffleService)
  // on `port`, serving every executor of this host, as ferry_server would; `conf` adds to
  // the cluster's defaults (spark.network.crypto.enabled, ...).
  absl::Status StartSparkShuffleService(uint16_t port,
                                        const std::map<std::string, std::string>& conf = {});
  // Stops every shuffle service StartSparkShuffleService started (a cluster shared by
  // several cases leaves none to the next).
  void StopSparkShuffleServices();

  struct Submitted {
    int exit_code = -1;  // -1: killed at the timeout
    std::string output;  // the driver's stdout and stderr
    // The lines the application printed that begin "RESULT ", without that prefix.
    std::vector<std::string> results;
  };
  // For a failure message: the tail of the shuffle service's log and of the stderr of
  // the executor that wrote last.
  std::string DiagnosticLogs() const;
  // Every executor's stderr so far (each worker keeps them under its work dir), oldest
  // first; and the lines of them that contain `containing`.
  std::vector<std::string> ExecutorLogs() const;
  std::vector<std::string> ExecutorLogLines(absl::string_view containing) const;

  // Runs `script` (a PySpark application) with `args` on this cluster, `conf` given as
  // --conf key=value, for at most `timeout`.
  absl::StatusOr<Submitted> Submit(const std::string& script, const std::vector<std::string>& args,
                                   const std::map<std::string, std::string>& conf,
                                   absl::Duration timeout);

 private:
  explicit SparkCluster(Options options) : options_(std::move(options)) {}
  std::map<std::string, std::string> DaemonEnv() const;
  // Waits for `workers` registered workers at the master's JSON page.
  absl::Status WaitForWorkers(absl::Duration timeout) const;

  const Options options_;
  std::string conf_dir_;
  // The port in the first `prefix` + "host:port" of `log`; empty if none.
  static std::string PortAfter(const std::string& log, absl::string_view prefix);
  std::string master_url_;
  uint16_t master_ui_port_ = 0;
  ProcessGroups groups_;         // every process started, killed at the end
  std::vector<pid_t> services_;  // those of them that are Spark's shuffle services
};

// Runs spark-submit's `argv` with `env` in a group of `groups`, its output in `log`, for
// at most `timeout`; then kills what is left of the group.
absl::StatusOr<SparkCluster::Submitted> RunSparkSubmit(
    ProcessGroups& groups, const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env, const std::string& log, absl::Duration timeout);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_SPARK_CLUSTER_H_
