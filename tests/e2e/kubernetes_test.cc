// A real one-node Kubernetes (tests/testing/kube_cluster.h): its node comes up Ready, a
// pod of an image built here runs on it with an address of the pod network and its log
// reaches kubectl through the API server, a pod on the node's network sees the node's
// address, and stopping the cluster leaves no process, mount, cgroup or bridge behind.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/shuffle_writer.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/kube_cluster.h"
#include "tests/testing/temp_dir.h"

namespace ferry::testing {
namespace {

// A root file system of Debian's static busybox: /bin/sh and the tools the pods use.
std::string BusyboxRoot(const std::string& dir) {
  std::filesystem::create_directories(dir + "/bin");
  std::filesystem::copy_file("/usr/bin/busybox", dir + "/bin/busybox");
  for (const char* tool : {"sh", "cat", "echo", "hostname", "ip", "grep"}) {
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

// A root file system holding `binary` and the shared libraries it loads (ldd's list),
// at their own paths.
absl::StatusOr<std::string> BinaryRoot(const std::string& binary, const std::string& dir) {
  std::filesystem::create_directories(dir + "/usr/bin");
  std::filesystem::copy_file(binary,
                             dir + "/usr/bin/" + std::filesystem::path(binary).filename().string());
  absl::StatusOr<CommandResult> ldd = RunCommand({"/usr/bin/ldd", binary}, absl::Seconds(30));
  if (!ldd.ok()) return ldd.status();
  for (absl::string_view line : absl::StrSplit(ldd->output, '\n')) {
    // "libx.so.1 => /lib/x86_64-linux-gnu/libx.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2
    // (0x...)"
    const size_t slash = line.find('/');
    if (slash == absl::string_view::npos) continue;
    const std::string library(line.substr(slash, line.find(' ', slash) - slash));
    const std::string copy = dir + library;
    std::filesystem::create_directories(std::filesystem::path(copy).parent_path());
    if (!std::filesystem::exists(copy)) std::filesystem::copy_file(library, copy);
  }
  std::filesystem::create_directories(dir + "/tmp");
  return dir;
}

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

// packaging/kubernetes/ferry-server.yaml as a user applies it, but for its hostPath dirs
// (the test's own): ferry_server's pod on the node's network turns Ready by its gRPC
// health, answers on the node's address, and a rolled pod comes back Ready.
TEST(KubernetesTest, TheDaemonSetServesOnTheNode) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<KubeCluster>> started =
      KubeCluster::Start({dir.path() + "/cluster"});
  if (started.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << started.status();
  }
  ASSERT_TRUE(started.ok()) << started.status();
  KubeCluster& cluster = **started;
  absl::StatusOr<std::string> root = BinaryRoot("server/ferry_server", dir.path() + "/image");
  ASSERT_TRUE(root.ok()) << root.status();
  const absl::Status loaded =
      cluster.LoadImage("ferry.local/ferry-server:0.1.0", *root, {"/usr/bin/ferry_server"});
  ASSERT_TRUE(loaded.ok()) << loaded;
  const std::string manifest = ReadTextFile("packaging/kubernetes/ferry-server.yaml");
  ASSERT_FALSE(manifest.empty());
  const std::string node_dirs = dir.path() + "/node";
  const absl::Status applied = cluster.Apply(
      absl::StrReplaceAll(manifest, {{"path: /var/lib/ferry", "path: " + node_dirs}}));
  ASSERT_TRUE(applied.ok()) << applied;
  const auto ready = [&] {
    return cluster.WaitForJsonPath({"-n", "ferry", "daemonset", "ferry-server"},
                                   "{.status.numberReady}", "1", absl::Seconds(120));
  };
  absl::Status is_ready = ready();
  ASSERT_TRUE(is_ready.ok()) << is_ready << "\n" << cluster.DiagnosticLogs();
  // Its planes listen on the node's address.
  EXPECT_TRUE(AcceptsOn(cluster.node_ip(), 7337));
  EXPECT_TRUE(AcceptsOn(cluster.node_ip(), 7071));
  // An executor's map output under the shared local dir (the node's hostPath), registered
  // by the path its pod and ferry_server's see, is served by Spark's protocol at the
  // node's address.
  const std::string app = "spark-0123456789abcdef";
  const std::string in_pods = "/var/lib/ferry/spark-local/blockmgr-" + app;
  const std::string on_node = node_dirs + "/spark-local/blockmgr-" + app;
  std::filesystem::create_directories(on_node);
  const std::vector<std::string> partitions = {"first partition", "", std::string(70000, 'x')};
  {
    absl::StatusOr<ShuffleWriter> writer =
        ShuffleWriter::CreateInSparkLayout({on_node}, 64, 0, 7, ChecksumAlgorithm::kAdler32);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (size_t r = 0; r < partitions.size(); ++r) {
      ASSERT_TRUE(writer->Write(static_cast<int32_t>(r), partitions[r]).ok());
    }
    ASSERT_TRUE(writer->Commit(static_cast<int32_t>(partitions.size())).ok());
  }
  const std::string service = cluster.node_ip() + ":7337";
  SparkShuffleClient client;
  const absl::Status registered = client.RegisterExecutor(
      service, {app, "1", {{in_pods}, 64, "org.apache.spark.shuffle.sort.SortShuffleManager"}});
  ASSERT_TRUE(registered.ok()) << registered;
  BuffersSink sink(partitions.size());
  absl::StatusOr<SparkFetchStats> fetched =
      client.Fetch(service, app, "1", {{0, 7, 0, 1}, {0, 7, 1, 2}, {0, 7, 2, 3}}, sink);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_TRUE(sink.blocks() == partitions);
  // Rolled: its pod deleted, the DaemonSet's next one is Ready.
  absl::StatusOr<CommandResult> deleted = cluster.Kubectl(
      {"-n", "ferry", "delete", "pod", "-l", "app.kubernetes.io/name=ferry-server", "--wait=true"});
  ASSERT_TRUE(deleted.ok() && deleted->exit_code == 0) << (deleted.ok() ? deleted->output : "");
  is_ready = ready();
  EXPECT_TRUE(is_ready.ok()) << is_ready;
}

}  // namespace
}  // namespace ferry::testing
