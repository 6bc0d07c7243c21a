#include "server/ops/peer_log.h"

#include <cstdint>
#include <string>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/net_address.h"

namespace ferry {

namespace {

// Per thread: the current one-second window and what it has logged and held back.
struct Window {
  absl::Time start = absl::InfinitePast();
  int lines = 0;
  uint64_t held_back = 0;
};
thread_local Window window;

std::string PeerOf(int socket) {
  absl::StatusOr<SocketAddress> peer = SocketAddress::PeerOf(socket);
  return peer.ok() ? peer->ToString() : "(gone)";
}

}  // namespace

std::string PeerHost(int socket) {
  absl::StatusOr<SocketAddress> peer = SocketAddress::PeerOf(socket);
  return peer.ok() ? peer->host() : "(gone)";
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
