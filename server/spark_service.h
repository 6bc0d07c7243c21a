// SparkShuffleService: what Spark's external shuffle service does for each RPC of its
// protocol (ExternalBlockHandler, Spark 3.5.0), for the Spark front door's connections
// (spark_connection.h): registering executors, opening streams of blocks, RemoveBlocks,
// GetLocalDirsForExecutors and DiagnoseCorruption.
//
// The calls are made from data-plane fibers. Their blocking parts (opening files and
// loading indexes, the registration state file's fsync, deletes, reading a partition
// to checksum it) run on the BlockingPool while the fiber waits, so a cold disk stalls
// one request, not the other connections of its thread.
//
// A stream's blocks are resolved when it is opened, each on its own: a block that
// cannot be served (an unregistered executor, a missing map output) fails its chunk
// only, with Spark's message, as Spark's lazy resolution does. Open streams hold their
// chunks against a server-wide bound (max_open_blocks).
//
// Thread-safe.
#ifndef FERRY_SERVER_SPARK_SERVICE_H_
#define FERRY_SERVER_SPARK_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/io/blocking_pool.h"
#include "common/spark_wire.h"
#include "server/block_store.h"
#include "server/spark_executors.h"
#include "server/ticket_registry.h"

namespace ferry {

// Chunks held by open streams, counted against the server-wide bound while held.
class ChunkLease {
 public:
  ChunkLease() = default;
  ChunkLease(std::shared_ptr<std::atomic<uint64_t>> counter, uint64_t count)
      : counter_(std::move(counter)), count_(count) {}
  ChunkLease(ChunkLease&& other) noexcept
      : counter_(std::move(other.counter_)), count_(other.count_) {}
  ChunkLease& operator=(ChunkLease&& other) noexcept;
  ChunkLease(const ChunkLease&) = delete;
  ChunkLease& operator=(const ChunkLease&) = delete;
  ~ChunkLease() { Release(); }

 private:
  void Release();
  std::shared_ptr<std::atomic<uint64_t>> counter_;
  uint64_t count_ = 0;
};

// An opened stream: chunk i is block i of the request, in the order the client sends
// its chunk requests.
struct SparkStream {
  int64_t id = 0;
  std::string app_id;
  std::string exec_id;
  std::vector<absl::StatusOr<StreamBlock>> chunks;
  ChunkLease lease;
};

class SparkShuffleService {
 public:
  struct Options {
    // Streams one connection may hold open (chunks not all fetched yet).
    size_t max_streams_per_connection = 1024;
    // Chunks of all open streams together (each costs about 100 bytes and may pin a
    // data file).
    uint64_t max_open_chunks = uint64_t{4} << 20;
    // Chunks in one stream.
    size_t max_chunks_per_stream = size_t{1} << 20;
    // How long a fiber waits for its blocking work.
    absl::Duration blocking_timeout = absl::Seconds(30);
  };

  // All three must outlive the service.
  SparkShuffleService(const Options& options, BlockStore* store, ExecutorRegistry* executors,
                      BlockingPool* pool);
  SparkShuffleService(const SparkShuffleService&) = delete;
  SparkShuffleService& operator=(const SparkShuffleService&) = delete;

  const Options& options() const { return options_; }
  // Chunks held by open streams now.
  uint64_t open_chunks() const { return open_chunks_->load(std::memory_order_relaxed); }
  ExecutorRegistry& executors() { return *executors_; }

  absl::Status Register(const spark::RegisterExecutor& registration);

  // A stream of the requested blocks. INVALID_ARGUMENT for a malformed request (Spark
  // fails the RPC for those); RESOURCE_EXHAUSTED past max_open_chunks. Per-block
  // failures are in the chunks.
  absl::StatusOr<SparkStream> OpenStream(const spark::FetchShuffleBlocks& request);
  absl::StatusOr<SparkStream> OpenStream(const spark::OpenBlocks& request);

  // Deletes the named rdd blocks' files; how many were deleted.
  absl::StatusOr<int32_t> RemoveBlocks(const spark::RemoveBlocks& request);

  // The LocalDirsForExecutors reply. NOT_FOUND (Spark's message) if any executor is not
  // registered.
  absl::StatusOr<std::string> LocalDirs(const spark::GetLocalDirsForExecutors& request);

  // Spark's CorruptionCause for the partition: 0 disk, 1 network, 2 unknown,
  // 3 checksum verified, 4 unsupported algorithm.
  absl::StatusOr<uint8_t> Diagnose(const spark::DiagnoseCorruption& request);

 private:
  absl::StatusOr<SparkStream> Open(const std::string& app_id, const std::string& exec_id,
                                   std::vector<BlockId> keys);

  const Options options_;
  BlockStore* const store_;
  ExecutorRegistry* const executors_;
  BlockingPool* const pool_;
  std::atomic<int64_t> next_stream_id_;
  const std::shared_ptr<std::atomic<uint64_t>> open_chunks_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_SERVICE_H_
