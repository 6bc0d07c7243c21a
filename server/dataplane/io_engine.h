// The io engine: how a data-plane connection drives its socket and its file reads.
// Chosen once per connection (SocketIoFor), the way seastar picks one reactor backend;
// the sender and the connection core call it and never test which one it is. Both
// engines put the same bytes on the wire; benchmarks/results/ has the measurements that
// pick the default.
//
// What is read from files either way is what the page cache holds: the sender hands
// misses to the disk's workers (server/storage/disk_reader.h).
//
// Results as in common/io/ops.h: bytes moved (0 at end of input) or -errno; -ETIMEDOUT
// past the deadline; -ECANCELED when the scheduler stops. Call from a fiber.
#ifndef FERRY_SERVER_DATAPLANE_IO_ENGINE_H_
#define FERRY_SERVER_DATAPLANE_IO_ENGINE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/pipe.h"

namespace ferry {

enum class IoEngine {
  // The socket is O_NONBLOCK and every socket operation (and the file -> pipe splice of
  // a cached chunk) is a direct syscall from the fiber's thread; a full or empty socket
  // parks the fiber on an io_uring poll (common/io/ready_ops.h).
  kInline,
  // Every socket operation is an io_uring request: IORING_OP_SPLICE (run by io-wq
  // workers, since splice is not pollable), SEND, RECV.
  kUring,
};
// "inline" or "uring", as the --io-engine flag takes them.
bool AbslParseFlag(absl::string_view text, IoEngine* engine, std::string* error);
std::string AbslUnparseFlag(IoEngine engine);

class SocketIo {
 public:
  virtual ~SocketIo() = default;

  // Readies an accepted socket for the engine. 0 or -errno.
  virtual int Prepare(int socket) const = 0;
  // Up to `len` bytes from the socket, waiting for some until `deadline`.
  virtual ssize_t Recv(int socket, void* buf, size_t len, absl::Time deadline) const = 0;
  // All of `data` (MSG_NOSIGNAL | `flags`).
  virtual ssize_t SendAll(int socket, const void* data, size_t len, int flags,
                          absl::Time deadline) const = 0;

  // One pass of a spliced segment: up to `len` bytes of `file` at `pos` into the empty
  // `pipe` (`in`: the count, or -errno), and however many of them the engine moved on
  // into the socket in the same step (`out`: the count, or -errno when that leg failed:
  // -EAGAIN when the socket was full, -ETIMEDOUT past `deadline`). What `in` moved and
  // `out` did not is still in the pipe.
  struct SpliceStep {
    ssize_t in = 0;
    ssize_t out = 0;
  };
  virtual SpliceStep Splice(int file, uint64_t pos, const Pipe& pipe, int socket, size_t len,
                            bool more, absl::Time deadline) const = 0;
  // Exactly `len` bytes from the pipe into the socket (SPLICE_F_MORE when `more`),
  // waiting for room until `deadline` (then -ETIMEDOUT; what moved is off the pipe).
  virtual ssize_t DrainPipe(const Pipe& pipe, int socket, size_t len, bool more,
                            absl::Time deadline) const = 0;
};

// The engine's operations; they hold no state, so one instance serves every connection.
const SocketIo& SocketIoFor(IoEngine engine);

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_IO_ENGINE_H_
