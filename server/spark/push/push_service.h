// PushService: push-based shuffle on this node, one unit with one entry point per thing
// Spark asks of a merger. A pushed block comes in through Upload() (the block's meta
// and a body to read from the connection; Spark's return code out); FinalizeShuffleMerge,
// RemoveShuffleMerge, an application's end and the reduce side's reads (merged chunks,
// their bitmaps) through the calls below. Everything between is the unit's own: the
// merges' state (PushMerger), a partition's turn, a block waiting for it (in memory, then
// in a file beside the partition), the hops between the serving fiber and a blocking
// worker, the bounds, the metrics and the descriptors it needs.
//
// Threads: the calls are made from data-plane fibers (Upload, Finalize, Remove, the
// reads) and from other threads (ApplicationEnded, RegisterAttempt: those may touch the
// disk). A fiber never waits on a disk or a lock held across I/O: such work runs on the
// blocking pool, within the application's share of its workers.
#ifndef FERRY_SERVER_SPARK_PUSH_PUSH_SERVICE_H_
#define FERRY_SERVER_SPARK_PUSH_PUSH_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/io/blocking_pool.h"
#include "common/spark/wire.h"
#include "server/ops/metrics.h"
#include "server/spark/push/push_merger.h"
#include "server/storage/segment.h"

namespace ferry {

// The connection's side of one upload: the body that follows its frame. Implemented by
// the protocol over its connection.
class PushBody {
 public:
  virtual ~PushBody() = default;
  // As ConnectionCore::ReceiveBody, ReceiveBodyToFile and CopyFile.
  virtual bool Receive(uint64_t bytes, absl::Time deadline,
                       absl::FunctionRef<absl::Status(absl::string_view)> sink,
                       absl::Status* sink_status) = 0;
  virtual bool ReceiveToFile(uint64_t bytes, absl::Time deadline, int fd, int64_t offset,
                             bool write_inline, absl::Status* sink_status) = 0;
  virtual absl::Status CopyFile(int in_fd, int64_t in_offset, int out_fd, int64_t out_offset,
                                uint64_t bytes, absl::Time deadline) = 0;
  // Sends the answers held back for pipelined pushes: this upload is about to wait.
  virtual void Flush() = 0;
  // The peer's host: its share of the per-client bounds.
  virtual const std::string& peer_host() = 0;
  // A failure the answer does not carry (the disk a block was to wait on), for the log.
  virtual void LogFailure(const absl::Status& status) = 0;
};

class PushService {
 public:
  // `pool` (the front door's blocking workers) must outlive the service; a fiber waits
  // for a worker's job at most `blocking_timeout`.
  PushService(const PushMerger::Options& options, BlockingPool* pool,
              absl::Duration blocking_timeout);
  PushService(const PushService&) = delete;
  PushService& operator=(const PushService&) = delete;

  const PushMerger::Options& options() const { return merger_.options(); }
  // The descriptors the unit holds at most: three per partition being written.
  static uint64_t DescriptorsFor(uint64_t max_open_partitions) {
    return max_open_partitions * PushMerger::kFilesPerPartition;
  }

  // What Upload() answers: Spark's return code (naming the block unless a success) or an
  // error (an RpcFailure); whether the body was read whole (if not, the connection is
  // lost), and whether the connection closes after the answer (a former attempt's push,
  // as Spark's service closes it).
  struct Answer {
    absl::StatusOr<spark::PushReturnCode> code = spark::PushReturnCode::kSuccess;
    std::string block_id;
    bool connected = true;
    bool close = false;
  };
  // One pushed block of `length` bytes, its body read from `body`: merged into its
  // partition, or drained and answered. Call from a fiber.
  Answer Upload(const spark::PushBlockStream& push, uint64_t length, PushBody& body);

  // FinalizeShuffleMerge, RemoveShuffleMerge: on a blocking worker, from a fiber.
  absl::StatusOr<spark::MergeStatuses> Finalize(const spark::FinalizeShuffleMerge& request);
  absl::Status Remove(const spark::RemoveShuffleMerge& request);

  // The reduce side, from a fiber. A chunk of a FetchShuffleBlockChunks: chunk i is the
  // i-th chunk id named, of its reduce id's finalized partition; `block.id` holds (shuffle,
  // merge id, reduce id, chunk id) as (shuffle_id, map_id, start_reduce_id, end_reduce_id).
  // A partition that cannot be read fails the request (as in Spark); a chunk id outside
  // it fails its chunk. A reduce id named again is the same partition, opened once; the
  // work stops when the caller has left.
  struct Chunk {
    StreamBlock block;
    absl::Status status;
  };
  absl::StatusOr<std::vector<Chunk>> Chunks(const spark::FetchShuffleBlockChunks& request);
  // A finalized partition's chunk bitmaps (MergedBlockMetaRequest).
  absl::StatusOr<PushMerger::MergedFiles> Meta(const spark::MergedBlockMetaRequest& request);

  // From any thread but a serving fiber (they may touch the disk):
  // Reads the finalized merges kept across restarts (PushMerger::LoadState).
  absl::Status LoadState() { return merger_.LoadState(); }
  // An application attempt's merge dirs, from its registration (PushMerger).
  void RegisterAttempt(const std::string& app_id, int32_t attempt_id,
                       std::shared_ptr<const spark::ExecutorDirs> merge_dirs) {
    merger_.RegisterAttempt(app_id, attempt_id, std::move(merge_dirs));
  }
  void ForgetUnclaimed() { merger_.ForgetUnclaimed(); }
  void RewriteStateBeforeNextChange() { merger_.RewriteStateBeforeNextChange(); }
  absl::Status HandOverOpen(const std::string& path) { return merger_.HandOverOpen(path); }
  absl::StatusOr<size_t> TakeOpen(const std::string& path) { return merger_.TakeOpen(path); }
  void ApplicationEnded(const std::string& app_id) { merger_.ApplicationEnded(app_id); }
  absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> MergeDirs(
      const std::string& app_id) const {
    return merger_.MergeDirs(app_id);
  }

  uint64_t open_partitions() const { return merger_.open_partitions(); }
  // Its metric families (docs/operations.md).
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const { merger_.AppendMetrics(out); }

 private:
  class Uploading;
  // Runs `fn` on a blocking worker, in `app_id`'s share of them, while the fiber waits.
  template <typename T>
  absl::StatusOr<T> OnWorker(const std::string& app_id, absl::AnyInvocable<absl::StatusOr<T>()> fn);

  PushMerger merger_;
  BlockingPool* const pool_;
  const absl::Duration blocking_timeout_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_PUSH_PUSH_SERVICE_H_
