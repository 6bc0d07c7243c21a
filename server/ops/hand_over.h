// A running ferry_server's listening sockets handed to a new one (an upgrade or a restart
// without a gap), over a Unix socket in the state dir, as nginx, HAProxy and Envoy hand
// theirs over.
//
// The running server keeps a HandOverPoint; a new server started with --take-over calls
// TakeOver(). Each checks that the other runs as its own user (SO_PEERCRED) before it
// says anything. Then, one SOCK_SEQPACKET message each:
//   new -> old  "take-over <version> <pid>"
//   old         stops accepting (connections wait in the backlogs), releases its
//               connections at their next wait for a request (those it cannot hand
//               over it ends as a drain does), stops writing its state files (Prepare)
//   old -> new  "listeners <name>..." with the listening sockets (SCM_RIGHTS), or
//               "refused: <why>"; then one "connection <plane> <state>" per connection
//               handed over, its socket with it, "streams <bytes>" with a memfd holding
//               the open streams, and "end <count>"
//   new         starts on them, reading the state files
//   new -> old  "serving" (Served())
//   old         exits (Outcome(true))
// If the new server goes or stays silent for the timeout before "serving", the old one
// serves again (Outcome(false)). Requests while one is under way, or after, are answered
// "refused: ..." at once.
#ifndef FERRY_SERVER_OPS_HAND_OVER_H_
#define FERRY_SERVER_OPS_HAND_OVER_H_

#include <sys/types.h>

#include <cstddef>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "server/base/log_lines.h"

namespace ferry {

// A connection handed over: the plane ("data", "spark") whose listener accepted it, its
// socket, and what its protocol needs to go on with it (at most kMaxStateBytes).
struct HandedConnection {
  static constexpr size_t kMaxStateBytes = 256;
  std::string plane;
  UniqueFd socket;
  std::string state;
};

// What one server hands another: listening sockets by plane ("control", "data",
// "spark"), and the connections it served that can go on being served.
struct HandedSockets {
  std::vector<std::string> names;
  std::vector<UniqueFd> fds;
  std::vector<HandedConnection> connections;
  // The control plane's open streams (ControlService::HandOverStreams).
  std::string streams;
  // The socket handed for `name`, taken out; invalid when none was.
  UniqueFd Take(const std::string& name);
};

class HandOverPoint {
 public:
  // Stops accepting and writing state; the sockets to hand over.
  using Prepare = std::function<absl::StatusOr<HandedSockets>()>;
  // After a hand-over that Prepare() began: `served` (the new server serves: stop), or
  // not (serve again). Called once per hand-over, on the point's own thread.
  using Outcome = std::function<void(bool served, const std::string& why)>;

  struct Options {
    std::string path;
    // How long the new server may take from the listeners to "serving".
    absl::Duration start_timeout = absl::Seconds(60);
    // Replace a live point at `path` (the new server's, once it took over): the old
    // server's socket is unlinked and this one bound in its place.
    bool replace = false;
  };
  // Binds `path` (0600); a socket file no server answers on is replaced.
  static absl::StatusOr<std::unique_ptr<HandOverPoint>> Listen(Options options, Prepare prepare,
                                                               Outcome outcome);
  HandOverPoint(const HandOverPoint&) = delete;
  HandOverPoint& operator=(const HandOverPoint&) = delete;
  // Stops answering, waits for a hand-over under way, and removes the socket file if it is
  // still this point's.
  ~HandOverPoint();

  const std::string& path() const { return options_.path; }

 private:
  explicit HandOverPoint(Options options) : options_(std::move(options)) {}
  void Run();
  void Answer(UniqueFd peer);
  void HandOver(UniqueFd peer, pid_t pid);

  const Options options_;
  Prepare prepare_;
  Outcome outcome_;
  UniqueFd listener_;
  UniqueFd wake_;  // an eventfd: stop
  ino_t inode_ = 0;
  LineBudget log_budget_{5};
  absl::Mutex mu_;
  // The pid of the server a hand-over is under way to, or was made to.
  pid_t busy_with_ ABSL_GUARDED_BY(mu_) = 0;
  bool handed_over_ ABSL_GUARDED_BY(mu_) = false;
  std::thread hand_over_;
  std::thread thread_;
};

// What a new server took over.
struct TakenOver {
  HandedSockets listeners;
  pid_t from = 0;
  UniqueFd channel;  // to the old server: Served() says so
};
// Asks the server at `path` to hand over; waits up to `timeout` for its sockets (it
// releases its connections first). nullopt when no server answers there (none runs, or the
// file is stale). An error when one refuses, runs as another user, or answers wrongly.
absl::StatusOr<std::optional<TakenOver>> TakeOver(const std::string& path, absl::Duration timeout);
// Tells the old server that this one serves: it exits.
absl::Status Served(TakenOver& taken);

}  // namespace ferry

#endif  // FERRY_SERVER_OPS_HAND_OVER_H_
