// TicketRegistry: the streams the control plane has opened, by ticket.
//
// A ticket is 128 bits from the kernel's CSPRNG (getrandom), bound to one stream's
// resolved blocks and expiring at a fixed time. The data plane serves only what a live
// ticket names; it never takes a file name from the wire.
//
// What open streams may hold is bounded three ways, counting live streams only (an
// expired one is dropped before any limit is checked): streams in all, streams per
// client (the peer's address, without the port), and blocks across all streams. A
// stream is checked against the limits and inserted under one lock.
//
// Thread-safe: gRPC threads register and close, data-plane threads look up (once per
// request frame, never per block). A looked-up stream stays valid for as long as the
// caller holds it, even if it is closed or expires meanwhile.
#ifndef FERRY_SERVER_TICKETS_TICKET_REGISTRY_H_
#define FERRY_SERVER_TICKETS_TICKET_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/block_id.h"
#include "common/checksum.h"
#include "common/frame_header.h"
#include "server/base/clock.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/storage/segment.h"

namespace ferry {

struct Stream {
  std::string app_id;
  // The Spark executor whose files it reads (resolved through its dirs); empty for
  // Ferry's own layout.
  std::string spark_exec_id;
  // Who opened it (the peer's address without its port), for the per-client limit.
  std::string client;
  std::vector<StreamBlock> blocks;
  absl::Time expires;
};

// How errors name a block of a stream: "shuffle 3 map 7 reduce [0, 4) of app app-0".
std::string BlockName(const Stream& stream, const StreamBlock& block);

struct TicketLimits {
  size_t max_streams = 100000;
  size_t max_streams_per_client = 10000;
  // Blocks held by all open streams together (each costs about 64 bytes).
  uint64_t max_blocks = uint64_t{4} << 20;

  // INVALID_ARGUMENT naming the flag of a field out of range.
  absl::Status Validate() const;
};

// The registry's metric families (docs/operations.md).
#define FERRY_TICKET_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY) \
  READ("ferry_streams_open", "Streams (tickets) the control plane has open.", kGauge, size())

class TicketRegistry {
 public:
  // `clock` tells which streams have expired; it must outlive the registry.
  explicit TicketRegistry(TicketLimits limits = {}, const Clock& clock = Clock::Real())
      : limits_(limits), clock_(clock) {}
  TicketRegistry(const TicketRegistry&) = delete;
  TicketRegistry& operator=(const TicketRegistry&) = delete;

  // Registers `stream` under a fresh ticket, unless a limit would be passed:
  // RESOURCE_EXHAUSTED (retry later) naming the limit.
  absl::StatusOr<Ticket> Register(std::shared_ptr<const Stream> stream);
  // Registers `stream` under `ticket`, one a server handing over issued: as Register(),
  // and ALREADY_EXISTS for a ticket registered here.
  absl::Status Adopt(const Ticket& ticket, std::shared_ptr<const Stream> stream);
  // The live streams, for a hand-over.
  std::vector<std::pair<Ticket, std::shared_ptr<const Stream>>> Live() const;

  // The live stream for `ticket`. UNAUTHENTICATED for a ticket that is unknown, closed
  // or expired.
  absl::StatusOr<std::shared_ptr<const Stream>> Find(const Ticket& ticket) const;

  // Ends the stream; returns whether it was open (not yet expired).
  bool Close(const Ticket& ticket);

  // Drops the streams that expired by now. Register() does it too; a server calls it
  // on a timer as well, so that an idle server lets go of expired streams' files.
  void SweepExpired();

  // What streams expire by: a stream's `expires` is this clock's time plus its TTL.
  const Clock& clock() const { return clock_; }

  // Live streams, and the blocks all registered streams hold.
  size_t size() const;
  // Its metric families (docs/operations.md): the streams open.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;
  uint64_t blocks() const;

 private:
  struct TicketHash {
    size_t operator()(const Ticket& t) const;
  };
  void SweepExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts `stream` under `ticket` unless a limit would be passed.
  absl::Status InsertLocked(const Ticket& ticket, std::shared_ptr<const Stream> stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const Ticket& ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TicketLimits limits_;
  const Clock& clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Ticket, std::shared_ptr<const Stream>, TicketHash> streams_
      ABSL_GUARDED_BY(mu_);
  // Every stream in streams_ by expiry, soonest first.
  absl::btree_set<std::pair<absl::Time, Ticket>> by_expiry_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> per_client_ ABSL_GUARDED_BY(mu_);
  uint64_t blocks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ferry

#endif  // FERRY_SERVER_TICKETS_TICKET_REGISTRY_H_
