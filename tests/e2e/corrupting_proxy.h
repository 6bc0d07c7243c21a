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
  // Relays to 127.0.0.1:upstream_port. On each of the first `corrupt_connections`
  // connections, byte `flip_offset` of the server -> client stream is XORed with 0x01.
  CorruptingProxy(uint16_t upstream_port, uint64_t flip_offset, int corrupt_connections);
  CorruptingProxy(const CorruptingProxy&) = delete;
  CorruptingProxy& operator=(const CorruptingProxy&) = delete;
  // Stops accepting, ends every relay, joins the threads.
  ~CorruptingProxy();

  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  void AcceptLoop();
  void Relay(UniqueFd client, bool corrupt);

  const uint16_t upstream_port_;
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
