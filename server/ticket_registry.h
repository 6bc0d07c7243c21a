// TicketRegistry: the streams the control plane has opened, by ticket.
//
// A ticket is 128 bits from the kernel's CSPRNG (getrandom), bound to one stream's
// resolved blocks and expiring at a fixed time. The data plane serves only what a live
// ticket names; it never takes a file name from the wire.
//
// Thread-safe: gRPC threads register and close, data-plane threads look up (once per
// request frame, never per block). A looked-up stream stays valid for as long as the
// caller holds it, even if it is closed meanwhile.
#ifndef FERRY_SERVER_TICKET_REGISTRY_H_
#define FERRY_SERVER_TICKET_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/frame_header.h"
#include "common/unique_fd.h"

namespace ferry {

// An open data file, shared by every stream that serves from it.
struct DataFile {
  std::string path;
  UniqueFd fd;
};

// One block of a stream, resolved to a segment of a data file.
struct StreamBlock {
  std::shared_ptr<const DataFile> file;
  uint64_t offset = 0;
  uint64_t length = 0;
  // The block's name in errors, e.g. "shuffle 3 map 7 reduce [0, 4)".
  std::string name;
  // Set when the block is one partition with a stored checksum: travels in the header.
  bool has_checksum = false;
  ChecksumAlgorithm checksum_algorithm = ChecksumAlgorithm::kNone;
  uint32_t checksum = 0;
};

struct Stream {
  std::string app_id;
  std::vector<StreamBlock> blocks;
  absl::Time expires;
};

class TicketRegistry {
 public:
  TicketRegistry() = default;
  TicketRegistry(const TicketRegistry&) = delete;
  TicketRegistry& operator=(const TicketRegistry&) = delete;

  // Registers `stream` under a fresh ticket. Expired streams are swept here too.
  absl::StatusOr<Ticket> Register(std::shared_ptr<const Stream> stream);

  // The live stream for `ticket`. UNAUTHENTICATED for a ticket that is unknown or
  // closed, and for one that expired (swept at the next Register()).
  absl::StatusOr<std::shared_ptr<const Stream>> Find(const Ticket& ticket, absl::Time now) const;

  // Ends the stream; returns whether it was open.
  bool Close(const Ticket& ticket);

  size_t size() const;

 private:
  struct TicketHash {
    size_t operator()(const Ticket& t) const;
  };
  void SweepExpiredLocked(absl::Time now);

  mutable std::mutex mu_;
  absl::flat_hash_map<Ticket, std::shared_ptr<const Stream>, TicketHash> streams_;  // guarded by mu_
  absl::Time next_sweep_ = absl::InfinitePast();  // guarded by mu_
};

}  // namespace ferry

#endif  // FERRY_SERVER_TICKET_REGISTRY_H_
