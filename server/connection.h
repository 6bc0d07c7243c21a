// Serving one data-plane connection, on a fiber.
//
// The connection reads 40-byte FETCH requests (pipelined requests wait in the socket
// buffer), looks the ticket up once per request, and answers each block with a BLOCK
// header sent on its own (MSG_MORE, so it shares a TCP segment with the payload) and
// then the payload:
//   * splice mode: file -> pipe -> socket, a chunk of up to the pipe's capacity per
//     pass; no payload byte enters user space. With the uring engine the two
//     IORING_OP_SPLICE legs are linked in one submission; with the inline engine both
//     legs are direct non-blocking splices and a full socket waits on an io_uring poll.
//     The pipe belongs to the connection and dies with it, so a pipe left holding bytes
//     by an error is never reused.
//   * copy mode: read the segment into the connection's buffer, then send it.
// A response of 64 KiB or more is sent with Nagle's algorithm on and pushed by setting
// TCP_NODELAY once it is all queued (docs/protocol.md). Both modes put identical bytes on
// the wire.
//
// A request that fails validation (bad frame, unknown or expired ticket, block range
// out of bounds) or a block that cannot be served (its file shrank) gets an ERROR frame,
// and the connection closes. A peer that goes away or stalls past a deadline is dropped.
#ifndef FERRY_SERVER_CONNECTION_H_
#define FERRY_SERVER_CONNECTION_H_

#include <atomic>
#include <cstddef>

#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "server/ticket_registry.h"

namespace ferry {

enum class DataPlaneMode { kSplice, kCopy };

// How a connection drives its socket and file I/O. Both engines put the same bytes on
// the wire; benchmarks/results/ has the measurements that pick the default.
enum class IoEngine {
  // The socket is O_NONBLOCK and every socket operation (and the file -> pipe splice,
  // or the copy-mode read) is a direct syscall from the fiber's thread; a full or empty
  // socket parks the fiber on an io_uring poll (common/io/ready_ops.h).
  kInline,
  // Every operation is an io_uring request: IORING_OP_SPLICE (run by io-wq workers,
  // since splice is not pollable), READ, SEND, RECV.
  kUring,
};

struct ConnectionOptions {
  DataPlaneMode mode = DataPlaneMode::kSplice;
  IoEngine engine = IoEngine::kInline;
  size_t pipe_bytes = size_t{1} << 20;
  size_t copy_buffer_bytes = size_t{1} << 20;
  // How long a new connection may take to send its first whole request.
  absl::Duration first_request_timeout = absl::Seconds(10);
  // How long a connection may sit without sending a request after that.
  absl::Duration idle_timeout = absl::Seconds(120);
  // Deadline for each send or splice to the peer.
  absl::Duration io_timeout = absl::Seconds(30);
};

// What the server thread running a connection sees of it and can tell it. Touched only
// on that thread (fibers switch only at I/O waits), so it needs no lock.
struct ConnectionControl {
  // The connection's socket.
  int fd = -1;
  // True from the moment a whole request has been read until its last byte is sent: an
  // idle connection (false) may be shut down by a draining server.
  bool serving = false;
  // Once true, the connection serves only the requests already in its socket buffer,
  // then closes (the server is draining). May be null.
  const std::atomic<bool>* draining = nullptr;
};

// Serves `socket` until the peer closes, errs or stalls, the server drains, or the
// scheduler stops. Call from a fiber. `tickets` must outlive the call; `control`, if
// given, the call too.
void ServeConnection(UniqueFd socket, const TicketRegistry& tickets,
                     const ConnectionOptions& options, ConnectionControl* control = nullptr);

}  // namespace ferry

#endif  // FERRY_SERVER_CONNECTION_H_
