// A real one-node Kubernetes (tests/testing/kube_cluster.h) with ferry_server's DaemonSet
// on it and the executor images of the given Spark versions loaded, for
// benchmarks/spark_jobs --k8s: prints one line, READY and a JSON object (the API server's
// URL, the admin's kubeconfig, the node's address, the node dir the DaemonSet's hostPath
// dirs are under), then keeps the cluster up until its stdin closes, and stops it.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/kube_cluster.h"
#include "tests/testing/kube_ferry.h"

ABSL_FLAG(std::string, work_dir, "", "An empty directory for the cluster's state and logs.");
ABSL_FLAG(std::string, ferry_server, "bazel-bin/server/ferry_server",
          "The ferry_server binary the DaemonSet's image is made of.");
ABSL_FLAG(std::string, agent, "bazel-bin/server/kubernetes/ferry-k8s-agent",
          "The node agent binary the DaemonSet's image holds too.");
ABSL_FLAG(std::string, manifest, "packaging/kubernetes/ferry-server.yaml",
          "The DaemonSet's manifest.");
ABSL_FLAG(std::vector<std::string>, spark_versions, {},
          "Spark versions whose executor images (scripts/setup made them) are loaded.");

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "kube_up: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using ferry::testing::KubeCluster;
  const std::string work = absl::GetFlag(FLAGS_work_dir);
  if (work.empty()) return Fail("--work_dir is required");
  absl::StatusOr<std::unique_ptr<KubeCluster>> started = KubeCluster::Start({work + "/cluster"});
  if (!started.ok()) return Fail(started.status().ToString());
  KubeCluster& cluster = **started;
  const std::string node_dirs = work + "/node";
  if (absl::Status s = ferry::testing::StartFerryOnTheNode(
          cluster, absl::GetFlag(FLAGS_ferry_server), absl::GetFlag(FLAGS_agent),
          absl::GetFlag(FLAGS_manifest), work + "/image", node_dirs);
      !s.ok()) {
    return Fail(s.ToString());
  }
  for (const std::string& version : absl::GetFlag(FLAGS_spark_versions)) {
    if (absl::Status s = cluster.ImportImage("ferry.local/spark:" + version,
                                             ferry::testing::SparkImageArchive(version));
        !s.ok()) {
      return Fail(s.ToString());
    }
  }
  std::printf(
      "READY {\"api\": \"%s\", \"kubeconfig\": \"%s\", \"node_ip\": \"%s\", "
      "\"node_dirs\": \"%s\"}\n",
      cluster.api_server_url().c_str(), cluster.admin_kubeconfig().c_str(),
      cluster.node_ip().c_str(), node_dirs.c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
