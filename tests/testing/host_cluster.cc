#include "tests/testing/host_cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "tests/testing/command.h"

namespace ferry::testing {

namespace {

constexpr char kIp[] = "/usr/sbin/ip";
constexpr char kTc[] = "/usr/sbin/tc";
constexpr char kPrefix[] = "fh";
constexpr char kSlotDir[] = "/run/ferry-host-cluster";
constexpr int kSlots = 64;
constexpr int kMaxHosts = 32;
constexpr absl::Duration kCommandTimeout = absl::Seconds(30);

absl::Status Run(const std::vector<std::string>& argv) { return RunChecked(argv, kCommandTimeout); }

// The pid in a name this helper gave ("fh<pid>h3", "fh<pid>br", "fh<pid>v3"), or 0.
pid_t OwnerOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPrefix)) return 0;
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  pid_t pid = 0;
  if (digits == 0 || digits == name.size() || !absl::SimpleAtoi(name.substr(0, digits), &pid)) {
    return 0;
  }
  const absl::string_view rest = name.substr(digits);
  if (rest != "br" && rest[0] != 'h' && rest[0] != 'v') return 0;
  return pid;
}

bool Gone(pid_t pid) { return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH; }

std::vector<std::string> Entries(const char* dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  return names;
}

// Namespaces and links a process now gone made. Deleting a namespace destroys the veth
// ends inside it, and with them their peers here; the bridge is left to delete.
void RemoveStaleSets() {
  for (const std::string& ns : Entries("/run/netns")) {
    const pid_t pid = OwnerOf(ns);
    if (pid != 0 && Gone(pid)) (void)Run({kIp, "netns", "del", ns});
  }
  for (const std::string& link : Entries("/sys/class/net")) {
    const pid_t pid = OwnerOf(link);
    if (pid != 0 && Gone(pid)) (void)Run({kIp, "link", "del", link});
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostCluster>> HostCluster::Create(int hosts) {
  if (hosts < 1 || hosts > kMaxHosts) {
    return absl::InvalidArgumentError(absl::StrCat("a cluster has 1 to ", kMaxHosts, " hosts"));
  }
  if (::geteuid() != 0) {
    return absl::UnimplementedError("network namespaces need root; this test runs as another user");
  }
  if (::access(kIp, X_OK) != 0 || ::access(kTc, X_OK) != 0) {
    return absl::UnimplementedError("no iproute2 (ip, tc): scripts/setup installs it");
  }
  RemoveStaleSets();
  std::unique_ptr<HostCluster> cluster(new HostCluster);
  ::mkdir(kSlotDir, 0755);
  for (int slot = 0; slot < kSlots && cluster->slot_ < 0; ++slot) {
    UniqueFd lock(
        ::open(absl::StrCat(kSlotDir, "/slot-", slot).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lock.valid() && ::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) {
      cluster->slot_lock_ = std::move(lock);
      cluster->slot_ = slot;
    }
  }
  if (cluster->slot_ < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", kSlots, " cluster slots of ", kSlotDir, " are held"));
  }
  if (absl::Status built = cluster->Build(hosts); !built.ok()) {
    // A sandbox that forbids namespaces fails at the first one; anything later is a bug.
    if (cluster->hosts_.empty()) {
      return absl::UnimplementedError(
          absl::StrCat("this machine cannot make network namespaces: ", built.message()));
    }
    return built;
  }
  return cluster;
}

absl::Status HostCluster::Build(int hosts) {
  const std::string owner = absl::StrCat(kPrefix, ::getpid());
  const std::string v4_net = absl::StrCat("10.213.", slot_, ".");
  const std::string v6_net = absl::StrCat("fd00:f3:", slot_, "::");
  bridge_ = owner + "br";
  client_ipv4_ = v4_net + "1";
  client_ipv6_ = v6_net + "1";
  // The first namespace tells whether this machine allows them at all.
  const std::string first = absl::StrCat(owner, "h0");
  if (absl::Status s = Run({kIp, "netns", "add", first}); !s.ok()) return s;
  hosts_.push_back({first, v4_net + "2", v6_net + "2", absl::StrCat(owner, "v0")});
  // No STP and no forwarding delay: ports forward as soon as they are up. IPv6 without
  // duplicate-address detection, so addresses work at once.
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {kIp, "link", "add", bridge_, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
           {kIp, "addr", "add", client_ipv4_ + "/24", "dev", bridge_},
           {kIp, "addr", "add", client_ipv6_ + "/64", "dev", bridge_, "nodad"},
           {kIp, "link", "set", bridge_, "up"}}) {
    if (absl::Status s = Run(cmd); !s.ok()) return s;
  }
  for (int i = 0; i < hosts; ++i) {
    if (i > 0) {
      const std::string ns = absl::StrCat(owner, "h", i);
      if (absl::Status s = Run({kIp, "netns", "add", ns}); !s.ok()) return s;
      hosts_.push_back({ns, absl::StrCat(v4_net, i + 2), absl::StrCat(v6_net, i + 2),
                        absl::StrCat(owner, "v", i)});
    }
    const ClusterHost& h = hosts_.back();
    for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
             {kIp, "link", "add", h.link, "mtu", "1500", "type", "veth", "peer", "name", "eth0",
              "mtu", "1500", "netns", h.netns},
             {kIp, "link", "set", h.link, "master", bridge_, "up"},
             {kIp, "-n", h.netns, "link", "set", "lo", "up"},
             // A link set down and up again keeps its IPv6 address, as its IPv4 one.
             {kIp, "netns", "exec", h.netns, "sysctl", "-q", "-w",
              "net.ipv6.conf.eth0.keep_addr_on_down=1"},
             {kIp, "-n", h.netns, "addr", "add", h.ipv4 + "/24", "dev", "eth0"},
             {kIp, "-n", h.netns, "addr", "add", h.ipv6 + "/64", "dev", "eth0", "nodad"},
             {kIp, "-n", h.netns, "link", "set", "eth0", "up"}}) {
      if (absl::Status s = Run(cmd); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

HostCluster::~HostCluster() {
  // The links first: a namespace deleted goes away, its end of a link with it, only
  // once nothing holds it, so its name and its peer's may outlive `ip netns del`.
  for (const ClusterHost& h : hosts_) {
    (void)Run({kIp, "link", "del", h.link});
    (void)Run({kIp, "netns", "del", h.netns});
  }
  if (!bridge_.empty()) (void)Run({kIp, "link", "del", bridge_});
}

std::vector<std::string> HostCluster::InHost(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> wrapped = {kIp, "netns", "exec", host(i).netns};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

absl::Status HostCluster::SetLinkUp(int i, bool up) {
  return Run({kIp, "-n", host(i).netns, "link", "set", "eth0", up ? "up" : "down"});
}

absl::Status HostCluster::Shape(int i, const std::vector<std::string>& qdisc) {
  if (qdisc.empty()) {
    absl::Status s = Run({kTc, "-n", host(i).netns, "qdisc", "del", "dev", "eth0", "root"});
    // Deleting the default qdisc is refused: nothing was shaped.
    return s.ok() || absl::StrContains(s.message(), "Cannot delete qdisc with handle of zero")
               ? absl::OkStatus()
               : s;
  }
  std::vector<std::string> cmd = {kTc,       "-n",  host(i).netns, "qdisc",
                                  "replace", "dev", "eth0",        "root"};
  cmd.insert(cmd.end(), qdisc.begin(), qdisc.end());
  return Run(cmd);
}

bool HostCluster::HasQdisc(const std::string& kind) {
  std::vector<std::string> probe = {kind};
  if (kind == "netem") probe = {"netem", "delay", "1ms"};
  if (kind == "tbf") probe = {"tbf", "rate", "1gbit", "burst", "64k", "latency", "10ms"};
  const bool ok = Shape(0, probe).ok();
  (void)Shape(0, {});
  return ok;
}

}  // namespace ferry::testing
