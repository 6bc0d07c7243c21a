#include "common/io/ops.h"

#include <algorithm>
#include <cerrno>

#include "common/check.h"

namespace ferry {

namespace {

FiberScheduler& CurrentScheduler() {
  FiberScheduler* s = FiberScheduler::Current();
  FERRY_CHECK(s != nullptr && "fiber I/O outside a running FiberScheduler");
  return *s;
}

// Prepares one op: `prep` fills the SQE (io_uring_prep_*), the scheduler adds the
// op's user data, flags and linked timeout.
template <typename PrepFn>
void Prepare(IoOp& op, unsigned sqe_flags, absl::Time deadline, PrepFn prep) {
  FiberScheduler& s = CurrentScheduler();
  io_uring_sqe* sqe = s.StartOp(op, deadline);
  if (sqe == nullptr) return;  // stopping: op already completed with -ECANCELED
  prep(sqe);
  s.CommitOp(op, sqe, sqe_flags, deadline);
}

// An io_uring entry's length is 32 bits: one operation moves at most 1 GiB, and callers
// that need more loop on the short count, as they do for any short transfer.
unsigned OpBytes(size_t len) {
  return static_cast<unsigned>(std::min<size_t>(len, size_t{1} << 30));
}

}  // namespace

void PrepNop(IoOp& op, unsigned sqe_flags) {
  Prepare(op, sqe_flags, kNoDeadline, [](io_uring_sqe* sqe) { io_uring_prep_nop(sqe); });
}

void PrepAccept(IoOp& op, int fd, sockaddr* addr, socklen_t* addrlen, int flags, unsigned sqe_flags,
                absl::Time deadline) {
  Prepare(op, sqe_flags, deadline,
          [&](io_uring_sqe* sqe) { io_uring_prep_accept(sqe, fd, addr, addrlen, flags); });
}

void PrepConnect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen, unsigned sqe_flags,
                 absl::Time deadline) {
  Prepare(op, sqe_flags, deadline,
          [&](io_uring_sqe* sqe) { io_uring_prep_connect(sqe, fd, addr, addrlen); });
}

void PrepRead(IoOp& op, int fd, void* buf, size_t len, int64_t offset, unsigned sqe_flags,
              absl::Time deadline) {
  Prepare(op, sqe_flags, deadline, [&](io_uring_sqe* sqe) {
    io_uring_prep_read(sqe, fd, buf, OpBytes(len), static_cast<uint64_t>(offset));
  });
}

void PrepWrite(IoOp& op, int fd, const void* buf, size_t len, int64_t offset, unsigned sqe_flags,
               absl::Time deadline) {
  Prepare(op, sqe_flags, deadline, [&](io_uring_sqe* sqe) {
    io_uring_prep_write(sqe, fd, buf, OpBytes(len), static_cast<uint64_t>(offset));
  });
}

void PrepRecv(IoOp& op, int fd, void* buf, size_t len, int flags, unsigned sqe_flags,
              absl::Time deadline) {
  Prepare(op, sqe_flags, deadline,
          [&](io_uring_sqe* sqe) { io_uring_prep_recv(sqe, fd, buf, OpBytes(len), flags); });
}

void PrepSend(IoOp& op, int fd, const void* buf, size_t len, int flags, unsigned sqe_flags,
              absl::Time deadline) {
  Prepare(op, sqe_flags, deadline,
          [&](io_uring_sqe* sqe) { io_uring_prep_send(sqe, fd, buf, OpBytes(len), flags); });
}

void PrepSplice(IoOp& op, int fd_in, int64_t off_in, int fd_out, int64_t off_out, size_t len,
                unsigned splice_flags, unsigned sqe_flags, absl::Time deadline) {
  Prepare(op, sqe_flags, deadline, [&](io_uring_sqe* sqe) {
    io_uring_prep_splice(sqe, fd_in, off_in, fd_out, off_out, OpBytes(len), splice_flags);
  });
}

void PrepPoll(IoOp& op, int fd, unsigned mask, unsigned sqe_flags, absl::Time deadline) {
  Prepare(op, sqe_flags, deadline,
          [&](io_uring_sqe* sqe) { io_uring_prep_poll_add(sqe, fd, mask); });
}

void PrepSleep(IoOp& op, absl::Duration duration, unsigned sqe_flags) {
  // The timespec must live until submission; the op's own deadline slot is unused
  // for a timer, so it holds it.
  Prepare(op, sqe_flags, kNoDeadline, [&](io_uring_sqe* sqe) {
    if (duration < absl::ZeroDuration()) duration = absl::ZeroDuration();
    const timespec ts = absl::ToTimespec(duration);
    op.timeout_storage() = __kernel_timespec{.tv_sec = ts.tv_sec, .tv_nsec = ts.tv_nsec};
    io_uring_prep_timeout(sqe, &op.timeout_storage(), 0, 0);
  });
}

int Nop() {
  IoOp op;
  PrepNop(op);
  return op.Wait();
}

int Accept(int fd, sockaddr* addr, socklen_t* addrlen, int flags, absl::Time deadline) {
  IoOp op;
  PrepAccept(op, fd, addr, addrlen, flags, 0, deadline);
  return op.Wait();
}

int Connect(int fd, const sockaddr* addr, socklen_t addrlen, absl::Time deadline) {
  IoOp op;
  PrepConnect(op, fd, addr, addrlen, 0, deadline);
  return op.Wait();
}

ssize_t Read(int fd, void* buf, size_t len, int64_t offset, absl::Time deadline) {
  IoOp op;
  PrepRead(op, fd, buf, len, offset, 0, deadline);
  return op.Wait();
}

ssize_t Write(int fd, const void* buf, size_t len, int64_t offset, absl::Time deadline) {
  IoOp op;
  PrepWrite(op, fd, buf, len, offset, 0, deadline);
  return op.Wait();
}

ssize_t Recv(int fd, void* buf, size_t len, int flags, absl::Time deadline) {
  IoOp op;
  PrepRecv(op, fd, buf, len, flags, 0, deadline);
  return op.Wait();
}

ssize_t Send(int fd, const void* buf, size_t len, int flags, absl::Time deadline) {
  IoOp op;
  PrepSend(op, fd, buf, len, flags, 0, deadline);
  return op.Wait();
}

ssize_t Splice(int fd_in, int64_t off_in, int fd_out, int64_t off_out, size_t len,
               unsigned splice_flags, absl::Time deadline) {
  IoOp op;
  PrepSplice(op, fd_in, off_in, fd_out, off_out, len, splice_flags, 0, deadline);
  return op.Wait();
}

int Poll(int fd, unsigned mask, absl::Time deadline) {
  IoOp op;
  PrepPoll(op, fd, mask, 0, deadline);
  return op.Wait();
}

int Sleep(absl::Duration duration) {
  IoOp op;
  PrepSleep(op, duration);
  const int res = op.Wait();
  return res == -ETIME ? 0 : res;
}

ssize_t ReadFull(int fd, void* buf, size_t len, int64_t offset, absl::Time deadline) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = Read(fd, static_cast<char*>(buf) + done, len - done,
                           offset < 0 ? -1 : offset + static_cast<int64_t>(done), deadline);
    if (n < 0) return n;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

ssize_t SendAll(int fd, const void* buf, size_t len, int flags, absl::Time deadline) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = Send(fd, static_cast<const char*>(buf) + done, len - done, flags, deadline);
    if (n < 0) return n;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

ssize_t WriteAll(int fd, const void* buf, size_t len, int64_t offset, absl::Time deadline) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = Write(fd, static_cast<const char*>(buf) + done, len - done,
                            offset < 0 ? -1 : offset + static_cast<int64_t>(done), deadline);
    if (n < 0) return n;
    if (n == 0) return -EIO;  // a write that moves nothing would loop forever
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

ssize_t SpliceAll(int fd_in, int64_t off_in, int fd_out, int64_t off_out, size_t len,
                  unsigned splice_flags, absl::Time deadline) {
  size_t done = 0;
  while (done < len) {
    const int64_t in = off_in < 0 ? -1 : off_in + static_cast<int64_t>(done);
    const int64_t out = off_out < 0 ? -1 : off_out + static_cast<int64_t>(done);
    const ssize_t n = Splice(fd_in, in, fd_out, out, len - done, splice_flags, deadline);
    if (n < 0) return n;
    if (n == 0) break;  // end of input
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace ferry
