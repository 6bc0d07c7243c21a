// A TCP relay on 127.0.0.1 in front of a server that flips one bit of what the server
// sends, on the first few connections: damage in transfer, with real sockets, for the
// client's corruption diagnosis.
#ifndef FERRY_TESTS_E2E_CORRUPTING_PROXY_H_
#define FERRY_TESTS_E2E_CORRUPTING_PROXY_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace ferry::testing {

class CorruptingProxy {
 public:
  // Listens on a port of its own at once; relays to 127.0.0.1:SetUpstream()'s port, so
  // the server can be started on port 0 and told the proxy's port first. On each of the
  // first `corrupt_connections` connections, byte `flip_offset` of the server -> client
  // stream is XORed with 0x01.
  CorruptingProxy(uint64_t flip_offset, int corrupt_connections);
  CorruptingProxy(const CorruptingProxy&) = delete;
  CorruptingProxy& operator=(const CorruptingProxy&) = delete;
  // Stops accepting, ends every relay, joins the threads.
  ~CorruptingProxy();

  uint16_t port() const { return port_; }
  // Before the first connection arrives.
  void SetUpstream(uint16_t port) { upstream_port_ = port; }
  int connections() const { return connections_.load(); }

 private:
  void AcceptLoop();
  void Relay(UniqueFd client, bool corrupt);

  std::atomic<uint16_t> upstream_port_{0};
  const uint64_t flip_offset_;
  const int corrupt_connections_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> relays_;  // guarded by mu_
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_E2E_CORRUPTING_PROXY_H_
