// ControlAcceptor: the control plane's listening socket, held by the server rather than
// by gRPC, and a thread that accepts from it and hands each connection to gRPC
// (ExternalConnectionAcceptor, which runs the server's credentials on it). Holding the
// socket lets the server stop accepting without leaving the port (Pause: connections wait
// in the backlog) and hand the socket to another process (a hand-over), which gRPC's own
// listeners allow neither of.
#ifndef FERRY_SERVER_CONTROL_CONTROL_ACCEPTOR_H_
#define FERRY_SERVER_CONTROL_CONTROL_ACCEPTOR_H_

#include <memory>
#include <thread>

#include <grpcpp/server_builder.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"
#include "server/base/log_lines.h"

namespace ferry {

class ControlAcceptor {
 public:
  // Accepts from `listener` (listening already) into `to` until Stop(). `to` must be the
  // acceptor of a server that outlives Stop().
  static absl::StatusOr<std::unique_ptr<ControlAcceptor>> Start(
      UniqueFd listener, std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> to);
  ControlAcceptor(const ControlAcceptor&) = delete;
  ControlAcceptor& operator=(const ControlAcceptor&) = delete;
  ~ControlAcceptor();

  int listener() const { return listener_.get(); }
  // Stops accepting; returns once no accept is under way. The socket keeps its port and
  // its backlog. Resume() accepts again.
  void Pause();
  void Resume();
  // Stops the thread and closes the socket. Idempotent.
  void Stop();
  // Stops the thread and gives the socket back (open, listening).
  UniqueFd Release();

 private:
  enum class State { kAccepting, kPaused, kStopped };
  ControlAcceptor() = default;
  void Run();
  // Accepts what the backlog holds now, without waiting.
  void AcceptReady();
  // Tells the thread that the state changed.
  void Wake();

  UniqueFd listener_;
  UniqueFd wake_;  // an eventfd: the state changed
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> to_;
  absl::Mutex mu_;
  State wanted_ ABSL_GUARDED_BY(mu_) = State::kAccepting;
  // What the thread does now: it waits on the socket only while kAccepting.
  State doing_ ABSL_GUARDED_BY(mu_) = State::kAccepting;
  LineBudget log_budget_{1};
  std::thread thread_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_CONTROL_CONTROL_ACCEPTOR_H_
