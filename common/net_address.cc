#include "common/net_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ferry {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text.substr(0, 300), "' is not host:port (or [IPv6 address]:port)"));
  };
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) return bad();
  absl::string_view host = text.substr(0, colon);
  uint32_t port = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) return bad();
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad();
    host = host.substr(1, host.size() - 2);
    in6_addr v6;
    if (::inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1) return bad();
  } else if (host.empty() || host.find(':') != absl::string_view::npos) {
    return bad();
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

std::string FormatHostPort(absl::string_view host, uint16_t port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<SocketAddress> SocketAddress::Numeric(absl::string_view host, uint16_t port) {
  SocketAddress a;
  const std::string text(host == "localhost" ? "127.0.0.1" : host);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage_);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage_);
  if (::inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.size_ = sizeof(sockaddr_in);
    return a;
  }
  a.storage_ = {};
  if (::inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    a.size_ = sizeof(sockaddr_in6);
    return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", host.substr(0, 300), "' is not an IPv4 or IPv6 address"));
}

absl::StatusOr<SocketAddress> SocketAddress::Resolve(absl::string_view host, uint16_t port) {
  if (absl::StatusOr<SocketAddress> numeric = Numeric(host, port); numeric.ok()) return numeric;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string name(host);
  if (int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &result); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", name, ": ", ::gai_strerror(rc)));
  }
  SocketAddress a;
  std::memcpy(&a.storage_, result->ai_addr, result->ai_addrlen);
  a.size_ = result->ai_addrlen;
  ::freeaddrinfo(result);
  if (a.family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&a.storage_)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&a.storage_)->sin6_port = htons(port);
  }
  return a;
}

absl::StatusOr<SocketAddress> SocketAddress::Named(int socket, bool peer) {
  SocketAddress a;
  socklen_t len = sizeof(a.storage_);
  sockaddr* addr = reinterpret_cast<sockaddr*>(&a.storage_);
  const int rc = peer ? ::getpeername(socket, addr, &len) : ::getsockname(socket, addr, &len);
  if (rc != 0 || (a.family() != AF_INET && a.family() != AF_INET6)) {
    return absl::NotFoundError(
        absl::StrCat("socket ", socket, " has no ", peer ? "peer" : "local", " address"));
  }
  a.size_ = len;
  return a;
}

absl::StatusOr<SocketAddress> SocketAddress::PeerOf(int socket) { return Named(socket, true); }

absl::StatusOr<SocketAddress> SocketAddress::LocalOf(int socket) { return Named(socket, false); }

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
}

std::string SocketAddress::host() const {
  char text[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, text,
                sizeof(text));
  } else {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, text,
                sizeof(text));
  }
  return text;
}

namespace {

// What a failed bind or listen means here, after the system's own words.
std::string ListenHint(int err) {
  switch (err) {
    case EADDRINUSE:
      return " (another process listens on this port)";
    case EADDRNOTAVAIL:
      return " (no interface of this host has this address)";
    case EACCES:
      return " (a port below 1024 needs root or CAP_NET_BIND_SERVICE)";
    default:
      return "";
  }
}

absl::Status ListenError(int err, const SocketAddress& address) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat("cannot listen on ", address.ToString(), ": ",
                                   std::strerror(err), ListenHint(err)));
}

// A socket bound to `address`, not yet listening.
absl::StatusOr<UniqueFd> Bound(const SocketAddress& address) {
  UniqueFd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ListenError(errno, address);
  const int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd.get(), address.get(), address.size()) != 0) {
    return ListenError(errno, address);
  }
  return fd;
}

}  // namespace

absl::StatusOr<UniqueFd> Listen(const SocketAddress& address, int backlog) {
  absl::StatusOr<UniqueFd> fd = Bound(address);
  if (!fd.ok()) return fd.status();
  if (::listen(fd->get(), backlog) != 0) return ListenError(errno, address);
  return fd;
}

absl::Status CheckCanListen(absl::string_view address) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<SocketAddress> resolved = SocketAddress::Resolve(parsed->host, parsed->port);
  if (!resolved.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot listen on ", address,
                                                   ": its host does not resolve (",
                                                   resolved.status().message(), ")"));
  }
  return Bound(*resolved).status();
}

}  // namespace ferry
