// A real one-node Kubernetes (tests/testing/kube_cluster.h): its node comes up Ready, a
// pod of an image built here runs on it with an address of the pod network and its log
// reaches kubectl through the API server, a pod on the node's network sees the node's
// address, and stopping the cluster leaves no process, mount, cgroup or bridge behind.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace ferry::testing
