#include "common/io/ready_ops.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "common/io/ops.h"
#include "common/io/scheduler.h"

namespace ferry {

namespace {

// With the scheduler's idle poll on and nothing else to run, retries `attempt` for up
// to that long before the caller parks: bytes or -errno once it stops blocking,
// nothing when it gave up (or should not poll at all).
template <typename Attempt>
std::optional<ssize_t> PollWhileIdle(Attempt& attempt, absl::Time deadline) {
  const FiberScheduler* scheduler = FiberScheduler::Current();
  const absl::Duration budget = scheduler->PollBudget();
  if (budget <= absl::ZeroDuration()) return std::nullopt;
  const absl::Time until = std::min(absl::Now() + budget, deadline);
  for (int i = 1;; ++i) {
    const ssize_t n = attempt();
    if (n >= 0) return n;
    const int err = errno;
    if (err != EAGAIN && err != EINTR) return -err;
    // Another fiber's work arrived, or the budget ran out: park like any other wait.
    if (scheduler->PollBudget() <= absl::ZeroDuration()) return std::nullopt;
    if ((i & 15) == 0 && absl::Now() >= until) return std::nullopt;
  }
}

// Runs `attempt` (a syscall returning >= 0 or -1 with errno) until it moves bytes or
// fails for real, parking on `events` whenever it would block. Returns bytes or -errno.
template <typename Attempt>
ssize_t UntilReady(int fd, unsigned events, absl::Time deadline, Attempt attempt) {
  for (;;) {
    const ssize_t n = attempt();
    if (n >= 0) return n;
    const int err = errno;  // read before anything else can run on this thread
    if (err == EINTR) continue;
    if (err != EAGAIN) return -err;
    if (events == POLLIN) {
      if (std::optional<ssize_t> polled = PollWhileIdle(attempt, deadline)) return *polled;
    }
    const int ready = Poll(fd, events, deadline);
    if (ready < 0) return ready;
  }
}

}  // namespace

int SetNonBlocking(int fd, bool non_blocking) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return -errno;
  const int wanted = non_blocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (wanted != flags && ::fcntl(fd, F_SETFL, wanted) < 0) return -errno;
  return 0;
}

ssize_t RecvReady(int fd, void* buf, size_t len, absl::Time deadline) {
  return UntilReady(fd, POLLIN, deadline, [&] { return ::recv(fd, buf, len, MSG_DONTWAIT); });
}

ssize_t RecvFullReady(int fd, void* buf, size_t len, absl::Time deadline) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = RecvReady(fd, static_cast<char*>(buf) + done, len - done, deadline);
    if (n < 0) return n;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

ssize_t SendAllReady(int fd, const void* buf, size_t len, int flags, absl::Time deadline) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = UntilReady(fd, POLLOUT, deadline, [&] {
      return ::send(fd, static_cast<const char*>(buf) + done, len - done,
                    MSG_DONTWAIT | MSG_NOSIGNAL | flags);
    });
    if (n < 0) return n;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

ssize_t SpliceAllToSocketReady(int pipe_read_fd, int socket, size_t len, unsigned splice_flags,
                               absl::Time deadline) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = UntilReady(socket, POLLOUT, deadline, [&] {
      return ::splice(pipe_read_fd, nullptr, socket, nullptr, len - done,
                      SPLICE_F_NONBLOCK | splice_flags);
    });
    if (n < 0) return n;
    if (n == 0) return -EPIPE;  // the pipe ran dry before `len` bytes: a caller bug
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace ferry
