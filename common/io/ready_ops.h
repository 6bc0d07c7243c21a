// Readiness-based I/O for non-blocking descriptors, on fibers: try the syscall at once;
// when the kernel says -EAGAIN, park the fiber on an io_uring poll (POLLIN or POLLOUT)
// and try again. This is the epoll model with io_uring as the waiter.
//
// Why both this and ops.h: IORING_OP_SPLICE is not pollable, so io_uring hands every
// splice to an io-wq worker thread; a splice from a pipe into a socket done inline by the
// fiber's own thread avoids that hand-off, and a full socket costs one poll, not a
// blocked worker. For a socket the kernel only honours non-blocking splice when the
// socket itself is O_NONBLOCK, so these ops are for descriptors opened or set that way.
//
// Results as in ops.h: bytes moved (0 at end of input) or -errno; -ETIMEDOUT when the
// deadline passes while waiting; -ECANCELED when the scheduler stops. Call from a fiber.
#ifndef FERRY_COMMON_IO_READY_OPS_H_
#define FERRY_COMMON_IO_READY_OPS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace ferry {

// Sets or clears O_NONBLOCK. 0 or -errno.
[[nodiscard]] int SetNonBlocking(int fd, bool non_blocking);

// Receives up to `len` bytes; waits for POLLIN while there are none.
[[nodiscard]] ssize_t RecvReady(int fd, void* buf, size_t len, absl::Time deadline);
// Receives exactly `len` bytes, or fewer at end of input.
[[nodiscard]] ssize_t RecvFullReady(int fd, void* buf, size_t len, absl::Time deadline);
// Sends exactly `len` bytes (MSG_NOSIGNAL | `flags`); waits for POLLOUT when full.
[[nodiscard]] ssize_t SendAllReady(int fd, const void* buf, size_t len, int flags,
                                   absl::Time deadline);
// Splices exactly `len` bytes from `pipe_read_fd` into the non-blocking `socket`
// (SPLICE_F_NONBLOCK | `splice_flags`); waits for POLLOUT when the socket is full.
[[nodiscard]] ssize_t SpliceAllToSocketReady(int pipe_read_fd, int socket, size_t len,
                                             unsigned splice_flags, absl::Time deadline);

}  // namespace ferry

#endif  // FERRY_COMMON_IO_READY_OPS_H_
