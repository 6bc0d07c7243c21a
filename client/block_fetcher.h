// FetchStream: fetches every block of one open stream over one data-plane connection,
// on a fiber. Requests are pipelined: it keeps asking for the next run of blocks while
// the bytes requested but not yet received stay under a budget, so the server always
// has work queued and memory stays bounded. Every header is checked against what was
// asked (block index, offset, length) before its payload is read.
#ifndef FERRY_CLIENT_BLOCK_FETCHER_H_
#define FERRY_CLIENT_BLOCK_FETCHER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/block_sink.h"
#include "common/block_id.h"
#include "proto/ferry.pb.h"

namespace ferry {

struct StreamPlan {
  // The control plane's address, for errors.
  std::string server;
  // Where the data plane listens (IPv4).
  std::string data_host;
  uint16_t data_port = 0;
  ferry::v1::StreamHandle handle;
  // The caller's index of each of the stream's blocks.
  std::vector<size_t> caller_index;
};

struct FetchStreamOptions {
  bool verify_checksums = true;
  uint64_t max_bytes_in_flight = uint64_t{64} << 20;
  // Deadline for each connect, send and receive.
  absl::Duration io_timeout = absl::Seconds(60);
};

struct StreamProgress {
  // The stream's leading blocks delivered whole to the sink (all of them on success),
  // so a caller can resume after the last whole block.
  size_t whole_blocks = 0;
  // Set when the fetch failed because a partition's bytes failed their stored
  // checksum: the partition, and the checksum of what was received.
  std::optional<BlockId> corrupt_partition;
  uint32_t corrupt_received_checksum = 0;
};

// Call from a fiber. Errors name the block and the server.
absl::Status FetchStream(const StreamPlan& plan, BlockSink& sink, const FetchStreamOptions& options,
                         StreamProgress* progress);

// "shuffle 1 map 2 reduce 3 from server host:port" (or "reduce [a, b)").
std::string DescribeBlock(const ferry::v1::BlockId& id, const std::string& server);

}  // namespace ferry

#endif  // FERRY_CLIENT_BLOCK_FETCHER_H_
