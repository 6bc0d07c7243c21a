#include "tests/e2e/corrupting_proxy.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/time/clock.h"
#include "tests/testing/loopback.h"

namespace ferry::testing {

namespace {

// Every relay ends by this long after it starts, whatever the peers do.
constexpr absl::Duration kRelayLifetime = absl::Seconds(60);

}  // namespace

CorruptingProxy::CorruptingProxy(uint64_t flip_offset, int corrupt_connections)
    : flip_offset_(flip_offset), corrupt_connections_(corrupt_connections) {
  listener_ = ListenLoopback(&port_);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

CorruptingProxy::~CorruptingProxy() {
  stop_ = true;
  acceptor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (std::thread& t : relays_) t.join();
}

void CorruptingProxy::AcceptLoop() {
  while (!stop_) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid()) continue;
    const bool corrupt = connections_.fetch_add(1) < corrupt_connections_;
    std::lock_guard<std::mutex> lock(mu_);
    relays_.emplace_back(
        [this, c = std::move(client), corrupt]() mutable { Relay(std::move(c), corrupt); });
  }
}

void CorruptingProxy::Relay(UniqueFd client, bool corrupt) {
  UniqueFd server = ConnectLoopback(upstream_port_.load());
  uint64_t downstream = 0;  // server -> client bytes relayed so far
  const absl::Time end = absl::Now() + kRelayLifetime;
  char buf[65536];
  while (!stop_ && absl::Now() < end) {
    pollfd fds[2] = {{client.get(), POLLIN, 0}, {server.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, 50);
    if (ready < 0 && errno != EINTR) return;
    if (ready <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      const int from = i == 0 ? client.get() : server.get();
      const int to = i == 0 ? server.get() : client.get();
      const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
      if (n <= 0) return;  // either side closed or failed: close both
      if (i == 1) {
        if (corrupt && flip_offset_ >= downstream &&
            flip_offset_ < downstream + static_cast<uint64_t>(n)) {
          buf[flip_offset_ - downstream] ^= 0x01;
        }
        downstream += static_cast<uint64_t>(n);
      }
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t w = ::send(to, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        sent += w;
      }
    }
  }
}

}  // namespace ferry::testing
