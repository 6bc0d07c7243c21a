// ShuffleClient: fetches shuffle blocks from Ferry servers.
//
// The caller says where each block lives (as Spark's map-output tracker does) and where
// the bytes go (a BlockSink: a callback over a reusable buffer, per-block buffers,
// files written with splice, or discard). Fetch() fetches from every server at once, on
// fibers of the calling thread (one io_uring for the whole fetch): a fiber per stream
// opens it on the control plane (gRPC's callback API, so a server slow to answer holds
// back no other), fetches its blocks over the data plane and closes it, with bounds on
// the bytes requested but not yet received, in total and per server.
// Stored checksums are verified by default. The first error stops the fetch and names
// the block and the server. Streams are closed before Fetch() returns.
//
// Fetch() blocks the calling thread; sinks and callbacks run on it, one block at a
// time. A ShuffleClient may be shared by threads (each Fetch runs its own scheduler).
// Failures that another attempt can fix (a server down, a connection lost, a timeout,
// a busy server) are retried (FetchOptions::max_attempts), resuming from the byte
// reached and failing over to replicas; others (bad request, corruption) end the fetch
// at once.
#ifndef FERRY_CLIENT_SHUFFLE_CLIENT_H_
#define FERRY_CLIENT_SHUFFLE_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/block_sink.h"
#include "client/control_client.h"
#include "client/fetch_plan.h"

namespace ferry {

class FiberScheduler;

struct FetchOptions {
  // The blocks are this Spark executor's (registered with each server's Spark front
  // door), in Spark's layout under its local dirs; empty: Ferry's layout, the app's
  // directory under the data dir.
  std::string spark_exec_id;
  bool verify_checksums = true;
  // Bytes requested but not yet received, across all servers (split evenly among the
  // streams of a round), and at each server; a single block larger than a stream's
  // share is still fetched, alone. A server that is slow holds at most its share.
  uint64_t max_bytes_in_flight = uint64_t{64} << 20;
  uint64_t max_bytes_in_flight_per_server = uint64_t{64} << 20;
  // Deadline for each connect, send and receive on the data plane.
  absl::Duration io_timeout = absl::Seconds(60);
  // Rounds of fetching: after a retryable failure (server unreachable, connection
  // lost, timed out, busy) the blocks not yet delivered whole are asked again, from the
  // same server or, round by round, from the next replica. Blocks delivered whole are
  // never fetched twice; a block cut off mid-way is continued from the byte reached
  // when the sink kept its bytes (BlockSink::Kept), else fetched from its start.
  int max_attempts = 4;
  // A busy server (RESOURCE_EXHAUSTED: too many connections or streams) is asked again
  // for this long without using up attempts.
  absl::Duration busy_retry_time = absl::Seconds(30);
  // Pause before the second round; doubles each round up to max_retry_backoff. Each
  // pause is drawn from [0.5, 1.5) times that.
  absl::Duration retry_backoff = absl::Milliseconds(100);
  absl::Duration max_retry_backoff = absl::Seconds(2);
};

struct FetchStats {
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  size_t servers = 0;
  absl::Duration elapsed;  // the rounds' time, control calls and data, not the pauses
  // The error that ended each round that was tried again (a server that did not
  // answer, a connection lost, a busy server), in order: the failovers a fetch that
  // succeeded still went through.
  std::vector<absl::Status> retried;
};

class ShuffleClient {
 public:
  // How to reach the servers' control planes: RPC timeout, shared secret, TLS.
  explicit ShuffleClient(ControlClientOptions control) : control_(std::move(control)) {}
  // `auth_token`: the servers' shared secret, when they require one.
  explicit ShuffleClient(absl::Duration rpc_timeout = absl::Seconds(30),
                         Secret auth_token = Secret())
      : control_(rpc_timeout, std::move(auth_token)) {}

  ControlClient& control() { return control_; }

  // Fetches `blocks` of `app_id` into `sink`; the sink sees each block by its index in
  // `blocks`.
  absl::StatusOr<FetchStats> Fetch(const std::string& app_id,
                                   const std::vector<BlockLocation>& blocks, BlockSink& sink,
                                   const FetchOptions& options = {});

  // Each block in its own buffer, by index.
  absl::StatusOr<std::vector<std::string>> FetchToBuffers(const std::string& app_id,
                                                          const std::vector<BlockLocation>& blocks,
                                                          const FetchOptions& options = {});

 private:
  // One round, on `scheduler`: every block in `pending` (caller indexes) from
  // `server_of[i]`; marks delivered blocks in `done`. Returns the first error, if any,
  // and whether every error of the round was retryable.
  absl::Status FetchRound(FiberScheduler& scheduler, const std::string& app_id,
                          const std::vector<BlockLocation>& blocks,
                          const std::vector<size_t>& pending,
                          const std::vector<std::string>& server_of, BlockSink& sink,
                          const FetchOptions& options, std::vector<bool>& done, bool* retryable,
                          FetchStats& stats);

  ControlClient control_;
};

// The numeric host of "host:port" or "[v6]:port": "localhost" is 127.0.0.1, and a
// name is resolved to its first address.
absl::StatusOr<std::string> ResolveHost(const std::string& address);

}  // namespace ferry

#endif  // FERRY_CLIENT_SHUFFLE_CLIENT_H_
