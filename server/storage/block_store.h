// BlockStore: resolves block ids to segments of shuffle data files, through one
// bounded cache of map outputs (a WeightedCache): each entry is a validated index
// together with its data file's open descriptor, so the index always describes the
// very file that is served. Where the files are is a ShuffleLayout (layout.h): Ferry's,
// every file of an app in `<data-dir>/<appId>/`, or a registered Spark executor's, its
// files hashed over the subdirectories of its local dirs, opened beneath the
// --spark-dir-roots they lie in.
//
// App ids are validated ([A-Za-z0-9_.-]{1,128}, not "." or "..") before they touch a
// path; nothing else from a request becomes part of a path except the decimal shuffle
// and map ids. The data dir is opened once; an app directory is opened beneath it and
// files beneath that, one path component at a time and never through a symlink, so
// swapping a directory for a symlink cannot lead outside the data dir. Index, checksum
// and data files must be regular files.
//
// A cached map output is revalidated on each use: if its index or data file no longer
// is the file that was loaded (deleted, or replaced by a map task run again), it is
// loaded again. DropStale(), which the server calls on a timer, drops entries whose
// data file was deleted or whose app directory is gone, so a deleted app's disk space
// is not pinned by the cache.
//
// Bounds: map outputs cached (each holds its data file open) and the index bytes they
// hold; and data files open in all, cached or held only by open streams
// (max_data_files): past it, a resolve that needs another file is RESOURCE_EXHAUSTED.
//
// Thread-safe (one mutex, never held across file I/O); used by the control plane,
// never on the data plane's per-block path.
#ifndef FERRY_SERVER_STORAGE_BLOCK_STORE_H_
#define FERRY_SERVER_STORAGE_BLOCK_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/block_id.h"
#include "common/shuffle_files.h"
#include "common/spark/layout.h"
#include "common/unique_fd.h"
#include "server/base/log_lines.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/storage/layout.h"
#include "server/storage/segment.h"
#include "server/storage/weighted_cache.h"

namespace ferry {

struct ResolvedBlock {
  StreamBlock block;
  // The map output's index: lengths and stored checksums of the block's partitions
  // [block.id.start_reduce_id, block.id.end_reduce_id).
  std::shared_ptr<const MapOutputIndex> index;
};

struct MapOutputInfo {
  int64_t map_id = 0;
  int32_t partitions = 0;
  uint64_t data_bytes = 0;
  ChecksumAlgorithm checksum_algorithm = ChecksumAlgorithm::kNone;
  // Why the map output cannot be read (its file named); the fields above are then 0.
  std::string error;
};

struct ShuffleInfo {
  int32_t shuffle_id = 0;
  std::vector<MapOutputInfo> map_outputs;  // by map id
};

// An app of the data dir, as ListApps() counts it.
struct AppInfo {
  std::string app_id;
  uint32_t shuffles = 0;
  uint32_t map_outputs = 0;  // index files
  uint64_t data_bytes = 0;   // of their data files, as stat() says
};

// All of `resolved`, or its first error.
absl::StatusOr<std::vector<ResolvedBlock>> AllResolved(
    std::vector<absl::StatusOr<ResolvedBlock>> resolved);

// The map-output cache's and open files' metric families (docs/operations.md).
#define FERRY_BLOCK_STORE_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                  \
  READ("ferry_map_output_cache_entries",                                                    \
       "Map outputs cached, each an index with its data "                                   \
       "file open.",                                                                        \
       kGauge, cached_map_outputs())                                                        \
  READ("ferry_data_files_open", "Data files open, cached or held by open streams.", kGauge, \
       open_files())                                                                        \
  READ("ferry_map_output_cache_hits_total", "Map output lookups answered from the cache.",  \
       kCounter, cache.hits)                                                                \
  READ("ferry_map_output_cache_misses_total", "Map output lookups that loaded from disk.",  \
       kCounter, cache.misses)                                                              \
  READ("ferry_map_output_cache_evictions_total",                                            \
       "Map outputs evicted to stay within the cache's bounds.", kCounter, cache.evictions)

class BlockStore {
 public:
  struct Options {
    std::string data_dir;
    // Map outputs cached, each holding its data file open (--max-open-files).
    size_t max_cached_map_outputs = 1024;
    // Data files open at once: cached, or evicted but still held by open streams.
    size_t max_data_files = 4096;
    // Index and checksum bytes the cache holds.
    uint64_t max_cached_index_bytes = uint64_t{256} << 20;

    // INVALID_ARGUMENT naming the flag of a field out of range.
    absl::Status Validate() const;
  };

  // Opens the data dir. INVALID_ARGUMENT when it is not a directory.
  static absl::StatusOr<std::unique_ptr<BlockStore>> Open(Options options);
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  // The layout of a Ferry app: its directory, opened beneath the data dir.
  // INVALID_ARGUMENT for a bad app id; NOT_FOUND naming the app (and its cached map
  // outputs dropped) when it has no directory here.
  absl::StatusOr<std::unique_ptr<FerryAppLayout>> FerryApp(absl::string_view app_id);

  // The blocks of the layout's map outputs, one result per key, in order, each failing
  // on its own (Spark fails a block's chunk, not the request): INVALID_ARGUMENT for a
  // bad reduce range (negative, empty, or past the map output's partitions); NOT_FOUND
  // naming the owner, the shuffle and the map output; DATA_LOSS for malformed files;
  // RESOURCE_EXHAUSTED when max_data_files are open. Each map output is looked up and
  // revalidated once. One of a layout that CommitsInTwoSteps() whose index and data
  // file disagree may be mid-commit: it is loaded once more after a moment before it is
  // reported.
  std::vector<absl::StatusOr<ResolvedBlock>> ResolveBlocks(const ShuffleLayout& layout,
                                                           absl::Span<const BlockId> keys);

  // Ferry's layout: ResolveBlocks() in the app's directory, and the first error.
  absl::StatusOr<std::vector<ResolvedBlock>> ResolveAll(absl::string_view app_id,
                                                        absl::Span<const BlockId> keys);
  absl::StatusOr<ResolvedBlock> Resolve(absl::string_view app_id, const BlockId& key);

  // Drops cached map outputs of the Spark app (one executor of it, or all when
  // `exec_id` is empty), whose files are about to go.
  void DropSpark(absl::string_view app_id, absl::string_view exec_id);

  // The shuffles the app has here, by shuffle id. NOT_FOUND for an unknown app;
  // RESOURCE_EXHAUSTED when max_data_files are open. A map output that cannot be read (a
  // damaged or unreadable file) is listed with its error, and logged (within a budget):
  // it spoils itself only.
  absl::StatusOr<std::vector<ShuffleInfo>> ListShuffles(absl::string_view app_id);
  // The apps of the data dir (directories with a valid app id, no symlink followed), by
  // id, at most `max_apps` (`truncated` says when there were more). Counts file names
  // and stat()s data files; reads no index.
  absl::StatusOr<std::vector<AppInfo>> ListApps(size_t max_apps, bool* truncated);

  // Drops cached map outputs whose data file is deleted or whose app directory is gone.
  // Returns how many.
  size_t DropStale();

  // Map outputs cached, and data files open (cached or held by streams).
  size_t cached_map_outputs() const;
  size_t open_files() const { return live_files_->load(std::memory_order_relaxed); }
  // Since the store opened: lookups of a map output answered from the cache, those that
  // loaded it from disk (absent, replaced or never seen), and entries evicted to stay
  // within the bounds.
  struct CacheCounts {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
  };
  CacheCounts cache_counts() const;
  // Its metric families (docs/operations.md): the map-output cache and open files.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;

 private:
  // (whose, shuffle, map).
  using Key = std::tuple<ShuffleOwner, int32_t, int64_t>;
  struct Entry;

  BlockStore(Options options, UniqueFd data_dir);
  // The map output, from the cache if its files are still the ones loaded.
  absl::StatusOr<std::shared_ptr<const Entry>> GetMapOutput(const ShuffleLayout& layout,
                                                            int32_t shuffle_id, int64_t map_id);
  absl::StatusOr<ResolvedBlock> ResolveIn(const std::shared_ptr<const Entry>& entry,
                                          const ShuffleLayout& layout, const BlockId& key) const;
  void DropLocked(ShuffleOwner::Kind kind, absl::string_view app_id, absl::string_view exec_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const UniqueFd data_dir_;
  // DataFile objects alive: the cache's, and those only streams still hold.
  const std::shared_ptr<std::atomic<size_t>> live_files_;
  mutable absl::Mutex mu_;
  WeightedCache<Key, std::shared_ptr<const Entry>> cache_ ABSL_GUARDED_BY(mu_);
  CacheCounts counts_ ABSL_GUARDED_BY(mu_);  // but for hits
  // A hit takes no second lock: counted apart from counts_.
  std::atomic<uint64_t> hits_{0};
  // Map outputs listed as unreadable: a client listing again and again fills no disk.
  LineBudget unreadable_log_{10};
};

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_BLOCK_STORE_H_
