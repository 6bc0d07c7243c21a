#include "tests/testing/kube_cluster.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "tests/testing/wait_for.h"

namespace ferry::testing {

namespace {

constexpr char kRelease[] = "v1.34.4";
// The etcd scripts/setup builds (tests/e2e/kubernetes/etcd/go.mod).
constexpr char kEtcdRelease[] = "v3.6.4";
constexpr char kPauseImage[] = "ferry.local/pause:v1";
// The short dirs of containerd's socket and the kubelet's root: /run/ferry-k8s.XXXXXX.
constexpr char kRunDirPrefix[] = "/run/ferry-k8s.";
// The cgroup v1 hierarchies mounted (each a dir of /sys/fs/cgroup but cgroup v2's).
std::vector<std::string> Hierarchies() {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/fs/cgroup")) {
    const std::string name = entry.path().filename().string();
    if (name != "unified" && std::filesystem::exists(entry.path() / "cgroup.procs")) {
      out.push_back(entry.path().string());
    }
  }
  return out;
}

// What the setup's commands (openssl, umoci, ctr, tar, ip) are given to run.
constexpr absl::Duration kCommandTimeout = absl::Seconds(60);
// Held by the cluster running on the host (not under kRunDirPrefix: Clean deletes those);
// the next waits as long as a large test may run.
constexpr char kHostLock[] = "/run/ferry-k8s-lock";
constexpr absl::Duration kHostLockTimeout = absl::Minutes(15);

// The first IPv4 address of an interface that is up and not loopback.
std::string NodeAddress() {
  struct ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string found;
  for (struct ifaddrs* i = all; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    if (absl::StartsWith(i->ifa_name, "ferrytest")) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const struct sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  ::freeifaddrs(all);
  return found;
}

std::string Kubeconfig(const std::string& server, const std::string& ca, const std::string& token) {
  return absl::StrCat(
      "apiVersion: v1\nkind: Config\n", "clusters: [{name: ferry-test, cluster: {server: \"",
      server, "\", certificate-authority: \"", ca, "\"}}]\n",
      "users: [{name: user, user: {token: \"", token, "\"}}]\n",
      "contexts: [{name: ferry-test, context: {cluster: ferry-test, user: user}}]\n",
      "current-context: ferry-test\n");
}

// Every process whose cgroup (in any hierarchy) lies beneath `dir`.
void CollectProcesses(const std::string& dir, std::vector<pid_t>* out) {
  std::ifstream procs(dir + "/cgroup.procs");
  std::string line;
  while (std::getline(procs, line)) {
    pid_t pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 1) out->push_back(pid);
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') {
      CollectProcesses(dir + "/" + e->d_name, out);
    }
  }
  ::closedir(d);
}

// Removes the cgroup `dir` and those beneath it, deepest first.
void RemoveCgroups(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> children;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') children.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  for (const std::string& child : children) RemoveCgroups(child);
  ::rmdir(dir.c_str());
}

// The mount points beneath `dir`, deepest first.
std::vector<std::string> MountsBeneath(const std::string& dir) {
  std::vector<std::string> mounts;
  std::ifstream info("/proc/self/mountinfo");
  std::string line;
  while (std::getline(info, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && (fields[4] == dir || absl::StartsWith(fields[4], dir + "/"))) {
      mounts.push_back(fields[4]);
    }
  }
  std::sort(mounts.begin(), mounts.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return mounts;
}

// The pids of processes whose command line holds `needle`.
std::vector<pid_t> ProcessesWith(const std::string& needle) {
  std::vector<pid_t> found;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return found;
  while (struct dirent* e = ::readdir(d)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == ::getpid()) continue;
    std::string cmdline = ReadTextFile(absl::StrCat("/proc/", pid, "/cmdline"));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (absl::StrContains(cmdline, needle)) found.push_back(pid);
  }
  ::closedir(d);
  return found;
}

}  // namespace

absl::StatusOr<std::string> KubernetesPrograms() {
  const char* env = std::getenv("FERRY_K8S_BIN");
  const std::string dir =
      env != nullptr && *env != '\0' ? env : absl::StrCat("/opt/ferry-k8s/", kRelease, "/bin");
  for (const char* program :
       {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"}) {
    if (::access((dir + "/" + program).c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("no ", program, " in ", dir, ": scripts/setup builds Kubernetes"));
    }
  }
  return dir;
}

std::string EtcdProgram() {
  const char* env = std::getenv("FERRY_ETCD");
  return env != nullptr && *env != '\0'
             ? env
             : absl::StrCat("/opt/ferry-k8s/etcd-", kEtcdRelease, "/etcd");
}

absl::StatusOr<std::unique_ptr<KubeCluster>> KubeCluster::Start(const Options& options) {
  if (::geteuid() != 0) {
    return absl::FailedPreconditionError("a kubelet and containerd run as root only");
  }
  absl::StatusOr<std::string> programs = KubernetesPrograms();
  if (!programs.ok()) return absl::FailedPreconditionError(programs.status().message());
  for (const std::string& program :
       {EtcdProgram(), std::string("/usr/bin/containerd"), std::string("/usr/bin/ctr"),
        std::string("/usr/sbin/runc"), std::string("/usr/bin/umoci"),
        std::string("/usr/lib/cni/bridge")}) {
    if (::access(program.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("no ", program, ": scripts/setup installs it"));
    }
  }
  std::unique_ptr<KubeCluster> cluster(new KubeCluster(options));
  // Another cluster (another test's, a benchmark's) goes first: Clean below would
  // destroy its pods and bridge.
  cluster->host_lock_ = UniqueFd(::open(kHostLock, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!cluster->host_lock_.valid()) return absl::ErrnoToStatus(errno, kHostLock);
  if (!WaitFor([&] { return ::flock(cluster->host_lock_.get(), LOCK_EX | LOCK_NB) == 0; },
               kHostLockTimeout)) {
    return absl::DeadlineExceededError(absl::StrCat("another Kubernetes of the tests held ",
                                                    kHostLock, " for ",
                                                    absl::FormatDuration(kHostLockTimeout)));
  }
  cluster->programs_ = *programs;
  ReapOrphans();
  // What a test process that died mid-run left behind (its containers outlive it).
  cluster->Clean();
  if (absl::Status booted = cluster->Boot(); !booted.ok()) {
    return absl::Status(booted.code(),
                        absl::StrCat(booted.message(), "\n", cluster->DiagnosticLogs()));
  }
  return cluster;
}

absl::Status KubeCluster::WriteConfiguration() {
  for (const char* dir : {"pki", "logs", "etcd", "cni", "containerd", "kubelet"}) {
    std::filesystem::create_directories(Path(dir));
  }
  // containerd's socket and the kubelet's root dir (its sockets), in a dir of a short
  // path: a socket's path has at most 107 bytes.
  char run_dir[] = "/run/ferry-k8s.XXXXXX";
  static_assert(sizeof(run_dir) == sizeof(kRunDirPrefix) + 6);
  if (::mkdtemp(run_dir) == nullptr) {
    return absl::ErrnoToStatus(errno, "make a dir for containerd's socket in /run");
  }
  run_dir_ = run_dir;
  node_ip_ = NodeAddress();
  if (node_ip_.empty()) return absl::FailedPreconditionError("no IPv4 interface but loopback");
  apiserver_port_ = FreeLoopbackPort();
  etcd_port_ = FreeLoopbackPort();
  etcd_peer_port_ = FreeLoopbackPort();
  kubelet_port_ = FreeLoopbackPort();
  kubelet_healthz_port_ = FreeLoopbackPort();
  controller_manager_port_ = FreeLoopbackPort();
  scheduler_port_ = FreeLoopbackPort();

  // A CA, the API server's serving certificate, its client certificate for the kubelet
  // (whose API takes that CA's certificates only) and the service accounts' key.
  const std::string pki = Path("pki");
  const auto openssl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    return RunChecked(args, kCommandTimeout);
  };
  FERRY_RETURN_IF_ERROR(
      openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", pki + "/ca.key", "-out",
               pki + "/ca.crt", "-days", "2", "-subj", "/CN=ferry-test-ca"}));
  const auto sign = [&](const std::string& name, const std::string& subject,
                        const std::string& extensions) -> absl::Status {
    FERRY_RETURN_IF_ERROR(
        openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", pki + "/" + name + ".key",
                 "-out", pki + "/" + name + ".csr", "-subj", subject}));
    FERRY_RETURN_IF_ERROR(WriteTextFile(pki + "/" + name + ".ext", extensions));
    return openssl({"x509", "-req", "-in", pki + "/" + name + ".csr", "-CA", pki + "/ca.crt",
                    "-CAkey", pki + "/ca.key", "-CAcreateserial", "-out", pki + "/" + name + ".crt",
                    "-days", "2", "-extfile", pki + "/" + name + ".ext"});
  };
  FERRY_RETURN_IF_ERROR(sign(
      "apiserver", "/CN=kube-apiserver",
      absl::StrCat("subjectAltName=IP:", node_ip_, ",IP:127.0.0.1,IP:10.96.0.1,DNS:localhost\n")));
  FERRY_RETURN_IF_ERROR(sign("apiserver-kubelet-client",
                             "/O=system:masters/CN=kube-apiserver-kubelet-client",
                             "extendedKeyUsage=clientAuth\n"));
  FERRY_RETURN_IF_ERROR(openssl({"genrsa", "-out", pki + "/sa.key", "2048"}));
  FERRY_RETURN_IF_ERROR(
      openssl({"rsa", "-in", pki + "/sa.key", "-pubout", "-out", pki + "/sa.pub"}));

  // A token per component: the kubelet's names its node (the Node authorizer).
  // The file's lines: token,user,uid[,"groups"].
  const std::map<std::string, std::string> tokens = {
      {"admin", "admin,admin,\"system:masters\""},
      {"kubelet", absl::StrCat("system:node:", node_name_, ",kubelet,\"system:nodes\"")},
      {"controller-manager", "system:kube-controller-manager,controller-manager"},
      {"scheduler", "system:kube-scheduler,scheduler"}};
  std::string csv;
  const std::string server = absl::StrCat("https://", node_ip_, ":", apiserver_port_);
  for (const auto& [name, rest] : tokens) {
    const std::string token = absl::StrCat(name, "-", ::getpid(), "-", apiserver_port_);
    absl::StrAppend(&csv, token, ",", rest, "\n");
    FERRY_RETURN_IF_ERROR(
        WriteTextFile(Path(name + ".kubeconfig"), Kubeconfig(server, pki + "/ca.crt", token)));
  }
  FERRY_RETURN_IF_ERROR(WriteTextFile(pki + "/tokens.csv", csv));
  admin_kubeconfig_ = Path("admin.kubeconfig");

  // Pods on a bridge of their own, their default route through it, no NAT: they reach the
  // node at any of its addresses (its own, where the driver and ferry_server are),
  // nothing beyond.
  FERRY_RETURN_IF_ERROR(WriteTextFile(
      Path("cni/10-ferry-test.conflist"),
      absl::StrCat("{\"cniVersion\": \"1.0.0\", \"name\": \"ferry-test\", \"plugins\": [",
                   "{\"type\": \"bridge\", \"bridge\": \"", bridge_,
                   "\", \"isGateway\": true, \"isDefaultGateway\": true, \"ipMasq\": false, ",
                   "\"ipam\": {\"type\": ", "\"host-local\", \"dataDir\": \"", Path("cni/ipam"),
                   "\", \"ranges\": [[{\"subnet\": \"", kPodSubnet, "\"}]]}}]}\n")));
  FERRY_RETURN_IF_ERROR(WriteTextFile(
      Path("containerd.toml"),
      absl::StrCat("version = 2\nroot = \"", Path("containerd/root"), "\"\nstate = \"",
                   Path("containerd/state"), "\"\n[grpc]\n  address = \"", Socket(),
                   "\"\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"", kPauseImage,
                   "\"\n  restrict_oom_score_adj = true\n"
                   "  [plugins.\"io.containerd.grpc.v1.cri\".cni]\n    bin_dir = "
                   "\"/usr/lib/cni\"\n    conf_dir = \"",
                   Path("cni"), "\"\n")));
  return WriteTextFile(
      Path("kubelet.yaml"),
      absl::StrCat("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
                   "authentication:\n  anonymous: {enabled: false}\n  webhook: {enabled: false}\n",
                   "  x509: {clientCAFile: \"", pki, "/ca.crt\"}\n",
                   "authorization: {mode: AlwaysAllow}\n", "cgroupDriver: cgroupfs\n",
                   "cgroupRoot: /", cgroup_root_, "\n", "failSwapOn: false\n",
                   "address: ", node_ip_, "\nport: ", kubelet_port_, "\nreadOnlyPort: 0\n",
                   "healthzBindAddress: 127.0.0.1\nhealthzPort: ", kubelet_healthz_port_,
                   "\ncontainerRuntimeEndpoint: unix://", Socket(), "\nresolvConf: \"\"\n",
                   "evictionHard: {memory.available: 100Mi, nodefs.available: 1%, "
                   "imagefs.available: 1%}\n",
                   "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n"));
}

absl::StatusOr<pid_t> KubeCluster::Launch(const std::string& name,
                                          const std::vector<std::string>& argv) {
  absl::StatusOr<pid_t> pid = processes_.Launch(argv, {}, Path("logs/" + name + ".log"));
  if (pid.ok()) daemons_[name] = *pid;
  return pid;
}

absl::Status KubeCluster::WaitReady(const std::string& name, pid_t pid, absl::Duration timeout,
                                    const std::function<bool()>& ready) {
  bool exited = false;
  const bool done = WaitFor(
      [&] {
        if (ProcessGroups::WaitForExit(pid, absl::Now()).has_value()) exited = true;
        return exited || ready();
      },
      timeout);
  if (exited) return absl::InternalError(absl::StrCat(name, " exited at its start"));
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrCat(name, " was not ready within ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<pid_t> KubeCluster::StartApiServer() {
  const std::string& bin = programs_;
  const std::string pki = Path("pki");
  FERRY_ASSIGN_OR_RETURN(
      const pid_t apiserver,
      Launch("kube-apiserver",
             {bin + "/kube-apiserver", absl::StrCat("--etcd-servers=http://127.0.0.1:", etcd_port_),
              "--bind-address=" + node_ip_, "--advertise-address=" + node_ip_,
              absl::StrCat("--secure-port=", apiserver_port_),
              "--tls-cert-file=" + pki + "/apiserver.crt",
              "--tls-private-key-file=" + pki + "/apiserver.key",
              "--client-ca-file=" + pki + "/ca.crt",
              "--kubelet-client-certificate=" + pki + "/apiserver-kubelet-client.crt",
              "--kubelet-client-key=" + pki + "/apiserver-kubelet-client.key",
              "--kubelet-preferred-address-types=InternalIP",
              "--token-auth-file=" + pki + "/tokens.csv", "--authorization-mode=Node,RBAC",
              "--service-account-key-file=" + pki + "/sa.pub",
              "--service-account-signing-key-file=" + pki + "/sa.key",
              "--service-account-issuer=https://kubernetes.default.svc",
              "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true"}));
  FERRY_RETURN_IF_ERROR(WaitReady("kube-apiserver", apiserver, absl::Seconds(90), [&] {
    absl::StatusOr<CommandResult> ready = Kubectl({"get", "--raw", "/readyz"}, absl::Seconds(10));
    return ready.ok() && ready->exit_code == 0 && absl::StrContains(ready->output, "ok");
  }));
  return apiserver;
}

absl::Status KubeCluster::RestartApiServer() {
  auto it = daemons_.find("kube-apiserver");
  if (it == daemons_.end()) return absl::FailedPreconditionError("no API server runs");
  processes_.Kill(it->second);
  daemons_.erase(it);
  return StartApiServer().status();
}

absl::Status KubeCluster::Boot() {
  FERRY_RETURN_IF_ERROR(WriteConfiguration());
  const std::string& bin = programs_;
  const std::string pki = Path("pki");
  FERRY_ASSIGN_OR_RETURN(
      pid_t etcd,
      Launch("etcd",
             {EtcdProgram(), "--data-dir", Path("etcd"), "--listen-client-urls",
              absl::StrCat("http://127.0.0.1:", etcd_port_), "--advertise-client-urls",
              absl::StrCat("http://127.0.0.1:", etcd_port_), "--listen-peer-urls",
              absl::StrCat("http://127.0.0.1:", etcd_peer_port_), "--initial-advertise-peer-urls",
              absl::StrCat("http://127.0.0.1:", etcd_peer_port_), "--initial-cluster",
              absl::StrCat("default=http://127.0.0.1:", etcd_peer_port_)}));
  FERRY_RETURN_IF_ERROR(
      WaitReady("etcd", etcd, absl::Seconds(30), [&] { return AcceptsOnLoopback(etcd_port_); }));
  FERRY_ASSIGN_OR_RETURN(const pid_t apiserver, StartApiServer());
  // The controller manager exits unless it can read the authentication config map, which
  // the API server's bootstrap roles let it read once they are made.
  FERRY_RETURN_IF_ERROR(WaitReady("kube-apiserver", apiserver, absl::Seconds(60), [&] {
    absl::StatusOr<CommandResult> made =
        Kubectl({"-n", "kube-system", "get", "configmap/extension-apiserver-authentication",
                 "rolebinding/system::extension-apiserver-authentication-reader"},
                absl::Seconds(10));
    return made.ok() && made->exit_code == 0;
  }));
  FERRY_RETURN_IF_ERROR(
      Launch("kube-controller-manager",
             {bin + "/kube-controller-manager",
              "--kubeconfig=" + Path("controller-manager.kubeconfig"),
              "--authentication-kubeconfig=" + Path("controller-manager.kubeconfig"),
              "--authorization-kubeconfig=" + Path("controller-manager.kubeconfig"),
              "--service-account-private-key-file=" + pki + "/sa.key",
              "--root-ca-file=" + pki + "/ca.crt", "--use-service-account-credentials=true",
              "--bind-address=127.0.0.1", absl::StrCat("--secure-port=", controller_manager_port_),
              "--controllers=*,-nodeipam,-service,-route,-cloud-node-lifecycle",
              "--leader-elect=false"})
          .status());
  FERRY_RETURN_IF_ERROR(
      Launch(
          "kube-scheduler",
          {bin + "/kube-scheduler", "--kubeconfig=" + Path("scheduler.kubeconfig"),
           "--authentication-kubeconfig=" + Path("scheduler.kubeconfig"),
           "--authorization-kubeconfig=" + Path("scheduler.kubeconfig"), "--bind-address=127.0.0.1",
           absl::StrCat("--secure-port=", scheduler_port_), "--leader-elect=false"})
          .status());
  FERRY_ASSIGN_OR_RETURN(pid_t containerd, Launch("containerd", {"/usr/bin/containerd", "--config",
                                                                 Path("containerd.toml")}));
  const std::string socket = Socket();
  FERRY_RETURN_IF_ERROR(WaitReady("containerd", containerd, absl::Seconds(30), [&] {
    return RunChecked({"/usr/bin/ctr", "--address", socket, "version"}, absl::Seconds(5)).ok();
  }));
  // A pod's sandbox holds its namespaces: a process that sleeps.
  const std::string pause = Path("pause-rootfs");
  std::filesystem::create_directories(pause + "/bin");
  std::filesystem::copy_file("/usr/bin/busybox", pause + "/bin/busybox");
  FERRY_RETURN_IF_ERROR(LoadImage(kPauseImage, pause, {"/bin/busybox", "sleep", "2147483647"}));
  // The pods' cgroup root, in every hierarchy (a cpuset one with its parent's CPUs and
  // memory nodes, which a new cpuset lacks).
  for (const std::string& hierarchy : Hierarchies()) {
    const std::string root = hierarchy + "/" + cgroup_root_;
    if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrCat("make the cgroup ", root));
    }
    for (const char* inherited : {"cpuset.cpus", "cpuset.mems"}) {
      const std::string value = ReadTextFile(hierarchy + "/" + inherited);
      if (!value.empty()) FERRY_RETURN_IF_ERROR(WriteTextFile(root + "/" + inherited, value));
    }
  }
  FERRY_ASSIGN_OR_RETURN(
      pid_t kubelet,
      Launch("kubelet", {bin + "/kubelet", "--config=" + Path("kubelet.yaml"),
                         "--kubeconfig=" + Path("kubelet.kubeconfig"),
                         "--root-dir=" + run_dir_ + "/kubelet", "--cert-dir=" + Path("kubelet/pki"),
                         "--hostname-override=" + node_name_, "--node-ip=" + node_ip_}));
  FERRY_RETURN_IF_ERROR(WaitReady("kubelet", kubelet, absl::Seconds(120), [&] {
    absl::StatusOr<CommandResult> ready =
        Kubectl({"get", "node", node_name_, "-o",
                 "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"},
                absl::Seconds(10));
    return ready.ok() && ready->exit_code == 0 && ready->output == "True";
  }));
  // A pod is admitted once its namespace's default service account exists.
  return WaitReady("kube-controller-manager", daemons_["kube-controller-manager"],
                   absl::Seconds(60), [&] {
                     absl::StatusOr<CommandResult> account =
                         Kubectl({"get", "serviceaccount", "default"}, absl::Seconds(10));
                     return account.ok() && account->exit_code == 0;
                   });
}

absl::StatusOr<CommandResult> KubeCluster::Kubectl(const std::vector<std::string>& args,
                                                   absl::Duration timeout) {
  std::vector<std::string> argv = {programs_ + "/kubectl", "--kubeconfig=" + admin_kubeconfig_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout);
}

absl::Status KubeCluster::Apply(const std::string& manifest) {
  const std::string file = Path(absl::StrCat("manifest-", ++manifests_, ".yaml"));
  FERRY_RETURN_IF_ERROR(WriteTextFile(file, manifest));
  // A namespace's default service account reaches the API server's admission a moment
  // after it is made: until then a pod is refused for the want of it.
  absl::StatusOr<CommandResult> result = absl::UnknownError("not applied");
  WaitFor(
      [&] {
        result = Kubectl({"apply", "-f", file});
        return !result.ok() || result->exit_code == 0 ||
               !absl::StrContains(result->output, "error looking up service account");
      },
      absl::Seconds(30));
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::InternalError(absl::StrCat("kubectl apply: ", result->output));
  }
  return absl::OkStatus();
}

absl::Status KubeCluster::WaitForJsonPath(const std::vector<std::string>& what,
                                          const std::string& path, const std::string& want,
                                          absl::Duration timeout) {
  std::vector<std::string> args = {"get"};
  args.insert(args.end(), what.begin(), what.end());
  args.insert(args.end(), {"-o", "jsonpath=" + path});
  std::string last;
  const bool done = WaitFor(
      [&] {
        absl::StatusOr<CommandResult> got = Kubectl(args, absl::Seconds(10));
        last = got.ok() ? got->output : got.status().ToString();
        return got.ok() && got->exit_code == 0 && got->output == want;
      },
      timeout);
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrCat(absl::StrJoin(what, " "), " ", path, " was not \"", want, "\" within ",
                     absl::FormatDuration(timeout), ": \"", last, "\""));
  }
  return absl::OkStatus();
}

absl::Status KubeCluster::LoadImage(const std::string& name, const std::string& rootfs,
                                    const std::vector<std::string>& entrypoint) {
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError(name + " has no tag");
  const std::string layout = Path("images/" + name.substr(0, colon));
  std::filesystem::remove_all(layout);
  std::filesystem::create_directories(std::filesystem::path(layout).parent_path());
  const std::string image = layout + ":" + name.substr(colon + 1);
  FERRY_RETURN_IF_ERROR(
      RunChecked({"/usr/bin/umoci", "init", "--layout", layout}, kCommandTimeout));
  FERRY_RETURN_IF_ERROR(RunChecked({"/usr/bin/umoci", "new", "--image", image}, kCommandTimeout));
  FERRY_RETURN_IF_ERROR(
      RunChecked({"/usr/bin/umoci", "insert", "--image", image, rootfs, "/"}, absl::Seconds(300)));
  std::vector<std::string> config = {"/usr/bin/umoci", "config", "--image", image};
  config.push_back("--config.entrypoint=" + entrypoint.front());
  for (size_t i = 1; i < entrypoint.size(); ++i) {
    config.push_back("--config.cmd=" + entrypoint[i]);
  }
  FERRY_RETURN_IF_ERROR(RunChecked(config, kCommandTimeout));
  const std::string tar = layout + ".tar";
  FERRY_RETURN_IF_ERROR(RunChecked({"/bin/tar", "-C", layout, "-cf", tar, "."}, kCommandTimeout));
  return ImportImage(name, tar);
}

absl::Status KubeCluster::ImportImage(const std::string& name, const std::string& archive) {
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError(name + " has no tag");
  return RunChecked({"/usr/bin/ctr", "--address", Socket(), "-n", "k8s.io", "images", "import",
                     "--base-name", name.substr(0, colon), archive},
                    absl::Seconds(300));
}

std::string KubeCluster::api_server_url() const {
  return absl::StrCat("https://", node_ip_, ":", apiserver_port_);
}

std::string KubeCluster::DiagnosticLogs() const {
  std::string out;
  for (const auto& [name, pid] : daemons_) {
    const std::string log = ReadTextFile(Path("logs/" + name + ".log"));
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, "rror") || absl::StartsWith(line, "E1") ||
          absl::StartsWith(line, "F1")) {
        lines.emplace_back(line.substr(0, 400));
      }
    }
    if (lines.size() > 8) lines.erase(lines.begin(), lines.end() - 8);
    if (!lines.empty()) absl::StrAppend(&out, name, ":\n  ", absl::StrJoin(lines, "\n  "), "\n");
  }
  return out;
}

void KubeCluster::Clean() {
  // What the tests made goes first, so that the kubelet tears its pods down itself.
  if (daemons_.count("kubelet") > 0) {
    (void)Kubectl({"delete", "daemonsets,deployments,jobs,pods", "--all", "--all-namespaces",
                   "--grace-period=5", "--wait=true", "--timeout=60s"},
                  absl::Seconds(90));
  }
  for (const char* name : {"kubelet"}) {
    if (auto it = daemons_.find(name); it != daemons_.end()) processes_.Kill(it->second);
  }
  // Whatever still runs in the pods' cgroups, and containerd's shims.
  for (int round = 0; round < 3; ++round) {
    std::vector<pid_t> left;
    for (const std::string& hierarchy : Hierarchies()) {
      CollectProcesses(hierarchy + "/" + cgroup_root_, &left);
    }
    // Every shim of a cluster of these tests (one runs at a time): its socket's dir.
    for (pid_t shim : ProcessesWith(kRunDirPrefix)) left.push_back(shim);
    if (left.empty()) break;
    for (pid_t pid : left) ::kill(pid, SIGKILL);
    WaitFor([&] {
      return std::all_of(left.begin(), left.end(), [](pid_t pid) {
        const std::optional<ProcessStat> stat = StatOf(pid);
        return !stat.has_value() || stat->state == 'Z';
      });
    });
  }
  for (const char* name :
       {"containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"}) {
    if (auto it = daemons_.find(name); it != daemons_.end()) processes_.Kill(it->second);
  }
  daemons_.clear();
  std::vector<std::string> dirs = {options_.work_dir};
  for (const auto& entry : std::filesystem::directory_iterator("/run")) {
    if (absl::StartsWith(entry.path().string(), kRunDirPrefix)) dirs.push_back(entry.path());
  }
  for (const std::string& dir : dirs) {
    for (const std::string& mount : MountsBeneath(dir)) ::umount2(mount.c_str(), MNT_DETACH);
  }
  for (const std::string& hierarchy : Hierarchies()) {
    RemoveCgroups(hierarchy + "/" + cgroup_root_);
  }
  if (std::filesystem::exists("/sys/class/net/" + bridge_)) {
    (void)RunChecked({"/usr/sbin/ip", "link", "delete", bridge_}, absl::Seconds(10));
  }
  for (size_t i = 1; i < dirs.size(); ++i) {
    std::error_code ignored;
    std::filesystem::remove_all(dirs[i], ignored);
  }
}

KubeCluster::~KubeCluster() { Clean(); }

}  // namespace ferry::testing
