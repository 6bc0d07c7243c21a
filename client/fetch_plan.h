// How ShuffleClient::Fetch plans its rounds, as functions of their inputs: which
// location each block is asked at, how a server's blocks are split into streams, which
// failures another round can fix, and the pause before the next round.
#ifndef FERRY_CLIENT_FETCH_PLAN_H_
#define FERRY_CLIENT_FETCH_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/block_id.h"
#include "common/control_plane.h"

namespace ferry {

struct BlockLocation {
  std::string server;  // the control plane's "host:port"
  BlockId block;
  // Other servers holding the same block (Spark's replicas), tried in order when
  // `server` keeps failing.
  std::vector<std::string> replicas = {};
};

// Where the block is asked for after `failed_attempts` failed rounds: the server, then
// each replica in turn, wrapping around.
const std::string& LocationForAttempt(const BlockLocation& location, int failed_attempts);

// Errors another attempt (maybe at another server) can fix: unavailable, timed out,
// busy, aborted.
bool IsRetryable(const absl::Status& status);

// The streams of one round: `pending` (indexes into `blocks`) grouped by the server
// each is asked at (`server_of[i]`), servers in order, the caller's order within each,
// and a server's share split where it passes the blocks or partitions one OpenStream
// may name.
struct PlannedStream {
  std::string server;
  std::vector<size_t> indexes;
};
std::vector<PlannedStream> PlanStreams(const std::vector<BlockLocation>& blocks,
                                       const std::vector<size_t>& pending,
                                       const std::vector<std::string>& server_of,
                                       size_t max_blocks = kMaxBlocksPerStream,
                                       uint64_t max_partitions = kMaxPartitionsPerStream);

// The pause before each next round: `initial` first, doubling up to `max`, each drawn
// from [0.5, 1.5) times that so that clients turned away together do not all come back
// together.
class Backoff {
 public:
  Backoff(absl::Duration initial, absl::Duration max) : next_(initial), max_(max) {}
  absl::Duration Next(absl::BitGenRef random);

 private:
  absl::Duration next_;
  const absl::Duration max_;
};

}  // namespace ferry

#endif  // FERRY_CLIENT_FETCH_PLAN_H_
