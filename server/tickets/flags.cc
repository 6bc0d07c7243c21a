// The stream tickets' limits (TicketLimits). common/option_flags.h says how they bind.
#include "common/option_flags.h"
#include "server/tickets/ticket_registry.h"

FERRY_OPTION_FLAG(ferry::TicketLimits, max_open_streams, max_streams,
                  "Streams open at once; OpenStream past it answers RESOURCE_EXHAUSTED.");
FERRY_OPTION_FLAG(ferry::TicketLimits, max_streams_per_client, max_streams_per_client,
                  "Streams open at once for one client address.");
FERRY_OPTION_FLAG(ferry::TicketLimits, max_stream_blocks, max_blocks,
                  "Blocks held by all open streams together (about 64 bytes each).");
