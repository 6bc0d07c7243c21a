// A real one-node Kubernetes (tests/testing/kube_cluster.h): its node comes up Ready, a
// pod of an image built here runs on it with an address of the pod network and its log
// reaches kubectl through the API server, a pod on the node's network sees the node's
// address, and stopping the cluster leaves no process, mount, cgroup or bridge behind.
// On it, ferry_server's DaemonSet serves Spark's protocol at the node's address, its node
// agent hands it applications' starts, secrets and ends, and Spark applications'
// executors shuffle through it and go when idle.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/secret.h"
#include "common/shuffle_writer.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/http_get.h"
#include "tests/testing/kube_cluster.h"
#include "tests/testing/kube_ferry.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/spark_apps.h"
#include "tests/testing/spark_cluster.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry::testing {
namespace {

// A root file system of Debian's static busybox: /bin/sh and the tools the pods use.
std::string BusyboxRoot(const std::string& dir) {
  std::filesystem::create_directories(dir + "/bin");
  std::filesystem::copy_file("/usr/bin/busybox", dir + "/bin/busybox");
  for (const char* tool : {"sh", "cat", "echo", "hostname", "ip", "grep", "sleep"}) {
    std::filesystem::create_symlink("busybox", dir + "/bin/" + tool);
  }
  return dir;
}

// A pod on the pod network, and one on the node's.
constexpr char kPods[] = R"yaml(apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: hello
    image: ferry.local/busybox:v1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo hello from $(hostname)"]
---
apiVersion: v1
kind: Pod
metadata: {name: on-the-node, namespace: default}
spec:
  restartPolicy: Never
  hostNetwork: true
  containers:
  - name: addresses
    image: ferry.local/busybox:v1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "ip -4 addr"]
)yaml";

// Whether something accepts a TCP connection at ip:port.
bool AcceptsOn(const std::string& ip, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  const bool accepted = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return accepted;
}

bool Mounted(const std::string& beneath) {
  std::ifstream info("/proc/self/mountinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (absl::StrContains(line, " " + beneath)) return true;
  }
  return false;
}

TEST(KubernetesTest, AOneNodeClusterRunsPodsAndLeavesNothingBehind) {
  TempDir dir;
  const std::string work = dir.path() + "/cluster";
  std::string bridge_check;
  {
    absl::StatusOr<std::unique_ptr<KubeCluster>> started = KubeCluster::Start({work});
    if (started.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << started.status();
    }
    ASSERT_TRUE(started.ok()) << started.status();
    KubeCluster& cluster = **started;
    ASSERT_TRUE(
        cluster
            .LoadImage("ferry.local/busybox:v1", BusyboxRoot(dir.path() + "/busybox"), {"/bin/sh"})
            .ok());

    const absl::Status applied = cluster.Apply(kPods);
    ASSERT_TRUE(applied.ok()) << applied;
    ASSERT_TRUE(
        cluster
            .WaitForJsonPath({"pod", "hello"}, "{.status.phase}", "Succeeded", absl::Seconds(120))
            .ok())
        << cluster.DiagnosticLogs();
    absl::StatusOr<CommandResult> logs = cluster.Kubectl({"logs", "hello"});
    ASSERT_TRUE(logs.ok()) << logs.status();
    EXPECT_EQ(logs->output, "hello from hello\n");
    absl::StatusOr<CommandResult> ip =
        cluster.Kubectl({"get", "pod", "hello", "-o", "jsonpath={.status.podIP}"});
    ASSERT_TRUE(ip.ok());
    EXPECT_TRUE(absl::StartsWith(ip->output, "10.244.0.")) << ip->output;

    ASSERT_TRUE(cluster
                    .WaitForJsonPath({"pod", "on-the-node"}, "{.status.phase}", "Succeeded",
                                     absl::Seconds(120))
                    .ok());
    logs = cluster.Kubectl({"logs", "on-the-node"});
    ASSERT_TRUE(logs.ok());
    EXPECT_TRUE(absl::StrContains(logs->output, "inet " + cluster.node_ip() + "/")) << logs->output;
  }
  // Stopped: nothing of it is left.
  EXPECT_FALSE(Mounted(work)) << "a mount beneath " << work << " is left";
  struct stat st {};
  EXPECT_NE(::stat("/sys/class/net/ferrytest0", &st), 0) << "the bridge is left";
  EXPECT_NE(::stat("/sys/fs/cgroup/pids/ferry-test-pods", &st), 0) << "the pods' cgroup is left";
}

// A cluster with ferry_server's DaemonSet on it, Ready, for each test; its hostPath dirs
// are under node_dirs(). Skipped where no cluster can run (not root, no programs).
class FerryOnKubernetesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<KubeCluster>> started =
        KubeCluster::Start({dir_.path() + "/cluster"});
    if (started.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << started.status();
    }
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
    const absl::Status serving = StartFerryOnTheNode(
        *cluster_, "server/ferry_server", "server/kubernetes/ferry-k8s-agent",
        "packaging/kubernetes/ferry-server.yaml", dir_.path() + "/image", node_dirs());
    ASSERT_TRUE(serving.ok()) << serving;
  }

  std::string node_dirs() const { return dir_.path() + "/node"; }

  // Spark's own Kubernetes backend for `spark`, as both Spark cases submit: a client-mode
  // driver on the node, executors of the image scripts/setup made (imported here) with
  // their local dirs on the node's dir ferry_server serves (at the path its pod sees it at
  // too) and the handshakes' dir, spark.authenticate (the backend gives executors a
  // secret of the application's own in their pods, which the node agent hands
  // ferry_server), and dynamic allocation without shuffle tracking, releasing executors
  // idle for 2 s. `pod_template` is the executors' pod template.
  std::map<std::string, std::string> SparkSettings(const SparkDistribution& spark,
                                                   const std::string& pod_template,
                                                   const std::string& handshakes) {
    const std::string image = "ferry.local/spark:" + spark.version;
    const std::string archive = SparkImageArchive(spark.version);
    EXPECT_TRUE(std::filesystem::exists(archive)) << archive << ": run scripts/setup";
    const absl::Status imported = cluster_->ImportImage(image, archive);
    EXPECT_TRUE(imported.ok()) << imported;
    std::filesystem::create_directories(handshakes);
    return {
        {"spark.kubernetes.container.image", image},
        {"spark.kubernetes.container.image.pullPolicy", "Never"},
        {"spark.kubernetes.namespace", "default"},
        {"spark.kubernetes.executor.podTemplateFile", pod_template},
        {"spark.kubernetes.executor.request.cores", "100m"},
        {"spark.kubernetes.allocation.batch.delay", "1s"},
        {"spark.executor.memory", "512m"},
        {"spark.executor.cores", "1"},
        {"spark.driver.host", cluster_->node_ip()},
        {"spark.driver.bindAddress", cluster_->node_ip()},
        {"spark.ui.enabled", "false"},
        {"spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1.mount.path",
         "/var/lib/ferry/spark-local"},
        {"spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1.options.path",
         node_dirs() + "/spark-local"},
        {"spark.shuffle.service.port", "7337"},
        {"spark.authenticate", "true"},
        {"spark.dynamicAllocation.enabled", "true"},
        {"spark.dynamicAllocation.shuffleTracking.enabled", "false"},
        {"spark.dynamicAllocation.minExecutors", "0"},
        {"spark.dynamicAllocation.initialExecutors", "2"},
        {"spark.dynamicAllocation.maxExecutors", "2"},
        {"spark.kubernetes.executor.volumes.hostPath.handshakes.mount.path", handshakes},
        {"spark.kubernetes.executor.volumes.hostPath.handshakes.options.path", handshakes},
        {"spark.dynamicAllocation.executorIdleTimeout", "2s"},
        {"spark.dynamicAllocation.schedulerBacklogTimeout", "1s"},
    };
  }

  // spark-submit of tests/e2e/spark_jobs.py `jobs` with `conf`, and its environment.
  std::vector<std::string> SubmitArgv(const SparkDistribution& spark,
                                      const std::map<std::string, std::string>& conf,
                                      const std::vector<std::string>& jobs) const {
    std::vector<std::string> argv = {spark.home + "/bin/spark-submit", "--master",
                                     "k8s://" + cluster_->api_server_url(), "--deploy-mode",
                                     "client"};
    for (const auto& [key, value] : conf) {
      argv.push_back("--conf");
      argv.push_back(absl::StrCat(key, "=", value));
    }
    argv.push_back("tests/e2e/spark_jobs.py");
    argv.insert(argv.end(), jobs.begin(), jobs.end());
    return argv;
  }
  std::map<std::string, std::string> SubmitEnv(const SparkDistribution& spark) const {
    const std::string spark_conf = dir_.path() + "/spark-conf";
    std::filesystem::create_directories(spark_conf);
    return {{"JAVA_HOME", JavaHome()},        {"SPARK_HOME", spark.home},
            {"SPARK_CONF_DIR", spark_conf},   {"KUBECONFIG", cluster_->admin_kubeconfig()},
            {"PYSPARK_PYTHON", spark.python}, {"PYSPARK_DRIVER_PYTHON", spark.python}};
  }

  // ferry_server's DaemonSet rolled: its pod deleted, the next one Ready. What went
  // wrong, else "".
  // Rolls the DaemonSet as an upgrade does: the node's new pod starts beside the old one
  // and its ferry_server takes over (--take-over); the old pod goes. What went wrong,
  // else "".
  std::string RollFerry() {
    const auto pods = [&]() -> std::string {
      absl::StatusOr<CommandResult> listed = cluster_->Kubectl(
          {"-n", "ferry", "get", "pod", "-l", "app.kubernetes.io/name=ferry-server", "-o",
           "jsonpath={.items[*].metadata.name}"});
      return listed.ok() && listed->exit_code == 0 ? listed->output : "";
    };
    const std::string old_pod = pods();
    for (const std::vector<std::string>& step :
         {std::vector<std::string>{"-n", "ferry", "rollout", "restart", "daemonset/ferry-server"},
          std::vector<std::string>{"-n", "ferry", "rollout", "status", "daemonset/ferry-server",
                                   "--timeout=150s"}}) {
      absl::StatusOr<CommandResult> done = cluster_->Kubectl(step, absl::Seconds(180));
      if (!done.ok() || done->exit_code != 0) {
        std::string logs;
        for (const char* previous : {"--previous=false", "--previous=true"}) {
          absl::StatusOr<CommandResult> log =
              cluster_->Kubectl({"-n", "ferry", "logs", "-l", "app.kubernetes.io/name=ferry-server",
                                 "-c", "ferry-server", "--tail=15", "--prefix", previous});
          absl::StrAppend(&logs, previous, ":\n", log.ok() ? log->output : "", "\n");
        }
        return absl::StrCat("kubectl ", absl::StrJoin(step, " "), ": ",
                            done.ok() ? done->output : done.status().ToString(),
                            "\nferry_server's pods:\n", logs);
      }
    }
    std::string new_pod;
    if (!WaitFor(
            [&] {
              new_pod = pods();
              return !new_pod.empty() && new_pod != old_pod && !absl::StrContains(new_pod, " ");
            },
            absl::Seconds(90))) {
      return absl::StrCat("the old pod ", old_pod, " did not go: ", new_pod);
    }
    absl::StatusOr<CommandResult> log =
        cluster_->Kubectl({"-n", "ferry", "logs", new_pod, "-c", "ferry-server"});
    if (!log.ok() || !absl::StrContains(log->output, "taken over from pid")) {
      return absl::StrCat("the new pod's ferry_server did not take over:\n",
                          log.ok() ? log->output : log.status().ToString());
    }
    return "";
  }

  // spark_jobs.py's pod-deleted job: once a map task waits on its executor
  // (DIR/mapping.<pod>), that executor's pod is deleted, then DIR/deleted written. What
  // went wrong, else "".
  std::string DeleteTheWaitingPod(const std::string& handshakes, const std::atomic<bool>& ended) {
    std::string pod;
    const auto waiting_pod = [&] {
      std::error_code error;
      for (const auto& entry : std::filesystem::directory_iterator(handshakes, error)) {
        const std::string name = entry.path().filename().string();
        if (absl::StartsWith(name, "mapping.")) pod = name.substr(8);
      }
      return ended || !pod.empty();
    };
    if (!WaitFor(waiting_pod, absl::Minutes(4)) || ended) {
      Touch(handshakes + "/deleted");
      return "no map task waited on an executor";
    }
    absl::StatusOr<CommandResult> deleted =
        cluster_->Kubectl({"delete", "pod", pod, "--wait=true"}, absl::Seconds(90));
    Touch(handshakes + "/deleted");
    if (!deleted.ok() || deleted->exit_code != 0) {
      return absl::StrCat("deleting ", pod, ": ",
                          deleted.ok() ? deleted->output : deleted.status().ToString());
    }
    return "";
  }

  // spark_jobs.py's pod-deleted and hold-idle jobs of `spark` with `conf` (log: `name`),
  // directed as both Spark cases run them: an executor's pod deleted while a map task
  // waits on it; then held: the checked shuffle written, every executor released and its
  // pod gone, their outputs registered; then ferry_server's pod rolled, and the shuffle
  // read again from the next one, which kept the registrations in its --state-dir. The
  // deleted executor's finished map outputs were fetched from ferry_server (no stage ran
  // again), the answers match the sums computed without Spark, the read again skipped the
  // map stage and its blocks came from the next ferry_server, and nothing of the
  // application is left on the node after its end.
  void RunHeldShuffle(const SparkDistribution& spark,
                      const std::map<std::string, std::string>& conf, const std::string& handshakes,
                      const std::string& name) {
    ProcessGroups groups;
    std::atomic<bool> ended{false};
    absl::StatusOr<SparkCluster::Submitted> ran = absl::UnknownError("not run");
    std::thread driver([&] {
      ran = RunSparkSubmit(
          groups, SubmitArgv(spark, conf, {"pod-deleted=" + handshakes, "hold-idle=" + handshakes}),
          SubmitEnv(spark), absl::StrCat(dir_.path(), "/submit-", name), absl::Minutes(6));
      ended = true;
    });
    double registered = 0;
    const std::string failure = [&]() -> std::string {
      if (std::string deleted = DeleteTheWaitingPod(handshakes, ended); !deleted.empty()) {
        return deleted;
      }
      if (!WaitFor([&] { return ended || std::filesystem::exists(handshakes + "/held.ready"); },
                   absl::Minutes(5)) ||
          ended) {
        return "the application did not reach held";
      }
      if (absl::Status gone =
              cluster_->WaitForJsonPath({"pods", "-l", "spark-role=executor"},
                                        "{.items[*].metadata.name}", "", absl::Seconds(120));
          !gone.ok()) {
        return absl::StrCat("executor pods left: ", gone.message());
      }
      registered =
          ScrapeMetric(9464, "ferry_spark_executors_registered", cluster_->node_ip()).value_or(0);
      return RollFerry();
    }();
    Touch(handshakes + "/deleted");
    Touch(handshakes + "/held.done");
    driver.join();
    ASSERT_TRUE(ran.ok()) << ran.status();
    const std::string output_tail =
        ran->output.substr(ran->output.size() > 8000 ? ran->output.size() - 8000 : 0);
    const auto executor_logs = [&] {
      absl::StatusOr<CommandResult> logs = cluster_->Kubectl(
          {"logs", "-l", "spark-role=executor", "--tail=30", "--prefix", "--max-log-requests=20"});
      return logs.ok() ? logs->output : logs.status().ToString();
    };
    ASSERT_EQ(failure, "") << output_tail << "\nexecutors:\n"
                           << executor_logs() << "\n"
                           << cluster_->DiagnosticLogs();
    ASSERT_EQ(ran->exit_code, 0) << output_tail << "\nexecutors:\n" << executor_logs();
    EXPECT_GT(registered, 0);
    std::map<std::string, std::string> by_job = ResultsByJob(ran->results);
    EXPECT_EQ(SumsDiffer(by_job, "pod-deleted", "expected-pod-deleted"), "");
    EXPECT_EQ(JsonField(by_job["pod-deleted"], "max_attempt"), "0") << by_job["pod-deleted"];
    EXPECT_NE(JsonField(by_job["pod-deleted"], "failed_tasks"), "0") << by_job["pod-deleted"];
    EXPECT_EQ(SumsDiffer(by_job, "shuffled", "expected"), "");
    EXPECT_EQ(SumsDiffer(by_job, "read-again", "expected"), "");
    EXPECT_EQ(JsonField(by_job["read-again"], "stages_run"), "1") << by_job["read-again"];
    EXPECT_EQ(LeftAfterTheEnd(), "");
    // The rolled ferry_server's count: the read again.
    const double sent =
        ScrapeMetric(9464, R"(ferry_sent_blocks_total{front_door="spark",mode="splice"})",
                     cluster_->node_ip())
            .value_or(0);
    std::printf("Spark %s, %s: the next ferry_server sent %.0f blocks\n", spark.version.c_str(),
                name.c_str(), sent);
    EXPECT_GT(sent, 0);
  }

  // Once an application ended: every file of it on the node goes (the agent saw Spark
  // delete its ConfigMap, and ferry_server deleted what its executors registered; Spark
  // deleted its executors' own dirs where they were theirs to delete). What is left with
  // a file in it, else "". A dir of an executor stopped before it registered stays, with
  // no file: it is named on stdout (docs/spark.md says so).
  std::string LeftAfterTheEnd() {
    std::vector<std::string> left, empty;
    WaitFor(
        [&] {
          left.clear();
          empty.clear();
          std::error_code error;
          for (const auto& entry :
               std::filesystem::directory_iterator(node_dirs() + "/spark-local", error)) {
            bool has_file = !entry.is_directory();
            for (std::filesystem::recursive_directory_iterator it(entry.path(), error), end;
                 !has_file && !error && it != end; it.increment(error)) {
              has_file = !it->is_directory();
            }
            (has_file ? left : empty).push_back(entry.path().filename().string());
          }
          return left.empty();
        },
        absl::Seconds(90));
    if (!empty.empty()) {
      std::printf("left with no file in them: %s\n", absl::StrJoin(empty, " ").c_str());
    }
    if (left.empty()) return "";
    absl::StatusOr<CommandResult> log = cluster_->Kubectl(
        {"-n", "ferry", "logs", "daemonset/ferry-server", "-c", "ferry-server", "--tail=40"});
    return absl::StrCat("left after the application's end: ", absl::StrJoin(left, " "),
                        "\nferry_server's log:\n",
                        log.ok() ? log->output : log.status().ToString());
  }

  TempDir dir_;
  std::unique_ptr<KubeCluster> cluster_;  // stopped before dir_ goes
};

// What Spark's Kubernetes backend makes for an application, as the agent reads it: the
// executors' ConfigMap, and an executor's pod on the node (its labels, and the
// application's secret in its environment), here running a shell that waits.
std::string SparkLikeApplication(const std::string& app, const std::string& secret) {
  return absl::StrCat(R"yaml(apiVersion: v1
kind: ConfigMap
metadata:
  name: spark-exec-)yaml",
                      app, R"yaml(-conf-map
  namespace: default
  labels: {spark-app-selector: )yaml",
                      app, R"yaml(, spark-role: executor}
data: {}
---
apiVersion: v1
kind: Pod
metadata:
  name: )yaml",
                      app, R"yaml(-exec-1
  namespace: default
  labels: {spark-app-selector: )yaml",
                      app, R"yaml(, spark-role: executor, spark-exec-id: "1"}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  containers:
  - name: spark-kubernetes-executor
    image: ferry.local/busybox:v1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    env:
    - {name: _SPARK_AUTH_SECRET, value: ")yaml",
                      secret, R"yaml("}
)yaml");
}

// The node agent hands ferry_server each application its pods name: an executor's pod
// on the node starts it with the secret from the pod, which ferry_server then requires;
// the pods and ConfigMap deleted end it, and ferry_server deletes the executors' dirs.
// That holds across a restart of the API server (the agent's watches break and resume)
// and when the application ends while the DaemonSet's pod is off the node (the next
// agent finds the end, the next ferry_server the registration it kept).
TEST_F(FerryOnKubernetesTest, TheNodeAgentHandsApplicationsToFerryServer) {
  KubeCluster& cluster = *cluster_;
  // Its planes listen on the node's address.
  EXPECT_TRUE(AcceptsOn(cluster.node_ip(), 7337));
  EXPECT_TRUE(AcceptsOn(cluster.node_ip(), 7071));
  ASSERT_TRUE(
      cluster
          .LoadImage("ferry.local/busybox:v1", BusyboxRoot(dir_.path() + "/busybox"), {"/bin/sh"})
          .ok());
  const std::string service = cluster.node_ip() + ":7337";
  const std::vector<std::string> partitions = {"first partition", "", std::string(70000, 'x')};
  // An executor's map output under the shared local dir (the node's hostPath), registered
  // by the path its pod and ferry_server's see, read by Spark's protocol at the node's
  // address with the application's secret. The error says what failed.
  const auto register_and_fetch = [&](const std::string& app, const std::string& secret,
                                      const std::string& on_node) -> std::string {
    SparkFetchOptions options;
    options.auth_secret = Secret(secret);
    SparkShuffleClient client;
    const std::string in_pods =
        "/var/lib/ferry/spark-local/" + std::filesystem::path(on_node).filename().string();
    const absl::Status registered = client.RegisterExecutor(
        service, {app, "1", {{in_pods}, 64, "org.apache.spark.shuffle.sort.SortShuffleManager"}},
        options);
    if (!registered.ok()) return registered.ToString();
    BuffersSink sink(partitions.size());
    absl::StatusOr<SparkFetchStats> fetched =
        client.Fetch(service, app, "1", {{0, 7, 0, 1}, {0, 7, 1, 2}, {0, 7, 2, 3}}, sink, options);
    if (!fetched.ok()) return fetched.status().ToString();
    return sink.blocks() == partitions ? "" : "other bytes than written";
  };
  const auto start_app = [&](const std::string& app, const std::string& secret) {
    const std::string on_node = node_dirs() + "/spark-local/blockmgr-" + app;
    std::filesystem::create_directories(on_node);
    absl::StatusOr<ShuffleWriter> writer =
        ShuffleWriter::CreateInSparkLayout({on_node}, 64, 0, 7, ChecksumAlgorithm::kAdler32);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (size_t r = 0; r < partitions.size(); ++r) {
      ASSERT_TRUE(writer->Write(static_cast<int32_t>(r), partitions[r]).ok());
    }
    ASSERT_TRUE(writer->Commit(static_cast<int32_t>(partitions.size())).ok());
    ASSERT_TRUE(cluster.Apply(SparkLikeApplication(app, secret)).ok());
    // Served once the agent has handed the application over.
    std::string last;
    EXPECT_TRUE(WaitFor(
        [&] {
          last = register_and_fetch(app, secret, on_node);
          return last.empty();
        },
        absl::Seconds(90)))
        << last << "\n"
        << cluster.DiagnosticLogs();
    EXPECT_NE(register_and_fetch(app, "not its secret", on_node), "");
  };
  const auto end_app = [&](const std::string& app) {
    absl::StatusOr<CommandResult> deleted = cluster.Kubectl(
        {"delete", "pod,configmap", "-l", "spark-app-selector=" + app, "--wait=true"},
        absl::Seconds(90));
    ASSERT_TRUE(deleted.ok() && deleted->exit_code == 0) << (deleted.ok() ? deleted->output : "");
  };
  // The agent's log in the DaemonSet's pod now.
  const auto agent_log = [&] {
    absl::StatusOr<CommandResult> log =
        cluster.Kubectl({"-n", "ferry", "logs", "daemonset/ferry-server", "-c", "ferry-k8s-agent"});
    return log.ok() ? log->output : log.status().ToString();
  };
  const auto dirs_go = [&](const std::string& app) {
    const std::string on_node = node_dirs() + "/spark-local/blockmgr-" + app;
    EXPECT_TRUE(WaitFor([&] { return !std::filesystem::exists(on_node); }, absl::Seconds(90)))
        << on_node << " is left\n"
        << agent_log() << "\n"
        << cluster.DiagnosticLogs();
    const std::string log = agent_log();
    EXPECT_TRUE(absl::StrContains(log, "msg=\"application ended\" app=" + app +
                                           " why=\"Spark deleted its executors' ConfigMap\""))
        << log;
  };

  const std::string first = "spark-0123456789abcdef0123456789abcdef";
  ASSERT_NO_FATAL_FAILURE(start_app(first, "first's secret"));
  // The API server restarts: the agent's watches break and resume, and see the end.
  const absl::Status restarted = cluster.RestartApiServer();
  ASSERT_TRUE(restarted.ok()) << restarted << "\n" << cluster.DiagnosticLogs();
  ASSERT_NO_FATAL_FAILURE(end_app(first));
  dirs_go(first);
  EXPECT_NE(
      register_and_fetch(first, "first's secret", node_dirs() + "/spark-local/blockmgr-" + first),
      "")
      << "an ended application is served";

  // The DaemonSet's pod leaves the node (a node selector no node has), the application
  // ends meanwhile, and the pod comes back.
  const std::string second = "spark-fedcba9876543210fedcba9876543210";
  ASSERT_NO_FATAL_FAILURE(start_app(second, "second's secret"));
  const auto patch = [&](const std::string& type, const std::string& change) {
    absl::StatusOr<CommandResult> patched = cluster.Kubectl(
        {"-n", "ferry", "patch", "daemonset", "ferry-server", "--type=" + type, "-p", change});
    ASSERT_TRUE(patched.ok() && patched->exit_code == 0) << (patched.ok() ? patched->output : "");
  };
  ASSERT_NO_FATAL_FAILURE(
      patch("merge", R"({"spec":{"template":{"spec":{"nodeSelector":{"ferry-test":"off"}}}}})"));
  const absl::Status off =
      cluster.WaitForJsonPath({"-n", "ferry", "pods", "-l", "app.kubernetes.io/name=ferry-server"},
                              "{.items[*].metadata.name}", "", absl::Seconds(120));
  ASSERT_TRUE(off.ok()) << off;
  ASSERT_NO_FATAL_FAILURE(end_app(second));
  ASSERT_TRUE(std::filesystem::exists(node_dirs() + "/spark-local/blockmgr-" + second));
  ASSERT_NO_FATAL_FAILURE(
      patch("json", R"([{"op":"remove","path":"/spec/template/spec/nodeSelector"}])"));
  const absl::Status ready_again = FerryReady(cluster);
  ASSERT_TRUE(ready_again.ok()) << ready_again;
  dirs_go(second);
}

// Executors on the node's network: each registers with the shuffle service at its pod's
// address, the node's, where ferry_server serves.
constexpr char kExecutorTemplate[] = R"yaml(apiVersion: v1
kind: Pod
spec:
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
)yaml";

// Spark's own Kubernetes backend, a driver on the node (client mode) and executors on the
// node's network in pods of an image built here, with the shuffle service on
// (spark.shuffle.service.enabled, Spark's stock setting; no jar of Ferry's on Spark's
// side), spark.authenticate, and dynamic allocation with shuffle tracking off, run as
// RunHeldShuffle directs: an executor's pod deleted mid-map, every executor released,
// ferry_server's pod rolled, the shuffle read again from the next one, nothing left after
// the end. Both Spark lines, one after the other on one cluster.
TEST_F(FerryOnKubernetesTest, SparkExecutorsShuffleThroughTheDaemonSetAndGoWhenIdle) {
  std::string why;
  const std::vector<SparkDistribution> sparks = InstalledSparks(&why);
  if (sparks.empty()) GTEST_SKIP() << why;
  const std::string pod_template = dir_.path() + "/executor.yaml";
  ASSERT_TRUE(WriteTextFile(pod_template, kExecutorTemplate).ok());

  for (const SparkDistribution& spark : sparks) {
    SCOPED_TRACE("Spark " + spark.version);
    const std::string handshakes = absl::StrCat(dir_.path(), "/handshakes-", spark.version);
    std::map<std::string, std::string> conf = SparkSettings(spark, pod_template, handshakes);
    // On the node's network a declared port (7079 by default) is the node's: one executor
    // per node. 0: each takes a free one, and declares none.
    conf["spark.blockManager.port"] = "0";
    conf["spark.shuffle.service.enabled"] = "true";
    // One node: every reducer would read the map outputs from the disk, after asking
    // ferry_server where they are; fetched from it instead, over the node's network.
    conf["spark.shuffle.readHostLocalDisk"] = "false";
    RunHeldShuffle(spark, conf, handshakes, "stock-" + spark.version);
  }
}

// Executors on the pod network, told their node's address (where its ferry_server is).
constexpr char kPodNetworkExecutorTemplate[] = R"yaml(apiVersion: v1
kind: Pod
spec:
  containers:
  - name: spark-kubernetes-executor
    env:
    - name: FERRY_NODE_HOST
      valueFrom: {fieldRef: {fieldPath: status.hostIP}}
)yaml";

// Ferry's Spark plugin (client/spark) on Spark's own Kubernetes backend, with executors on
// the pod network (no hostNetwork), no shuffle service of Spark's and no shuffle tracking:
// executors register their map outputs' dirs with their node's ferry_server, at the
// node's address, and name it as their location. The same run as the stock mode's
// (RunHeldShuffle), both Spark lines.
TEST_F(FerryOnKubernetesTest, FerrysPluginLetsExecutorsOffTheNodesNetworkGo) {
  std::string why;
  const std::vector<SparkDistribution> sparks = InstalledSparks(&why);
  if (sparks.empty()) GTEST_SKIP() << why;
  const std::string pod_template = dir_.path() + "/executor-pod-network.yaml";
  ASSERT_TRUE(WriteTextFile(pod_template, kPodNetworkExecutorTemplate).ok());
  for (const SparkDistribution& spark : sparks) {
    SCOPED_TRACE("Spark " + spark.version);
    // The plugin's jar of this Spark's Scala line, in a dir the executors' pods mount.
    const std::string jar_name = absl::StrCat(
        "ferry-spark-plugin_", absl::StartsWith(spark.version, "3.") ? "2.12" : "2.13", ".jar");
    const std::string plugin_dir = absl::StrCat(dir_.path(), "/plugin-", spark.version);
    std::filesystem::create_directories(plugin_dir);
    std::filesystem::copy_file("client/spark/" + jar_name, plugin_dir + "/" + jar_name);
    const std::string handshakes = absl::StrCat(dir_.path(), "/plugin-handshakes-", spark.version);
    std::map<std::string, std::string> conf = SparkSettings(spark, pod_template, handshakes);
    conf["spark.shuffle.sort.io.plugin.class"] = "org.ferry.spark.FerryShuffleDataIO";
    conf["spark.driver.extraClassPath"] = plugin_dir + "/" + jar_name;
    conf["spark.executor.extraClassPath"] = "/opt/ferry-plugin/" + jar_name;
    conf["spark.kubernetes.executor.volumes.hostPath.ferry-plugin.mount.path"] =
        "/opt/ferry-plugin";
    conf["spark.kubernetes.executor.volumes.hostPath.ferry-plugin.options.path"] = plugin_dir;
    RunHeldShuffle(spark, conf, handshakes, "plugin-" + spark.version);
  }
}

}  // namespace
}  // namespace ferry::testing
