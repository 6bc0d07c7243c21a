// A real one-node Kubernetes for tests: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and a kubelet (scripts/setup builds them: tests/e2e/kubernetes/go.mod
// and etcd/go.mod pin them), the kubelet running pods in Debian's containerd with runc,
// on a CNI bridge of Debian's plugins. Every daemon is a process of
// the test's (tests/testing/process_groups.h), its state in the work dir; RBAC and the
// Node authorizer are on, each component with a token of its own. Images are built here
// (umoci, from a directory) and loaded into containerd: nothing is pulled.
//
// Set for this machine: containerd keeps containers' OOM scores at or above its own
// (restrict_oom_score_adj; this VM's root lacks CAP_SYS_RESOURCE, so the kubelet's -998
// for a pod's sandbox cannot be set); no kube-proxy and no cluster DNS (a pod reaches the
// API server at the node's address); one cluster at a time on the host (Start waits for
// the one before to go: they share the bridge, the pods' subnet and cgroup).
//
// The destructor deletes what the tests created, stops the kubelet, kills what is left
// in its cgroups and containerd's shims, stops every daemon, unmounts what they mounted
// and deletes the bridge: nothing is left behind. A test process killed outright leaves
// its containers running (their shims outlive it): Start clears them first.
#ifndef FERRY_TESTS_TESTING_KUBE_CLUSTER_H_
#define FERRY_TESTS_TESTING_KUBE_CLUSTER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "tests/testing/command.h"
#include "tests/testing/process_groups.h"

namespace ferry::testing {

// The directory of the Kubernetes programs scripts/setup built ($FERRY_K8S_BIN, else
// /opt/ferry-k8s/v1.34.4/bin); NOT_FOUND saying what is missing.
absl::StatusOr<std::string> KubernetesPrograms();

class KubeCluster {
 public:
  struct Options {
    // Configuration, state and logs go here; it must be empty.
    std::string work_dir;
  };

  // FAILED_PRECONDITION when not root or a program is missing (the tests skip then);
  // otherwise the node is Ready, or the error says which daemon failed and how.
  static absl::StatusOr<std::unique_ptr<KubeCluster>> Start(const Options& options);
  KubeCluster(const KubeCluster&) = delete;
  KubeCluster& operator=(const KubeCluster&) = delete;
  ~KubeCluster();

  const std::string& node_name() const { return node_name_; }
  // The node's address (the kubelet's, the API server's): a pod reaches it.
  const std::string& node_ip() const { return node_ip_; }
  // What kubectl and other clients of the admin user read.
  const std::string& admin_kubeconfig() const { return admin_kubeconfig_; }
  // The subnet pods get their addresses from.
  static constexpr const char* kPodSubnet = "10.244.0.0/24";

  // kubectl with the admin's kubeconfig, bounded by `timeout`.
  absl::StatusOr<CommandResult> Kubectl(const std::vector<std::string>& args,
                                        absl::Duration timeout = absl::Seconds(60));
  // kubectl apply of `manifest` (YAML); the error holds kubectl's output.
  absl::Status Apply(const std::string& manifest);
  // `kubectl get <what> -o jsonpath=<path>` until `want` is what it prints, at most
  // `timeout`; the error says what it printed last.
  absl::Status WaitForJsonPath(const std::vector<std::string>& what, const std::string& path,
                               const std::string& want, absl::Duration timeout);

  // Makes an image of the files under `rootfs` (one layer), with `entrypoint`, and loads
  // it into the node's containerd as `name` (a pod names it with imagePullPolicy Never).
  absl::Status LoadImage(const std::string& name, const std::string& rootfs,
                         const std::vector<std::string>& entrypoint);
  // Loads the OCI archive `archive`, whose one image is tagged as `name`'s tag, into the
  // node's containerd as `name`.
  absl::Status ImportImage(const std::string& name, const std::string& archive);

  // Stops the API server (SIGTERM, as an upgrade of it does) and starts it again with the
  // same flags; returns once it is ready. Its clients' watches break meanwhile.
  absl::Status RestartApiServer();

  // The API server's URL (Spark's master URL is "k8s://" and it).
  std::string api_server_url() const;

  // For a failure message: the daemons' last error lines.
  std::string DiagnosticLogs() const;

 private:
  explicit KubeCluster(Options options) : options_(std::move(options)) {}
  absl::Status Boot();
  absl::Status WriteConfiguration();
  // Starts the API server; returns once it answers /readyz.
  absl::StatusOr<pid_t> StartApiServer();
  // Starts daemon `name`; its log is logs/<name>.log.
  absl::StatusOr<pid_t> Launch(const std::string& name, const std::vector<std::string>& argv);
  // Waits until `ready` holds, while daemon `name` runs, at most `timeout`.
  absl::Status WaitReady(const std::string& name, pid_t pid, absl::Duration timeout,
                         const std::function<bool()>& ready);
  std::string Path(const std::string& name) const { return options_.work_dir + "/" + name; }
  std::string Socket() const { return run_dir_ + "/containerd.sock"; }
  void Clean();

  Options options_;
  UniqueFd host_lock_;  // flock(2)ed while the cluster lives: one at a time on the host
  std::string programs_;
  std::string run_dir_;
  std::string node_name_ = "ferry-test-node";
  std::string node_ip_;
  std::string admin_kubeconfig_;
  std::string bridge_ = "ferrytest0";
  std::string cgroup_root_ = "ferry-test-pods";
  uint16_t apiserver_port_ = 0;
  uint16_t etcd_port_ = 0;
  uint16_t etcd_peer_port_ = 0;
  uint16_t kubelet_port_ = 0;
  uint16_t kubelet_healthz_port_ = 0;
  uint16_t controller_manager_port_ = 0;
  uint16_t scheduler_port_ = 0;
  std::map<std::string, pid_t> daemons_;
  int manifests_ = 0;  // applied so far: each is kept as manifest-<n>.yaml
  ProcessGroups processes_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_KUBE_CLUSTER_H_
