// PushMerger: push-based shuffle's merges on this node, kept as Spark's
// RemoteBlockPushResolver keeps them (application attempts, shuffle merge ids, return
// codes), in files a reducer reads as Spark's (MergedPartition).
//
// A push is admitted or answered at once (Admit): a former attempt's is too old, an
// older merge id's stale, a finalized merge's too late, a map index merged already a
// duplicate (drained, answered success). An admitted push appends its block under its
// partition's turn (Partition::turn(): one appender at a time, in the order they asked,
// fibers of every thread waiting without blocking it), at Target(), then Commit()s it.
// Finalize() ends a merge and says what it holds; a newer merge id, RemoveShuffleMerge
// and the application's end delete a merge's files.
//
// Threads: no thread that serves connections waits on a disk here. The merger's maps
// (mu_) are never locked across I/O. A partition's lock is held across its files' I/O
// (creating them, closing a chunk, finalizing, deleting), by blocking workers only:
// Admit, TargetOf and Commit take it on a fiber only if it is free, and otherwise, or
// when they would write, say so (needs_worker, nullopt), and the caller asks again on
// a blocking worker (on_worker).
//
// Bounds: partitions with open files (3 descriptors each) and merged bytes per
// application; a push past either is refused (RESOURCE_EXHAUSTED), never queued. A push
// that finds its partition's turn taken waits for it with its block in memory, past the
// memory bounds in an unnamed file beside the partition (Defer), past those too it is
// answered as a collision; each bound is in all and per client.
#ifndef FERRY_SERVER_SPARK_PUSH_PUSH_MERGER_H_
#define FERRY_SERVER_SPARK_PUSH_PUSH_MERGER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/io/fiber_queue_lock.h"
#include "common/shuffle_files.h"
#include "common/spark/layout.h"
#include "common/spark/wire.h"
#include "common/unique_fd.h"
#include "server/base/log_lines.h"
#include "server/ops/client_budget.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/spark/push/merged_partition.h"
#include "server/storage/segment.h"
#include "server/storage/weighted_cache.h"

namespace ferry {

// The merger's metric families (docs/operations.md).
#define FERRY_PUSH_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                              \
  COUNTER_BY(blocks, "ferry_spark_push_blocks_total",                                            \
             "Blocks pushed to this node (push-based shuffle), by what became of them: merged, " \
             "a duplicate of a merged one, too late (its merge finalized), a collision (its "    \
             "partition's turn did not come in time, or the bytes waiting were past their "      \
             "bound), stale (an older merge id), too old an attempt, or refused with an error.", \
             "outcome", PushMerger::kOutcomes)                                                   \
  COUNTER(merged_bytes, "ferry_spark_push_merged_bytes_total",                                   \
          "Bytes of pushed blocks merged into merged partitions.")                               \
  READ("ferry_spark_push_admitted_bytes",                                                        \
       "Bytes of pushed blocks admitted to their merged files (or to a file to wait in) and "    \
       "not written yet: --spark-push-min-free-disk counts them as used.",                       \
       kGauge, admitted_bytes())                                                                 \
  COUNTER(index_reads, "ferry_spark_push_index_reads_total",                                     \
          "Finalized merged partitions' indexes read from disk; a partition read again while "   \
          "unchanged is found cached.")                                                          \
  READ("ferry_spark_push_open_partitions",                                                       \
       "Merged partitions being written (three open files each; "                                \
       "--spark-push-max-open-partitions).",                                                     \
       kGauge, open_partitions())                                                                \
  COUNTER_BY(deferred, "ferry_spark_push_deferred_total",                                        \
             "Pushed blocks that found their partition's turn taken and waited for it, by "      \
             "where their bytes waited: in memory, or on disk beside the partition (past "       \
             "--spark-push-max-deferred-memory).",                                               \
             "where", PushMerger::kDeferredTo)                                                   \
  READ_BY("ferry_spark_push_deferred_bytes",                                                     \
          "Bytes of pushed blocks waiting for their partition's turn now, by where they wait.",  \
          kGauge, "where",                                                                       \
          (std::vector<std::pair<std::string, double>>{                                          \
              {"memory", static_cast<double>(deferred_memory_.used())},                          \
              {"disk", static_cast<double>(deferred_disk_.used())}}))                            \
  GAUGE(waiting, "ferry_spark_push_waiting", "Pushed blocks waiting for their partition's turn.")

class PushMerger {
 public:
  // A merged partition being written holds its .data, .index and .meta open.
  static constexpr uint64_t kFilesPerPartition = 3;
  struct Options {
    // Merge pushed blocks (push-based shuffle); false: pushes are refused.
    bool enabled = false;
    // spark.shuffle.push.server.minChunkSizeInMergedShuffleFile.
    int64_t min_chunk_bytes = int64_t{2} << 20;
    // Partitions being merged at once, each with three open files: in all, and of one
    // application (so that one cannot take every one from the others).
    uint64_t max_open_partitions = 4096;
    uint64_t max_open_partitions_per_app = 1024;
    // Merged bytes one application may hold on this node.
    uint64_t max_app_bytes = uint64_t{64} << 30;
    // Merged partitions (being written or finalized, three files each) and shuffles one
    // application may hold on this node: what a finalize leaves behind is bounded too.
    uint64_t max_app_partitions = uint64_t{1} << 16;
    // Bytes a merge dir's file system keeps free: a block that would leave less is
    // refused (the executors' map outputs and everything else on the disk need room).
    uint64_t min_free_disk = uint64_t{5} << 30;
    // How old a sample of a file system's free space may be for a push on a serving
    // fiber to be admitted by it; older, the push samples anew on a blocking worker.
    absl::Duration free_space_staleness = absl::Seconds(1);
    // How long a push may take to arrive once it holds its partition (the others wait
    // for it), and how long one waits for its partition.
    absl::Duration push_timeout = absl::Seconds(30);
    // Bytes of blocks waiting for their partition's turn: in memory, then on disk; in
    // all and per client.
    uint64_t max_deferred_memory = uint64_t{256} << 20;
    uint64_t max_deferred_memory_per_client = uint64_t{32} << 20;
    uint64_t max_deferred_disk = uint64_t{8} << 30;
    uint64_t max_deferred_disk_per_client = uint64_t{1} << 30;
    // Where finalized merges are kept across restarts (the front door puts it in
    // --state-dir); empty: in memory only.
    std::string state_file;
    absl::Status Validate() const;
  };

  explicit PushMerger(Options options);
  // Reads the finalized merges the state file keeps, if any: an attempt registered
  // later (RegisterAttempt, as a restarted server learns its registrations) finds its
  // merges finalized, and reducers read them. The file is a journal: a line per
  // finalized merge, a line per attempt's merge dirs, and a line per merge (or
  // application) deleted since; other lines are skipped (a few logged, then counted). A file past
  // its bound is set aside (logged): the server starts without what it kept.
  absl::Status LoadState();
  // Another server may have rewritten the state file since this one last wrote it (a
  // hand-over that failed after the new server read it): rewritten whole from memory
  // before the next change.
  void RewriteStateBeforeNextChange() ABSL_LOCKS_EXCLUDED(state_mu_);
  // A hand-over to another server: writes the merges being written to `path` (their
  // partitions' progress; the files hold the rest), for TakeOpen() there. Call once no
  // push is under way (the connections are released). I/O.
  absl::Status HandOverOpen(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  // The server taking over: goes on with the merges HandOverOpen() wrote to `path`, after
  // the attempts were registered (RegisterAttempt), and deletes the file. A partition of
  // an attempt not registered here, over a bound, or whose files do not hold what was
  // written is dropped (logged): its pushes are read unmerged. How many partitions it
  // goes on with. I/O.
  absl::StatusOr<size_t> TakeOpen(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  // What LoadState() would read, changing nothing (ferry_server --check-config): a line
  // saying how many finalized merges it keeps, or why the server would not read it.
  static absl::StatusOr<std::string> CheckState(const std::string& path);
  const Options& options() const { return options_; }

  // An application attempt's merge dirs (where its executors said, beneath the roots
  // the registry serves). The first registration of an attempt sets them; a newer
  // attempt's replaces an older one's, whose merges are deleted; an older attempt's is
  // ignored (as in Spark). The state file keeps which they are: after a restart, until
  // ForgetUnclaimed, only a registration with the same merge dirs sets them (executors
  // of one host can have other dirs: two NodeManagers on it), so the merges are read
  // where they were written.
  void RegisterAttempt(const std::string& app_id, int32_t attempt_id,
                       std::shared_ptr<const spark::ExecutorDirs> merge_dirs);

  class Partition {
   public:
    FiberQueueLock& turn() { return turn_; }

   private:
    friend class PushMerger;
    // The data, index and meta files' names.
    ShuffleFileLocation Locate(const char* suffix) const;
    std::string app_id;
    int32_t shuffle_id = 0;
    int32_t merge_id = 0;
    int32_t reduce_id = 0;
    // Where the data file is (the dirs hold the descriptor `data_at` names).
    std::shared_ptr<const spark::ExecutorDirs> dirs;
    ShuffleFileLocation data_at;
    FiberQueueLock turn_;
    absl::Mutex mu;
    // Null while its files are being created, once they could not be (`broken`), and
    // once finalized or deleted.
    std::unique_ptr<MergedPartition> files ABSL_GUARDED_BY(mu);
    uint64_t dev ABSL_GUARDED_BY(mu) = 0;  // the data file's file system
    absl::Status broken ABSL_GUARDED_BY(mu);
    bool finalized ABSL_GUARDED_BY(mu) = false;  // or deleted
    int64_t final_size ABSL_GUARDED_BY(mu) = 0;
  };

  // A partition's turn, held: let go when destroyed, on whatever thread (a blocking
  // worker's job that nobody waits for any more lets it go too).
  // Bytes admitted to a file system and not written yet (ClaimDisk): given back, counted
  // as written, when the claim goes. Move-only; none when default-made.
  class DiskClaim {
   public:
    DiskClaim() = default;
    DiskClaim(PushMerger* merger, uint64_t dev, uint64_t bytes, bool write_inline)
        : merger_(merger), dev_(dev), bytes_(bytes), write_inline_(write_inline) {}
    DiskClaim(DiskClaim&& other) noexcept
        : merger_(std::exchange(other.merger_, nullptr)),
          dev_(other.dev_),
          bytes_(other.bytes_),
          write_inline_(other.write_inline_) {}
    DiskClaim& operator=(DiskClaim&& other) noexcept {
      if (this != &other) {
        Release();
        merger_ = std::exchange(other.merger_, nullptr);
        dev_ = other.dev_;
        bytes_ = other.bytes_;
        write_inline_ = other.write_inline_;
      }
      return *this;
    }
    // Whether, when the file system was sampled, the machine's dirty pages were low
    // (DirtyMemoryLow): a small write may then be done on the serving thread.
    bool write_inline() const { return write_inline_; }
    DiskClaim(const DiskClaim&) = delete;
    DiskClaim& operator=(const DiskClaim&) = delete;
    ~DiskClaim() { Release(); }

   private:
    void Release() {
      if (merger_ != nullptr) merger_->Written(dev_, bytes_);
      merger_ = nullptr;
    }
    PushMerger* merger_ = nullptr;
    uint64_t dev_ = 0;
    uint64_t bytes_ = 0;
    bool write_inline_ = false;
  };

  class Turn {
   public:
    Turn() = default;
    explicit Turn(std::shared_ptr<Partition> partition) : partition_(std::move(partition)) {}
    Turn(Turn&& other) noexcept = default;
    Turn& operator=(Turn&& other) noexcept {
      Release();
      partition_ = std::move(other.partition_);
      return *this;
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() { Release(); }
    bool held() const { return partition_ != nullptr; }
    void Release() {
      if (partition_ != nullptr) partition_->turn().Unlock();
      partition_.reset();
    }

   private:
    std::shared_ptr<Partition> partition_;
  };

  struct Admission {
    spark::PushReturnCode code = spark::PushReturnCode::kSuccess;
    // With kSuccess: the partition to append to; null for a duplicate (drain the block
    // and answer success).
    std::shared_ptr<Partition> partition;
    // Its turn, when this admission created the partition (its files are there now).
    Turn turn;
    // shufflePush_<shuffle>_<merge>_<map>_<reduce>, what Spark's answers name.
    std::string block_id;
    // Admit(on_worker = false) only: the push needs files created or an older merge's
    // deleted; nothing was done, ask again on a worker.
    bool needs_worker = false;
  };
  // NOT_FOUND for an application with no merge dirs here (never registered with
  // push-based shuffle); RESOURCE_EXHAUSTED past a bound; an error creating the files.
  absl::StatusOr<Admission> Admit(const spark::PushBlockStream& push, bool on_worker);

  // Under the partition's turn: where the block goes, or the code to answer instead
  // (the merge finalized or replaced meanwhile: too late or stale; the map merged
  // meanwhile: a duplicate, success).
  struct Target {
    spark::PushReturnCode code = spark::PushReturnCode::kSuccess;
    bool duplicate = false;
    // The data file, its descriptor shared with the partition (open until the writer is
    // done, should a finalize let the partition go meanwhile), and where the block goes.
    std::shared_ptr<const UniqueFd> fd;
    int64_t offset = 0;
    // The block's bytes, counted against its file system's free space until written.
    DiskClaim in_flight;
    // TargetOf(on_worker = false) only: the partition is busy (a finalize writing it),
    // or its file system's free space was last sampled too long ago: ask again on a
    // worker.
    bool needs_worker = false;
  };
  // RESOURCE_EXHAUSTED when `length` more bytes would pass the application's bound
  // (which appends in flight may pass by a block each); the error that kept the
  // partition's files from being created.
  absl::StatusOr<Target> TargetOf(Partition& partition, int32_t map_index, int64_t length,
                                  bool on_worker);
  // Under the partition's turn, after `length` bytes were written at the target
  // through `data_fd` (the target's): the block is merged (kSuccess), or too late (the
  // merge was finalized or deleted while it was written: what the write added past the
  // final size is cut). An error writing the chunk entries leaves the block merged.
  // Not on a worker: nullopt when it would write (a chunk closes, a late block is cut)
  // or the partition is busy, and nothing was done.
  std::optional<spark::PushReturnCode> Commit(Partition& partition, int32_t map_index,
                                              int64_t length, int data_fd, bool on_worker);

  // Ends a merge: INVALID_ARGUMENT for a former attempt's request, FAILED_PRECONDITION
  // for a stale or finalized merge id (Spark's words), NOT_FOUND for an unknown
  // application. A newer merge id than the one merged ends it empty (deleting the
  // older merge's files).
  absl::StatusOr<spark::MergeStatuses> Finalize(const spark::FinalizeShuffleMerge& request);
  // Deletes a merge's files (the merge id given, or every merge of the shuffle with -1).
  absl::Status Remove(const spark::RemoveShuffleMerge& request);
  // Deletes every merge of the application, closing the files of those still open, and
  // forgets it (its finalized merges leave the state file).
  void ApplicationEnded(const std::string& app_id);
  // After a restart's registrations (RegisterAttempt): forgets the finalized merges the
  // state file kept of applications no registration names (they ended meanwhile), or
  // whose registrations name none of their merge dirs; later registrations set the dirs
  // as the first of an attempt does.
  void ForgetUnclaimed();

  uint64_t open_partitions() const;
  // The application's current attempt's merge dirs (GetLocalDirsForExecutors of
  // spark::kShuffleMergerExecId); NOT_FOUND for an application without any here.
  absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> MergeDirs(
      const std::string& app_id) const;

  // A block that waits for its partition's turn (found taken): `bytes` from `client`
  // held in memory, or (`spill` valid) in an unnamed file (O_TMPFILE) in the partition's
  // directory, gone when closed. RESOURCE_EXHAUSTED past the bound.
  struct Deferral {
    ClientBudget::Lease lease;
    UniqueFd spill;
    DiskClaim in_flight;  // the spill's bytes, as Target's
  };
  absl::StatusOr<Deferral> DeferInMemory(const std::string& client, uint64_t bytes);
  // Opens the file: call on a blocking worker.
  absl::StatusOr<Deferral> DeferOnDisk(const Partition& partition, const std::string& client,
                                       uint64_t bytes);

  // The reduce side: a finalized partition's files as reducers read them. Its chunks are
  // [offsets[i], offsets[i + 1]) of `data`; `meta` holds one bitmap per chunk. Opens
  // files: call on a blocking worker. FAILED_PRECONDITION for a merge not finalized here
  // or a stale merge id (a newer one is held), NOT_FOUND for an unknown application or
  // a partition with nothing merged, DATA_LOSS for files that are not a merged
  // partition's (an index that is not offsets from 0 to the data's end, a meta file past
  // its bound).
  struct MergedFiles {
    std::shared_ptr<const DataFile> data;
    // Shared with the cache: never copied per request.
    std::shared_ptr<const std::vector<uint64_t>> offsets;
    std::shared_ptr<const DataFile> meta;
    int64_t meta_bytes = 0;
    int32_t chunks() const { return static_cast<int32_t>(offsets->size()) - 1; }
  };
  absl::StatusOr<MergedFiles> OpenMerged(const std::string& app_id, int32_t shuffle_id,
                                         int32_t merge_id, int32_t reduce_id) const;

  // What became of pushes, for the metrics: by the code answered (a duplicate apart from
  // a merge), or refused with an error; bytes merged; pushes waiting for a turn.
  enum class Outcome {
    kMerged = 0,
    kDuplicate,
    kTooLate,
    kCollision,
    kStale,
    kTooOldAttempt,
    kRefused,
  };
  static constexpr std::array<const char*, 7> kOutcomes = {
      "merged", "duplicate", "too_late", "collision", "stale", "too_old_attempt", "refused"};
  static constexpr std::array<const char*, 2> kDeferredTo = {"memory", "disk"};
  struct PushStats {
    FERRY_STATS_FIELDS(FERRY_PUSH_STATS)
  };
  void Count(Outcome outcome, uint64_t merged_bytes = 0) {
    stats_.blocks[static_cast<size_t>(outcome)].Add();
    stats_.merged_bytes.Add(merged_bytes);
  }
  static Outcome OutcomeOf(spark::PushReturnCode code);
  // Held while a push waits for its partition's turn.
  class Waiting {
   public:
    explicit Waiting(PushMerger& merger) : merger_(merger) { merger_.stats_.waiting.Add(); }
    ~Waiting() { merger_.stats_.waiting.Sub(); }
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    PushMerger& merger_;
  };
  // Its metric families (docs/operations.md).
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;

 private:
  struct Shuffle {
    int32_t merge_id = 0;
    bool finalized = false;
    bool kept = false;  // a line of the state file names it (finalized with data, or loaded)
    // Being written; once finalized, only the reduce ids of those that hold blocks are
    // kept (as Spark's resolver keeps them), for their files' deletion.
    absl::flat_hash_map<int32_t, std::shared_ptr<Partition>> partitions;
    std::vector<int32_t> finalized_reduce_ids;
    uint64_t bytes = 0;  // merged
    // Against Options::max_app_partitions: itself and its partitions.
    uint64_t cost = 1;
  };
  struct App {
    int32_t attempt_id = -1;
    std::shared_ptr<const spark::ExecutorDirs> merge_dirs;
    absl::flat_hash_map<int32_t, Shuffle> shuffles;
    uint64_t bytes = 0;
    uint64_t cost = 0;  // its shuffles' costs
  };
  // RESOURCE_EXHAUSTED when the application holds max_app_partitions already.
  absl::Status CostBoundLocked(const std::string& app_id, const App& app) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The application and shuffle whose merge holds `partition` still; nulls once it was
  // finalized away, deleted or replaced.
  std::pair<App*, Shuffle*> HolderLocked(const Partition& partition)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When `bytes` more written to file system `dev` (that of `fd`, a file of the
  // partition at `at`) leave it Options::min_free_disk free: the bytes, counted as
  // admitted until the handle goes; RESOURCE_EXHAUSTED otherwise. What is free is the
  // last sample of the file system (fstatvfs, taken on a worker: never on a serving
  // fiber, and never under a lock) less what was written since and what is admitted.
  // Not on a worker, a sample older than Options::free_space_staleness: nullopt, nothing
  // done (ask again on a worker, which samples it anew).
  absl::StatusOr<std::optional<DiskClaim>> ClaimDisk(uint64_t dev, int fd, uint64_t bytes,
                                                     const ShuffleFileLocation& at, bool on_worker);
  // One line of TakeOpen's file: true for a partition taken, false for a merge's line; an
  // error says why a partition is dropped.
  absl::StatusOr<bool> TakeOpenLine(absl::string_view line) ABSL_LOCKS_EXCLUDED(mu_);
  // Opens a partition's files as another server left them and goes on from `progress`.
  absl::Status ReopenFiles(Partition& partition, MergedPartition::Progress progress)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Counts `n` of `app_id`'s open partitions closed.
  void ClosedLocked(const std::string& app_id, uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `shuffle`'s partitions out of the maps (a finalized one's as partitions made
  // for their deletion), into *out, to be deleted; a finalized merge's deletion goes in
  // *records, for the state file.
  void Detach(const std::string& app_id, int32_t shuffle_id, App& app, Shuffle& shuffle,
              std::vector<std::shared_ptr<Partition>>* out, std::string* records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes and deletes detached partitions' files (I/O: on a blocking worker or a thread
  // of its own).
  void DeleteFiles(const std::vector<std::shared_ptr<Partition>>& partitions)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The admission of `push`, as far as the maps say: a partition made for it is
  // returned in *created, its turn held, its files still to be made; partitions of an
  // older merge are detached into *deleted, and *save says the state file changed.
  absl::StatusOr<Admission> AdmitLocked(const spark::PushBlockStream& push, bool on_worker,
                                        std::shared_ptr<Partition>* created,
                                        std::vector<std::shared_ptr<Partition>>* deleted,
                                        std::string* records) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates a partition's files (I/O), and gives them to it unless it was finalized or
  // deleted meanwhile (then they go again); the error otherwise, kept in the partition.
  absl::Status CreateFiles(Partition& partition) ABSL_LOCKS_EXCLUDED(mu_);

  // A finalized merge, as the state file keeps it.
  struct Finalized {
    std::string app_id;
    int32_t attempt_id;
    int32_t shuffle_id;
    int32_t merge_id;
  };
  // The offsets of a finalized partition's index, while the index is this file.
  struct IndexKey {
    std::string app_id;
    int32_t shuffle_id, merge_id, reduce_id;
    template <typename H>
    friend H AbslHashValue(H h, const IndexKey& k) {
      return H::combine(std::move(h), k.app_id, k.shuffle_id, k.merge_id, k.reduce_id);
    }
    bool operator==(const IndexKey&) const = default;
  };
  struct CachedIndex {
    uint64_t dev, ino;
    int64_t size, mtime_ns;
    std::shared_ptr<const std::vector<uint64_t>> offsets;
  };
  // Drops the application's cached indexes.
  void ForgetIndexes(const std::string& app_id) ABSL_LOCKS_EXCLUDED(index_mu_);

  // Appends `records` (lines: finalized merges, deletions) to the state file and syncs
  // it; rewrites it whole from what is finalized now (and what was loaded and not yet
  // claimed) once it holds more than twice that, or after a failed write. Errors are
  // logged (within a budget): the merges still serve until a restart. I/O: on a blocking
  // worker or a thread of its own.
  void AppendState(const std::string& records) ABSL_LOCKS_EXCLUDED(mu_, state_mu_);
  // The state file's whole text now: a line per finalized merge.
  std::string StateTextLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  // Orders the state file's writes; taken before mu_, never by a fiber.
  absl::Mutex state_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  UniqueFd state_fd_ ABSL_GUARDED_BY(state_mu_);  // appended to; invalid: rewrite first
  uint64_t state_lines_ ABSL_GUARDED_BY(state_mu_) = 0;
  LineBudget state_log_{2};
  // Bytes admitted to every file system and not written yet.
  uint64_t admitted_bytes() const ABSL_LOCKS_EXCLUDED(disk_mu_);
  // A claim's bytes on file system `dev` are written (or given up).
  void Written(uint64_t dev, uint64_t bytes) ABSL_LOCKS_EXCLUDED(disk_mu_);
  // Each file system's (by device) free bytes when last sampled, the bytes written to
  // it since, and those admitted and not written yet.
  struct Disk {
    uint64_t available = 0;
    absl::Time sampled = absl::InfinitePast();
    uint64_t written = 0;
    uint64_t in_flight = 0;
    bool dirty_memory_low = false;
  };
  mutable absl::Mutex disk_mu_;
  absl::flat_hash_map<uint64_t, Disk> disks_ ABSL_GUARDED_BY(disk_mu_);
  mutable absl::Mutex mu_;
  // Loaded from the state file, for attempts not registered yet.
  std::vector<Finalized> loaded_ ABSL_GUARDED_BY(mu_);
  // The merge dirs (paths) of each application's attempt as the state file kept them,
  // until ForgetUnclaimed.
  struct KeptDirs {
    int32_t attempt_id;
    std::vector<std::string> paths;
  };
  absl::flat_hash_map<std::string, KeptDirs> loaded_dirs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, App> apps_ ABSL_GUARDED_BY(mu_);
  uint64_t open_partitions_ ABSL_GUARDED_BY(mu_) = 0;
  // By application (its partitions' files stay open past its end until they are closed).
  absl::flat_hash_map<std::string, uint64_t> open_by_app_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex index_mu_;
  mutable WeightedCache<IndexKey, std::shared_ptr<const CachedIndex>> indexes_
      ABSL_GUARDED_BY(index_mu_){4096, uint64_t{64} << 20};
  ClientBudget deferred_memory_;
  ClientBudget deferred_disk_;
  // Written from const reads too (an index read counts).
  mutable PushStats stats_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_PUSH_PUSH_MERGER_H_
