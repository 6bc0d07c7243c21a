// Addresses, in one place for both planes and both sides: "host:port" text as flags and
// handles carry it ("10.0.0.7:7070", "[fd00::2]:7337", "node-3:7070"), and the socket
// address a numeric host and port make, IPv4 or IPv6.
#ifndef FERRY_COMMON_NET_ADDRESS_H_
#define FERRY_COMMON_NET_ADDRESS_H_

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace ferry {

struct HostPort {
  // A name or a numeric address, without brackets ("::1", not "[::1]").
  std::string host;
  uint16_t port = 0;
};

// "host:port" or "[v6]:port"; "localhost" stays a name. INVALID_ARGUMENT naming the
// text for anything else (no port, a port past 65535, an IPv6 address without
// brackets, an empty host).
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);
// "host:port", "[v6]:port" for a host with a colon.
std::string FormatHostPort(absl::string_view host, uint16_t port);

// An IPv4 or IPv6 socket address.
class SocketAddress {
 public:
  // From a numeric host ("10.0.0.7", "::1"; "localhost" is 127.0.0.1).
  // INVALID_ARGUMENT for anything else.
  static absl::StatusOr<SocketAddress> Numeric(absl::string_view host, uint16_t port);
  // From a host that may be a name: resolved (the first address getaddrinfo gives),
  // UNAVAILABLE naming it when it does not resolve.
  static absl::StatusOr<SocketAddress> Resolve(absl::string_view host, uint16_t port);
  // The socket's peer, or its own address; NOT_FOUND when it has none (closed, or not a
  // TCP socket).
  static absl::StatusOr<SocketAddress> PeerOf(int socket);
  static absl::StatusOr<SocketAddress> LocalOf(int socket);

  int family() const { return storage_.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t size() const { return size_; }
  uint16_t port() const;
  // The numeric host without its port or brackets: the key per-client bounds count by.
  std::string host() const;
  // host and port as FormatHostPort() writes them.
  std::string ToString() const { return FormatHostPort(host(), port()); }

 private:
  SocketAddress() = default;
  // The socket's peer (`peer`) or own address.
  static absl::StatusOr<SocketAddress> Named(int socket, bool peer);
  sockaddr_storage storage_{};
  socklen_t size_ = 0;
};

// A TCP socket bound to `address` and listening. With SO_REUSEADDR, so that a restarted
// server binds while old connections sit in TIME_WAIT; not SO_REUSEPORT, which would also
// let a second server bind the same port and take a share of its connections. An error
// says why in words an operator acts on: "cannot listen on 127.0.0.1:7070: Address
// already in use (another process listens on this port)".
absl::StatusOr<UniqueFd> Listen(const SocketAddress& address, int backlog);

// Whether this process can listen on "host:port" (a name or a numeric host; port 0 any):
// binds a socket there, as Listen() does, and closes it. For the servers that bind for
// themselves and say less about why they cannot (gRPC's, civetweb's).
absl::Status CheckCanListen(absl::string_view address);

}  // namespace ferry

#endif  // FERRY_COMMON_NET_ADDRESS_H_
