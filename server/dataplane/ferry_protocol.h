// Ferry's data-plane protocol (docs/protocol.md) on one connection, on a fiber: the
// handler that parses 40-byte FETCH requests and frames their answers; the connection
// core (connection_core.h) does the rest.
//
// Each request's ticket is looked up once, and each block is answered with a BLOCK
// header and then its payload. A request that fails validation (bad frame, unknown or
// expired ticket, block range out of bounds) or a block that cannot be served (its file
// shrank) gets an ERROR frame, and the connection closes. A peer that goes away or
// stalls past a deadline is dropped.
#ifndef FERRY_SERVER_DATAPLANE_FERRY_PROTOCOL_H_
#define FERRY_SERVER_DATAPLANE_FERRY_PROTOCOL_H_

#include "common/unique_fd.h"
#include "server/dataplane/connection_core.h"
#include "server/dataplane/segment_sender.h"
#include "server/tickets/ticket_registry.h"

namespace ferry {

// Serves `socket` until the peer closes, errs or stalls, the server drains, or the
// scheduler stops. Call from a fiber. `tickets`, `options` and `control` must outlive
// the call.
void ServeFerryConnection(UniqueFd socket, const TicketRegistry& tickets,
                          const ConnectionOptions& options, ConnectionControl& control);

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_FERRY_PROTOCOL_H_
