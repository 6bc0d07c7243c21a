#include "server/dataplane/io_engine.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/io/ops.h"
#include "common/io/ready_ops.h"
#include "common/io/scheduler.h"

namespace ferry {

namespace {

class InlineIo final : public SocketIo {
 public:
  int Prepare(int socket) const override { return SetNonBlocking(socket, true); }
  ssize_t Recv(int socket, void* buf, size_t len, absl::Time deadline) const override {
    return RecvReady(socket, buf, len, deadline);
  }
  ssize_t SendAll(int socket, const void* data, size_t len, int flags,
                  absl::Time deadline) const override {
    return SendAllReady(socket, data, len, flags, deadline);
  }
  SpliceStep Splice(int file, uint64_t pos, const Pipe& pipe, int, size_t len, bool,
                    absl::Time) const override {
    // The pipe is empty here, so a non-blocking splice never waits on it, and the
    // sender found the chunk cached.
    for (;;) {
      loff_t offset = static_cast<loff_t>(pos);
      const ssize_t n =
          ::splice(file, &offset, pipe.write_fd(), nullptr, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n >= 0) return {n, 0};
      if (errno != EINTR) return {-errno, 0};
    }
  }
  ssize_t DrainPipe(const Pipe& pipe, int socket, size_t len, bool more,
                    absl::Time deadline) const override {
    return SpliceAllToSocketReady(pipe.read_fd(), socket, len,
                                  SPLICE_F_MOVE | (more ? SPLICE_F_MORE : 0), deadline);
  }
};

class UringIo final : public SocketIo {
 public:
  // Non-blocking for splice alone (a splice into a socket honours O_NONBLOCK; io_uring's
  // sends and receives do not): a splice into a full socket is not left sleeping in an
  // io-wq worker, which a linked timeout does not wake, holding its pipe.
  int Prepare(int socket) const override { return SetNonBlocking(socket, true); }
  ssize_t Recv(int socket, void* buf, size_t len, absl::Time deadline) const override {
    return ::ferry::Recv(socket, buf, len, 0, deadline);
  }
  ssize_t SendAll(int socket, const void* data, size_t len, int flags,
                  absl::Time deadline) const override {
    return ::ferry::SendAll(socket, data, len, MSG_NOSIGNAL | flags, deadline);
  }
  SpliceStep Splice(int file, uint64_t pos, const Pipe& pipe, int socket, size_t len, bool more,
                    absl::Time deadline) const override {
    // Both legs in one submission: file -> pipe, linked to pipe -> socket. If the first
    // leg comes up short the kernel cancels the second (-ECANCELED), and what the pipe
    // holds is drained by the caller.
    IoOp in;
    IoOp out;
    FiberScheduler::Current()->ReserveSqes(3);
    PrepSplice(in, file, static_cast<int64_t>(pos), pipe.write_fd(), -1, len, SPLICE_F_MOVE,
               IOSQE_IO_LINK);
    PrepSplice(out, pipe.read_fd(), -1, socket, -1, len, SPLICE_F_MOVE | (more ? SPLICE_F_MORE : 0),
               0, deadline);
    const ssize_t in_res = in.Wait();
    const ssize_t out_res = out.Wait();
    return {in_res, out_res == -ECANCELED ? 0 : out_res};
  }
  ssize_t DrainPipe(const Pipe& pipe, int socket, size_t len, bool more,
                    absl::Time deadline) const override {
    size_t done = 0;
    while (done < len) {
      const ssize_t n = ::ferry::Splice(pipe.read_fd(), -1, socket, -1, len - done,
                                        SPLICE_F_MOVE | (more ? SPLICE_F_MORE : 0), deadline);
      if (n == -EAGAIN) {  // the socket is full
        const int ready = Poll(socket, POLLOUT, deadline);
        if (ready < 0) return ready;
        continue;
      }
      if (n < 0) return n;
      if (n == 0) return -EPIPE;  // the pipe ran dry before `len` bytes: a caller bug
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(done);
  }
};

}  // namespace

bool AbslParseFlag(absl::string_view text, IoEngine* engine, std::string* error) {
  if (text == "inline") {
    *engine = IoEngine::kInline;
  } else if (text == "uring") {
    *engine = IoEngine::kUring;
  } else {
    *error = absl::StrCat("must be inline or uring, not '", text, "'");
    return false;
  }
  return true;
}

std::string AbslUnparseFlag(IoEngine engine) {
  return engine == IoEngine::kInline ? "inline" : "uring";
}

const SocketIo& SocketIoFor(IoEngine engine) {
  static const InlineIo inline_io;
  static const UringIo uring_io;
  return engine == IoEngine::kInline ? static_cast<const SocketIo&>(inline_io) : uring_io;
}

}  // namespace ferry
