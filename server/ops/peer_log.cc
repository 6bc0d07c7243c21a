#include "server/ops/peer_log.h"

#include <cstdint>
#include <string>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "server/base/log_lines.h"

namespace ferry {

namespace {

// Per thread: each thread's lines are bounded on their own.
thread_local LineBudget budget(kPeerLinesPerSecond);

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
  uint64_t held_back = 0;
  if (!budget.Take(clock.Now(), &held_back)) return;
  std::string held;
  if (held_back > 0) {
    held = absl::StrCat(" (", held_back, " earlier failures on this thread not logged)");
  }
  // The message holds what the peer sent (ids, names): escaped, so that it stays on its
  // line.
  LOG(WARNING) << "peer " << PeerOf(socket) << " " << front_door << ": "
               << absl::StatusCodeToString(status.code()) << ": " << LogEscaped(status.message())
               << held;
}

}  // namespace ferry
