// ferry_server on a KubeCluster (tests/testing/kube_cluster.h) as its users run it: the
// DaemonSet of packaging/kubernetes/ferry-server.yaml, and the Spark images scripts/setup
// makes for executors (tests/e2e/kubernetes/spark-image). For the Kubernetes tests and
// benchmarks/spark_jobs --k8s.
#ifndef FERRY_TESTS_TESTING_KUBE_FERRY_H_
#define FERRY_TESTS_TESTING_KUBE_FERRY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/testing/kube_cluster.h"

namespace ferry::testing {

// A root file system under `dir` holding `binary` (in /usr/bin) and the shared libraries
// it loads (ldd's list), at their own paths.
absl::StatusOr<std::string> BinaryRoot(const std::string& binary, const std::string& dir);

// packaging/kubernetes/ferry-server.yaml (read from `manifest`) as a user applies it, but
// for its hostPath dirs (under `node_dirs`) and the API server's address the node agent is
// given (this cluster has no kube-proxy for the `kubernetes` service). Empty when there is
// no manifest.
std::string FerryManifest(const KubeCluster& cluster, const std::string& manifest,
                          const std::string& node_dirs);
// That manifest applied, and its image: `ferry_server` and the libraries it loads, and
// the node agent `agent` (static), made in `image_dir`. Returns once its pod is Ready.
absl::Status StartFerryOnTheNode(KubeCluster& cluster, const std::string& ferry_server,
                                 const std::string& agent, const std::string& manifest,
                                 const std::string& image_dir, const std::string& node_dirs);
// Once ferry_server's DaemonSet has its pod Ready; the error holds the daemons' errors.
absl::Status FerryReady(KubeCluster& cluster);

// The OCI archive of Spark `version`'s executor image scripts/setup made
// ($FERRY_K8S_IMAGES, else /opt/ferry-k8s/images).
std::string SparkImageArchive(const std::string& version);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_KUBE_FERRY_H_
