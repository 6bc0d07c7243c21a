// Fiber I/O operations over the current thread's FiberScheduler.
//
// Every operation comes in two forms, and descriptors stay plain `int`s in both:
//  * Prep<Op>(op, ...): the async form. Prepares the operation into a caller-owned
//    IoOp and returns at once; the SQE goes to the kernel with the scheduler's next
//    submission, so ops prepared back to back are submitted together. Wait on it
//    later with op.Wait(). `sqe_flags` (e.g. IOSQE_IO_LINK) are passed through.
//  * <Op>(...): the blocking form. Suspends the calling fiber (never the thread)
//    until the kernel completes the operation. It is the async form with the IoOp on
//    the fiber's stack.
//
// Results are the kernel's, unchanged: >= 0 on success, -errno on failure. Every op
// takes an optional `deadline`; when it passes first the op is cancelled (a linked
// timeout) and returns -ETIMEDOUT. A cancelled op (IoOp::Cancel, or the scheduler
// stopping) returns -ECANCELED. The "some" forms (Read, Recv, Send, Splice) may move
// fewer bytes than asked; the "all" forms (ReadFull, SendAll, SpliceAll) loop.
//
// All functions must be called from a fiber of a running FiberScheduler; buffers and
// address structures must stay valid until the op completes.
#ifndef FERRY_COMMON_IO_OPS_H_
#define FERRY_COMMON_IO_OPS_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"
#include "common/io/scheduler.h"

namespace ferry {

inline constexpr absl::Time kNoDeadline = absl::InfiniteFuture();

// --- Async forms. ---
void PrepNop(IoOp& op, unsigned sqe_flags = 0);
void PrepAccept(IoOp& op, int fd, sockaddr* addr, socklen_t* addrlen, int flags,
                unsigned sqe_flags = 0, absl::Time deadline = kNoDeadline);
void PrepConnect(IoOp& op, int fd, const sockaddr* addr, socklen_t addrlen, unsigned sqe_flags = 0,
                 absl::Time deadline = kNoDeadline);
// `offset` -1 reads/writes at the file position (and for pipes and sockets).
void PrepRead(IoOp& op, int fd, void* buf, size_t len, int64_t offset, unsigned sqe_flags = 0,
              absl::Time deadline = kNoDeadline);
void PrepWrite(IoOp& op, int fd, const void* buf, size_t len, int64_t offset,
               unsigned sqe_flags = 0, absl::Time deadline = kNoDeadline);
void PrepRecv(IoOp& op, int fd, void* buf, size_t len, int flags, unsigned sqe_flags = 0,
              absl::Time deadline = kNoDeadline);
void PrepSend(IoOp& op, int fd, const void* buf, size_t len, int flags, unsigned sqe_flags = 0,
              absl::Time deadline = kNoDeadline);
// One side must be a pipe (its offset -1). `splice_flags` are SPLICE_F_*.
void PrepSplice(IoOp& op, int fd_in, int64_t off_in, int fd_out, int64_t off_out, size_t len,
                unsigned splice_flags, unsigned sqe_flags = 0, absl::Time deadline = kNoDeadline);
// Completes with the ready events (POLLIN, POLLOUT, ...) once `fd` has one of `mask`.
void PrepPoll(IoOp& op, int fd, unsigned mask, unsigned sqe_flags = 0,
              absl::Time deadline = kNoDeadline);
// Completes with -ETIME after `duration` (a timer, not a deadline on another op).
void PrepSleep(IoOp& op, absl::Duration duration, unsigned sqe_flags = 0);

// --- Blocking forms. ---
[[nodiscard]] int Nop();
// Returns the accepted descriptor (opened with `flags`, which default to
// SOCK_CLOEXEC) or -errno. Put it in a UniqueFd on the next line.
[[nodiscard]] int Accept(int fd, sockaddr* addr = nullptr, socklen_t* addrlen = nullptr,
                         int flags = SOCK_CLOEXEC, absl::Time deadline = kNoDeadline);
// 0 or -errno (e.g. -ECONNREFUSED).
[[nodiscard]] int Connect(int fd, const sockaddr* addr, socklen_t addrlen,
                          absl::Time deadline = kNoDeadline);
// Bytes moved, 0 at end of input, or -errno.
[[nodiscard]] ssize_t Read(int fd, void* buf, size_t len, int64_t offset = -1,
                           absl::Time deadline = kNoDeadline);
[[nodiscard]] ssize_t Write(int fd, const void* buf, size_t len, int64_t offset = -1,
                            absl::Time deadline = kNoDeadline);
[[nodiscard]] ssize_t Recv(int fd, void* buf, size_t len, int flags = 0,
                           absl::Time deadline = kNoDeadline);
[[nodiscard]] ssize_t Send(int fd, const void* buf, size_t len, int flags = 0,
                           absl::Time deadline = kNoDeadline);
[[nodiscard]] ssize_t Splice(int fd_in, int64_t off_in, int fd_out, int64_t off_out, size_t len,
                             unsigned splice_flags = 0, absl::Time deadline = kNoDeadline);
[[nodiscard]] int Poll(int fd, unsigned mask, absl::Time deadline = kNoDeadline);
// 0 after `duration`, or -ECANCELED when the scheduler stops first.
[[nodiscard]] int Sleep(absl::Duration duration);

// --- "All" forms: loop over short transfers under one deadline. ---
// Reads until `len` bytes or end of input: returns the bytes read (fewer than `len`
// only at end of input) or -errno. `offset` -1 reads at the file position; otherwise
// it advances with each read.
[[nodiscard]] ssize_t ReadFull(int fd, void* buf, size_t len, int64_t offset = -1,
                               absl::Time deadline = kNoDeadline);
// Sends exactly `len` bytes: returns `len` or -errno.
[[nodiscard]] ssize_t SendAll(int fd, const void* buf, size_t len, int flags = 0,
                              absl::Time deadline = kNoDeadline);
// Writes exactly `len` bytes: returns `len` or -errno.
[[nodiscard]] ssize_t WriteAll(int fd, const void* buf, size_t len, int64_t offset = -1,
                               absl::Time deadline = kNoDeadline);
// Moves `len` bytes (or up to end of input): returns the bytes moved or -errno.
// Offsets that are not -1 advance with each pass.
[[nodiscard]] ssize_t SpliceAll(int fd_in, int64_t off_in, int fd_out, int64_t off_out, size_t len,
                                unsigned splice_flags = 0, absl::Time deadline = kNoDeadline);

}  // namespace ferry

#endif  // FERRY_COMMON_IO_OPS_H_
