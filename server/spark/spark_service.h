// SparkShuffleService: what Spark's external shuffle service does for each RPC of its
// protocol (ExternalBlockHandler, Spark 3.5.0), for the Spark front door's connections
// (spark_protocol.h): registering executors, opening streams of blocks, RemoveBlocks,
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
#ifndef FERRY_SERVER_SPARK_SPARK_SERVICE_H_
#define FERRY_SERVER_SPARK_SPARK_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/io/blocking_pool.h"
#include "common/spark/wire.h"
#include "server/base/clock.h"
#include "server/ops/client_budget.h"
#include "server/ops/metrics.h"
#include "server/ops/rate_limiter.h"
#include "server/ops/stats.h"
#include "server/spark/executors/spark_executors.h"
#include "server/spark/push/push_service.h"
#include "server/storage/block_store.h"
#include "server/storage/segment.h"

namespace ferry {

// Chunk i of a stream: block i of the request. `block.id` is always set; a block that
// cannot be served has no file and says why in `status` (shared by the chunks that fail
// for one cause, such as an unregistered executor or a missing map output).
struct SparkChunk {
  StreamBlock block;
  absl::Status status;
};

// An opened stream, whose chunks the client asks for in order.
struct SparkStream {
  int64_t id = 0;
  std::vector<SparkChunk> chunks;
  // A stream of cached RDD blocks (OpenBlocks of rdd_<rdd>_<split> ids): each chunk's
  // block.id holds (rdd, split) as (shuffle_id, map_id), and its file is opened only
  // when it is served (OpenRddBlock, in rdd_dirs, the executor's: null when it is not
  // registered), so a stream of a million such chunks holds no descriptor.
  bool rdd = false;
  std::shared_ptr<const spark::ExecutorDirs> rdd_dirs;
  // A stream of merged chunks (FetchShuffleBlockChunks): each chunk's block.id holds
  // (shuffle, merge id, reduce id, chunk id) as (shuffle_id, map_id, start_reduce_id,
  // end_reduce_id), for its name, shuffleChunk_<shuffle>_<merge>_<reduce>_<chunk>.
  bool merged = false;
  // When its chunks are let go of whether fetched or not.
  absl::Time expires;
  ClientBudget::Lease lease;
};

// The fetch service's metric families (docs/operations.md).
#define FERRY_SPARK_FETCH_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY) \
  READ("ferry_spark_open_chunks", "Chunks held by open Spark streams.", kGauge, open_chunks())

class SparkShuffleService {
 public:
  struct Options {
    // Streams one connection may hold open (chunks not all fetched yet).
    size_t max_streams_per_connection = 1024;
    // Chunks of all open streams together, and of one client's (by address). A chunk
    // costs 80 bytes, and a failed one also its cause's message when that is its own
    // (a block past its map output's partitions); chunks may pin data files.
    uint64_t max_open_chunks = uint64_t{4} << 20;
    uint64_t max_open_chunks_per_client = uint64_t{1} << 20;
    // How long a stream's chunks are held: a stream not fetched by then is closed
    // (Spark's clients fetch a stream's chunks as soon as they have its handle).
    absl::Duration stream_lifetime = absl::Minutes(10);
    // DiagnoseCorruption calls running at once (each reads a whole partition); more
    // are refused as busy.
    size_t max_diagnoses = 2;
    // The largest LocalDirsForExecutors reply.
    size_t max_local_dirs_reply_bytes = size_t{4} << 20;
    // Chunks in one stream.
    size_t max_chunks_per_stream = size_t{1} << 20;
    // How long a fiber waits for its blocking work.
    absl::Duration blocking_timeout = absl::Seconds(30);
    // Serve executors' cached RDD blocks (--spark-rdd-blocks), for applications with
    // spark.shuffle.service.fetch.rdd.enabled.
    bool serve_rdd_blocks = false;
    // Registrations that change something (each an fdatasynced append to the state
    // file, and a log line), in all and per application (new executors; changes to
    // registered ones have the same rates again, apart). Spark registers each
    // executor once, at its start; a node starting many at once is within the bursts.
    // One over its rate waits its turn for up to max_wait (Spark waits 5 s for the
    // answer), then is refused as busy.
    RateLimiter::Options registrations{.total = {.per_second = 500, .burst = 2000},
                                       .per_client = {.per_second = 50, .burst = 200},
                                       .max_wait = absl::Seconds(2)};

    // INVALID_ARGUMENT naming the flag of a field out of range.
    absl::Status Validate() const;
  };

  // All three must outlive the service, and `clock`, which streams' lifetimes and the
  // registration rate read. (The blocking pool's deadlines are real time: its workers
  // wait on the kernel's.)
  SparkShuffleService(const Options& options, BlockStore* store, ExecutorRegistry* executors,
                      BlockingPool* pool, const Clock& clock = Clock::Real());
  SparkShuffleService(const SparkShuffleService&) = delete;
  SparkShuffleService& operator=(const SparkShuffleService&) = delete;

  const Options& options() const { return options_; }
  // Push-based shuffle: executors' merge dirs go to `merger` (which must outlive the
  // service), and the protocol merges pushes with it. Call before serving.
  void EnablePush(PushService* push) { push_ = push; }
  PushService* push() const { return push_; }
  // Gives the push merger a registered executor's merge dirs (siblings of its local
  // dirs, named by its shuffle manager's push-based shuffle part); none without one.
  // PERMISSION_DENIED for a merge dir that another application's registration names
  // (or one inside or around it). Call on a blocking worker.
  absl::Status RegisterPush(const spark::RegisterExecutor& registration);
  // The same, of a service's parts, for a blocking worker's job (which may outlive the
  // service; the parts outlive the workers).
  static absl::Status RegisterPushWith(PushService* push, ExecutorRegistry* executors,
                                       const spark::RegisterExecutor& registration);
  const Clock& clock() const { return clock_; }
  // Chunks held by open streams now.
  uint64_t open_chunks() const { return open_chunks_.used(); }
  // Its metric families (docs/operations.md): the chunks open streams hold.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;
  ExecutorRegistry& executors() { return *executors_; }

  // Registers the executor for a peer at `peer_host`, `authenticated` (spark.authenticate)
  // as the registration's application or not. One that changes nothing costs a lookup;
  // one that is invalid is refused before anything else (ExecutorRegistry::Check); the
  // others run on a thread of their own, so that their fdatasync never holds a worker
  // that opens streams, within the rates of Options::registrations, charged to the
  // application (with the peer's host, unauthenticated): new executors and changes to
  // registered ones each have rates of their own, so changes never delay a new executor.
  absl::Status Register(spark::RegisterExecutor registration, const std::string& peer_host,
                        bool authenticated);

  // A stream of the requested blocks for `client` (the peer's address). INVALID_ARGUMENT
  // for a malformed request (Spark fails the RPC for those); RESOURCE_EXHAUSTED past
  // max_open_chunks or the client's share. Per-block failures are in the chunks.
  absl::StatusOr<SparkStream> OpenStream(const spark::FetchShuffleBlocks& request,
                                         const std::string& client);
  absl::StatusOr<SparkStream> OpenStream(const spark::OpenBlocks& request,
                                         const std::string& client);
  // Push-based shuffle's merged chunks (with a push merger): chunk i is the i-th chunk
  // id named, of its reduce id's finalized partition. A partition that cannot be read
  // fails the request (as in Spark); a chunk id outside it fails its chunk.
  absl::StatusOr<SparkStream> OpenStream(const spark::FetchShuffleBlockChunks& request,
                                         const std::string& client);
  // The file of a chunk of an RDD stream (SparkStream::rdd_dirs): `rdd_<rdd>_<split>` in
  // the executor's hashed dirs, whole, as Spark's resolver serves it. NOT_FOUND when
  // the executor has no such block; DATA_LOSS for anything but a regular file.
  absl::StatusOr<StreamBlock> OpenRddBlock(std::shared_ptr<const spark::ExecutorDirs> dirs,
                                           const BlockId& id);

  // Runs `fn` on the blocking pool, within the service's blocking timeout, while the
  // calling fiber waits: for work that may touch the disk (a secret file's read).
  template <typename T>
  absl::StatusOr<T> RunBlocking(absl::AnyInvocable<absl::StatusOr<T>()> fn) {
    return pool_->Call<T>(std::move(fn), absl::Now() + options_.blocking_timeout);
  }

  // Deletes the files the block ids name (rdd blocks, and map outputs' .data and .index
  // files, as Spark's driver names them when it removes a shuffle); how many were
  // deleted. Other ids are skipped.
  absl::StatusOr<int32_t> RemoveBlocks(const spark::RemoveBlocks& request);

  // The LocalDirsForExecutors reply: each executor named once (as Spark's map of them
  // does). NOT_FOUND (Spark's message) if any executor is not registered;
  // RESOURCE_EXHAUSTED if the reply would pass max_local_dirs_reply_bytes.
  absl::StatusOr<std::string> LocalDirs(const spark::GetLocalDirsForExecutors& request);

  // Spark's CorruptionCause for the partition: 0 disk, 1 network, 2 unknown,
  // 3 checksum verified, 4 unsupported algorithm, for `client` (the peer's address).
  // RESOURCE_EXHAUSTED past max_diagnoses;
  // DEADLINE_EXCEEDED when the partition is not read within blocking_timeout.
  absl::StatusOr<uint8_t> Diagnose(const spark::DiagnoseCorruption& request,
                                   const std::string& client);

 private:
  absl::StatusOr<SparkStream> Open(const std::string& app_id, const std::string& exec_id,
                                   std::vector<BlockId> keys, const std::string& client);
  absl::StatusOr<SparkStream> OpenRdd(const std::string& app_id, const std::string& exec_id,
                                      std::vector<BlockId> keys, const std::string& client);
  // The stream's id, lease and lifetime.
  SparkStream NewStream(std::vector<SparkChunk> chunks, ClientBudget::Lease lease);

  const Options options_;
  const Clock& clock_;
  BlockStore* const store_;
  ExecutorRegistry* const executors_;
  BlockingPool* const pool_;
  PushService* push_ = nullptr;
  std::atomic<int64_t> next_stream_id_;
  ClientBudget open_chunks_;
  ClientBudget diagnoses_;
  RateLimiter registration_rate_;
  RateLimiter registration_changes_rate_;
  // The registrations' one thread: they are serialized by the state file anyway.
  BlockingPool registration_pool_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_SPARK_SERVICE_H_
