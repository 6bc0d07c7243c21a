#include "server/ops/peer_log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace ferry {

namespace {

// Per thread: the current one-second window and what it has logged and held back.
struct Window {
  absl::Time start = absl::InfinitePast();
  int lines = 0;
  uint64_t held_back = 0;
};
thread_local Window window;

bool PeerAddress(int socket, sockaddr_in* addr) {
  socklen_t len = sizeof(*addr);
  return ::getpeername(socket, reinterpret_cast<sockaddr*>(addr), &len) == 0;
}

std::string HostOf(const sockaddr_in& addr) {
  char host[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &addr.sin_addr, host, sizeof(host));
  return host;
}

std::string PeerOf(int socket) {
  sockaddr_in addr{};
  if (!PeerAddress(socket, &addr)) return "(gone)";
  return absl::StrCat(HostOf(addr), ":", ntohs(addr.sin_port));
}

}  // namespace

std::string PeerHost(int socket) {
  sockaddr_in addr{};
  if (!PeerAddress(socket, &addr)) return "(gone)";
  return HostOf(addr);
}

void LogPeerFailure(int socket, absl::string_view front_door, const absl::Status& status,
                    const Clock& clock) {
  const absl::Time now = clock.Now();
  if (now - window.start >= absl::Seconds(1)) {
    window.start = now;
    window.lines = 0;
  }
  if (window.lines >= kPeerLinesPerSecond) {
    ++window.held_back;
    return;
  }
  ++window.lines;
  std::string held;
  if (window.held_back > 0) {
    held = absl::StrCat(" (", window.held_back, " earlier failures on this thread not logged)");
    window.held_back = 0;
  }
  LOG(WARNING) << "peer " << PeerOf(socket) << " " << front_door << ": " << status << held;
}

}  // namespace ferry
