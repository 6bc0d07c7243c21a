// Serving one data-plane connection, on a fiber.
//
// The connection reads 40-byte FETCH requests (pipelined requests wait in the socket
// buffer), looks the ticket up once per request, and answers each block with a BLOCK
// header sent on its own (MSG_MORE, so it shares a TCP segment with the payload) and
// then the payload, both through its SegmentSender (segment_sender.h: splice or copy,
// either engine, Nagle for bulk responses, fair turns). Both modes put identical bytes
// on the wire.
//
// A request that fails validation (bad frame, unknown or expired ticket, block range
// out of bounds) or a block that cannot be served (its file shrank) gets an ERROR frame,
// and the connection closes. A peer that goes away or stalls past a deadline is dropped.
#ifndef FERRY_SERVER_DATAPLANE_CONNECTION_H_
#define FERRY_SERVER_DATAPLANE_CONNECTION_H_

#include <atomic>
#include <cstddef>

#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "server/ops/metrics.h"
#include "server/dataplane/segment_sender.h"
#include "server/control/ticket_registry.h"

namespace ferry {

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
  // The serving thread's counters. May be null.
  ThreadMetrics* metrics = nullptr;
};

// Serves `socket` until the peer closes, errs or stalls, the server drains, or the
// scheduler stops. Call from a fiber. `tickets` must outlive the call; `control`, if
// given, the call too.
void ServeConnection(UniqueFd socket, const TicketRegistry& tickets,
                     const ConnectionOptions& options, ConnectionControl* control = nullptr);

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_CONNECTION_H_
