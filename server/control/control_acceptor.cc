#include "server/control/control_acceptor.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace ferry {

absl::StatusOr<std::unique_ptr<ControlAcceptor>> ControlAcceptor::Start(
    UniqueFd listener, std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> to) {
  // Non-blocking, so that accepting what is ready ends when the backlog is empty.
  const int flags = ::fcntl(listener.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, "the control plane's listening socket: fcntl");
  }
  std::unique_ptr<ControlAcceptor> acceptor(new ControlAcceptor);
  acceptor->listener_ = std::move(listener);
  acceptor->to_ = std::move(to);
  acceptor->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!acceptor->wake_.valid()) {
    return absl::ErrnoToStatus(errno, "the control plane's acceptor: eventfd");
  }
  acceptor->thread_ = std::thread([a = acceptor.get()] { a->Run(); });
  return acceptor;
}

void ControlAcceptor::Run() {
  for (;;) {
    State doing;
    {
      absl::MutexLock lock(&mu_);
      doing = doing_ = wanted_;
    }
    if (doing == State::kStopped) return;
    // Paused, only the state's changes wake the thread.
    const bool accepting = doing == State::kAccepting;
    pollfd fds[2] = {{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    if (::poll(fds, accepting ? 2 : 1, -1) < 0) continue;  // EINTR
    if (fds[0].revents & POLLIN) {
      uint64_t count = 0;
      if (::read(wake_.get(), &count, sizeof(count)) < 0) {
        // EAGAIN: another wake-up read it first; the state is read again either way.
      }
      continue;  // the state first: a pause wins over a ready backlog
    }
    if (accepting && (fds[1].revents & POLLIN)) AcceptReady();
  }
}

void ControlAcceptor::AcceptReady() {
  // Bounded: a backlog that never empties still lets a pause in between batches.
  for (int i = 0; i < 64; ++i) {
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors or memory: the backlog waits; poll again after a pause
        // rather than spin.
        const int error = errno;
        if (uint64_t held_back = 0; log_budget_.Take(absl::Now(), &held_back)) {
          LOG(WARNING) << "ferry_server: the control plane cannot accept: " << std::strerror(error)
                       << " (" << held_back << " more held back)";
        }
        ::usleep(10000);
      }
      return;  // EAGAIN (nothing left), or a connection that died in the backlog
    }
    const int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
    connection.listener_fd = listener_.get();
    connection.fd = fd;
    to_->HandleNewConnection(&connection);  // gRPC owns the descriptor from here
  }
}

void ControlAcceptor::Wake() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) < 0) {
    // EAGAIN only: the counter is at its maximum, so a wake-up is pending anyway.
  }
}

void ControlAcceptor::Pause() {
  absl::MutexLock lock(&mu_);
  if (wanted_ == State::kStopped) return;
  wanted_ = State::kPaused;
  Wake();
  mu_.Await(absl::Condition(
      +[](State* doing) { return *doing != State::kAccepting; }, &doing_));
}

void ControlAcceptor::Resume() {
  absl::MutexLock lock(&mu_);
  if (wanted_ == State::kStopped) return;
  wanted_ = State::kAccepting;
  Wake();
}

void ControlAcceptor::Stop() { Release().Reset(); }

UniqueFd ControlAcceptor::Release() {
  {
    absl::MutexLock lock(&mu_);
    wanted_ = State::kStopped;
    Wake();
  }
  if (thread_.joinable()) thread_.join();
  return std::move(listener_);
}

ControlAcceptor::~ControlAcceptor() { Stop(); }

}  // namespace ferry
