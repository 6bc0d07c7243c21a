// BlockStore: resolves block ids to segments of shuffle data files under
// `<data-dir>/<appId>/`, with two bounded caches: validated map-output indexes and open
// data-file descriptors.
//
// App ids are validated ([A-Za-z0-9_.-]{1,128}, not "." or "..") before they touch a
// path; nothing else from a request becomes part of a path except the decimal shuffle
// and map ids. Data files are opened with O_NOFOLLOW, and an app directory that is a
// symlink is refused, so a request never leaves the data dir.
//
// Map outputs are immutable once their index is in place (Spark gives each map attempt
// its own id), so cached indexes are not revalidated. Evicting a data file from the
// cache drops the cache's reference only: streams still using it keep it open.
//
// Thread-safe (one mutex); used by the control plane, never on the data plane's
// per-block path.
#ifndef FERRY_SERVER_BLOCK_STORE_H_
#define FERRY_SERVER_BLOCK_STORE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/block_id.h"
#include "common/checksum.h"
#include "common/shuffle_files.h"
#include "server/ticket_registry.h"

namespace ferry {

struct PartitionInfo {
  uint64_t length = 0;
  uint32_t checksum = 0;
};

struct ResolvedBlock {
  StreamBlock block;
  // Stored checksums per partition (empty when none were stored).
  ChecksumAlgorithm checksum_algorithm = ChecksumAlgorithm::kNone;
  std::vector<PartitionInfo> partitions;
};

struct MapOutputInfo {
  int64_t map_id = 0;
  int32_t partitions = 0;
  uint64_t data_bytes = 0;
  ChecksumAlgorithm checksum_algorithm = ChecksumAlgorithm::kNone;
};

struct ShuffleInfo {
  int32_t shuffle_id = 0;
  std::vector<MapOutputInfo> map_outputs;  // by map id
};

class BlockStore {
 public:
  struct Options {
    std::string data_dir;
    size_t max_open_files = 1024;
    size_t max_cached_indexes = 16384;
  };

  explicit BlockStore(Options options);
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  static bool IsValidAppId(absl::string_view app_id);

  // INVALID_ARGUMENT for a bad app id or reduce range (negative, empty, or past the map
  // output's partitions); NOT_FOUND naming the app, or the shuffle and map output;
  // DATA_LOSS for malformed files.
  absl::StatusOr<ResolvedBlock> Resolve(absl::string_view app_id, const BlockId& key);
  // Resolve() for each of `keys` in order, checking the app once; the first error.
  absl::StatusOr<std::vector<ResolvedBlock>> ResolveAll(absl::string_view app_id,
                                                        absl::Span<const BlockId> keys);

  // The shuffles the app has here, by shuffle id. NOT_FOUND for an unknown app.
  absl::StatusOr<std::vector<ShuffleInfo>> ListShuffles(absl::string_view app_id);

  size_t open_files() const;

 private:
  using IndexKey = std::tuple<std::string, int32_t, int64_t>;

  absl::Status CheckApp(absl::string_view app_id) const;
  // Resolve() without the app check.
  absl::StatusOr<ResolvedBlock> ResolveInApp(absl::string_view app_id, const BlockId& key);
  absl::StatusOr<std::shared_ptr<const MapOutputIndex>> GetIndex(absl::string_view app_id,
                                                                 int32_t shuffle_id,
                                                                 int64_t map_id);
  absl::StatusOr<std::shared_ptr<const DataFile>> GetFile(const std::string& path);

  Options options_;
  mutable std::mutex mu_;
  // Least recently used at the back.
  std::list<IndexKey> index_lru_;  // guarded by mu_
  absl::flat_hash_map<IndexKey,
                      std::pair<std::shared_ptr<const MapOutputIndex>, std::list<IndexKey>::iterator>>
      indexes_;  // guarded by mu_
  std::list<std::string> file_lru_;  // guarded by mu_
  absl::flat_hash_map<std::string,
                      std::pair<std::shared_ptr<const DataFile>, std::list<std::string>::iterator>>
      files_;  // guarded by mu_
};

}  // namespace ferry

#endif  // FERRY_SERVER_BLOCK_STORE_H_
