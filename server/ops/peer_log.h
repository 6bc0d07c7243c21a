// Logging a peer's failed request: one WARNING line naming the peer, the front door and
// the failure (whose message names the app, block and file). A flood of bad requests
// must not fill the disk, so each thread logs at most kPeerLinesPerSecond such lines a
// second and counts what it held back in the next line it writes. What the peer sent is
// escaped (server/base/log_lines.h): it cannot start a line of its own.
#ifndef FERRY_SERVER_OPS_PEER_LOG_H_
#define FERRY_SERVER_OPS_PEER_LOG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/base/clock.h"

namespace ferry {

inline constexpr int kPeerLinesPerSecond = 20;

// The address of the peer of `socket`, without its port ("(gone)" if it has gone): the
// key that per-client bounds count by.
std::string PeerHost(int socket);

// `socket` is the peer's connection (its address is read only when a line is written);
// `clock` tells the one-second windows apart.
void LogPeerFailure(int socket, absl::string_view front_door, const absl::Status& status,
                    const Clock& clock = Clock::Real());

}  // namespace ferry

#endif  // FERRY_SERVER_OPS_PEER_LOG_H_
