// HostCluster: a cluster of real hosts on one machine, for tests and benchmarks of what
// crosses a network. Each host is a network namespace joined by a veth pair (MTU 1500)
// to a bridge in this process's namespace, with one IPv4 and one IPv6 address; the
// bridge holds this side's addresses, so the calling process is the cluster's client
// (the reducer) and reaches every host through its own link, as it would across a
// switch. Faults are real ones: a link set down, a queue shaped with tc, a process
// killed or stopped.
//
// Names carry the creating process's pid ("fh<pid>h<i>" namespaces, "fh<pid>br" the
// bridge, "fh<pid>v<i>" this side of each link), and every set whose process is gone
// (a test killed by its timeout) is removed by the next Create(). Clusters made at the
// same time get different subnets: each holds one of 64 slots, a file locked for its
// lifetime (the kernel releases the lock of a killed process).
//
// Needs root and iproute2; Create() returns UNIMPLEMENTED, saying why, where this
// machine cannot have namespaces (the caller skips).
#ifndef FERRY_TESTS_TESTING_HOST_CLUSTER_H_
#define FERRY_TESTS_TESTING_HOST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace ferry::testing {

struct ClusterHost {
  std::string netns;  // its name under /run/netns
  std::string ipv4;   // "10.213.<slot>.<i + 2>"
  std::string ipv6;   // "fd00:f3:<slot>::<i + 2>"
  std::string link;   // this side of its veth pair
};

class HostCluster {
 public:
  static absl::StatusOr<std::unique_ptr<HostCluster>> Create(int hosts);
  HostCluster(const HostCluster&) = delete;
  HostCluster& operator=(const HostCluster&) = delete;
  // Deletes the namespaces (their processes' sockets go with them) and the bridge.
  ~HostCluster();

  const std::vector<ClusterHost>& hosts() const { return hosts_; }
  const ClusterHost& host(int i) const { return hosts_.at(static_cast<size_t>(i)); }
  // This side's addresses on the bridge.
  const std::string& client_ipv4() const { return client_ipv4_; }
  const std::string& client_ipv6() const { return client_ipv6_; }

  // `argv` run inside host i's namespace: ip netns exec <netns> argv...
  std::vector<std::string> InHost(int i, const std::vector<std::string>& argv) const;

  // Host i's link down (its interface, as a pulled cable is: no RST, nothing more in or
  // out) or up again.
  absl::Status SetLinkUp(int i, bool up);
  // Replaces the root qdisc of host i's interface (what it sends) with `qdisc`, e.g.
  // {"tbf", "rate", "40mbit", "burst", "32k", "latency", "100ms"}; an empty list puts
  // the default back.
  absl::Status Shape(int i, const std::vector<std::string>& qdisc);
  // Whether this kernel has qdisc `kind` ("netem", "tbf"), tried on a host.
  bool HasQdisc(const std::string& kind);

 private:
  HostCluster() = default;
  absl::Status Build(int hosts);

  UniqueFd slot_lock_;
  int slot_ = -1;
  std::string bridge_;
  std::string client_ipv4_;
  std::string client_ipv6_;
  std::vector<ClusterHost> hosts_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_HOST_CLUSTER_H_
