// A real YARN cluster for tests of Spark applications on YARN: a ResourceManager and
// NodeManagers as JVM processes of their own (tests/testing/process_groups.h), from
// Hadoop's own jars (scripts/setup fetches them from Maven Central for each Hadoop line
// the installed Spark lines bundle: tests/e2e/yarn/pom.xml), on loopback, with the FIFO
// scheduler. Each NodeManager runs the cluster's `spark_shuffle` aux service (a class
// loaded from a jar of its own, as a NodeManager loads Spark's YarnShuffleService), keeps
// its state for recovery (yarn.nodemanager.recovery.enabled, supervised: a restart keeps
// its containers running) and can be restarted. Applications are submitted with
// spark-submit --master yarn (client mode) with HADOOP_CONF_DIR naming the cluster's
// configuration.
#ifndef FERRY_TESTS_TESTING_YARN_CLUSTER_H_
#define FERRY_TESTS_TESTING_YARN_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/spark_cluster.h"

namespace ferry::testing {

// The jars of the Hadoop line `spark` bundles (its jars/hadoop-client-api-<version>.jar),
// as scripts/setup fetched them under $FERRY_YARN_ROOT (default /opt/ferry-yarn);
// NOT_FOUND saying what is missing.
absl::StatusOr<std::string> YarnJarsFor(const SparkDistribution& spark);

class YarnCluster {
 public:
  struct Options {
    SparkDistribution spark;
    std::string hadoop_jars;  // YarnJarsFor(spark)
    // Configuration, logs and the NodeManagers' dirs go here.
    std::string work_dir;
    int node_managers = 2;
    // The NodeManagers' spark_shuffle aux service: its class and the jar it loads from.
    std::string aux_service_class;
    std::string aux_service_jar;
    // More yarn-site.xml properties of the NodeManagers (the aux service's settings).
    std::map<std::string, std::string> node_manager_site;
    int memory_mb_per_node = 4096;
  };

  static absl::StatusOr<std::unique_ptr<YarnCluster>> Start(const Options& options);
  YarnCluster(const YarnCluster&) = delete;
  YarnCluster& operator=(const YarnCluster&) = delete;
  ~YarnCluster();

  // NodeManager i's local dirs (yarn.nodemanager.local-dirs: one) lie beneath this.
  std::string local_dirs_root() const { return options_.work_dir + "/nm"; }
  std::string local_dir(int i) const;

  // Stops NodeManager i (SIGTERM; its containers keep running) and starts it again on
  // the same ports and state; returns once it has registered with the ResourceManager
  // again.
  absl::Status RestartNodeManager(int i);

  using Submitted = SparkCluster::Submitted;
  // Runs `script` (a PySpark application) with `args` on YARN, `conf` given as
  // --conf key=value, for at most `timeout`.
  absl::StatusOr<Submitted> Submit(const std::string& script, const std::vector<std::string>& args,
                                   const std::map<std::string, std::string>& conf,
                                   absl::Duration timeout);

  // The NodeManager that runs container `container_id`, or -1.
  int NodeManagerOf(const std::string& container_id) const;

  // For a failure message: what the NodeManagers and the newest containers' stderr say
  // went wrong.
  std::string DiagnosticLogs() const;
  // The NodeManagers' log lines that contain `containing`, NodeManager 0's first; and
  // the ResourceManager's.
  std::vector<std::string> NodeManagerLogLines(absl::string_view containing) const;
  std::vector<std::string> ResourceManagerLogLines(absl::string_view containing) const;
  // The paths of application `app`'s containers' stderr (its driver's and executors', on
  // every NodeManager; every application's with "").
  std::vector<std::string> ContainerLogs(const std::string& app) const;
  // The lines of those that contain `containing`.
  std::vector<std::string> ContainerLogLines(const std::string& app,
                                             absl::string_view containing) const;

 private:
  explicit YarnCluster(Options options) : options_(std::move(options)) {}
  std::map<std::string, std::string> JavaEnv() const;
  // NodeManager i's conf dir, on ports of its own.
  absl::Status WriteNodeManagerConf(int i) const;
  absl::StatusOr<pid_t> StartNodeManager(int i);
  // SIGKILLs every process of a container (whose command line names a local dir).
  void KillContainers() const;
  // Waits until NodeManager i's log says it has registered `times` times.
  absl::Status WaitForRegistration(int i, int times, absl::Duration timeout) const;

  const Options options_;
  std::string classpath_;
  std::map<std::string, std::string> site_;  // the ResourceManager's, which NodeManagers extend
  // A test's YARN need not shut down cleanly: its daemons are SIGKILLed (but for
  // RestartNodeManager's, which stops as an operator's would).
  ProcessGroups groups_{/*graceful=*/false};
  std::vector<pid_t> node_managers_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_YARN_CLUSTER_H_
