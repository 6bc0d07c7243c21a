#include "common/io/ready_ops.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/io/ops.h"

namespace ferry {

namespace {

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
