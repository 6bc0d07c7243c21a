// Spark's on-disk layout of an executor's files and its block ids (Spark 3.5.0,
// ExecutorDiskUtils and BlockId; docs/protocol.md, "Spark's shuffle protocol").
//
// A file called `name` lives at
//   localDirs[h % n] / "%02x"(h / n % subDirsPerLocalDir) / name
// where n = localDirs.size() and h is Java's String.hashCode of `name` made non-negative
// (Integer.MIN_VALUE becomes 0). The index and data files of one map output usually land
// in different directories.
#ifndef FERRY_COMMON_SPARK_LAYOUT_H_
#define FERRY_COMMON_SPARK_LAYOUT_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/shuffle_files.h"

namespace ferry::spark {

// Java's String.hashCode of an ASCII string (one UTF-16 unit per byte), made
// non-negative as JavaUtils.nonNegativeHash does. Spark's file names are ASCII.
int32_t NonNegativeHash(absl::string_view ascii);

// Where the file `name` of an executor with these local dirs lives. INVALID_ARGUMENT
// when there are no local dirs, sub_dirs_per_local_dir is not positive, or `name` is not
// a plain ASCII file name.
absl::StatusOr<std::string> ExecutorFilePath(const std::vector<std::string>& local_dirs,
                                             int32_t sub_dirs_per_local_dir,
                                             absl::string_view name);

// Which of `local_dirs` local dirs, and which subdirectory of it, hold the file `name`.
struct FilePlacement {
  size_t local_dir = 0;
  int32_t sub_dir = 0;
};
FilePlacement PlaceFile(size_t local_dirs, int32_t sub_dirs_per_local_dir, absl::string_view name);

// A registered executor's local dirs as the server opens them: each beneath a
// directory descriptor of a root it serves (which outlives this), so that opening a
// file never follows a symlink out of the root.
struct ExecutorDirs {
  struct LocalDir {
    int root_fd = -1;
    std::string relative;  // beneath the root
    std::string path;      // absolute, as the executor registered it
  };
  std::vector<LocalDir> local_dirs;
  int32_t sub_dirs_per_local_dir = 1;

  // Where the file `name` is. Requires local_dirs non-empty and a positive
  // sub_dirs_per_local_dir (ExecutorRegistry checks both).
  ShuffleFileLocation Locate(absl::string_view name) const;
};

// shuffle_<shuffleId>_<mapId>_<reduceId> (end = reduce + 1), or the batch form
// shuffle_<shuffleId>_<mapId>_<startReduceId>_<endReduceId> (end exclusive).
struct ShuffleBlockId {
  int32_t shuffle_id = 0;
  int64_t map_id = 0;
  int32_t start_reduce_id = 0;
  int32_t end_reduce_id = 0;
};
// rdd_<rddId>_<splitIndex>: a persisted RDD block, a file in the hashed layout.
struct RddBlockId {
  int32_t rdd_id = 0;
  int32_t split_index = 0;
};
using SparkBlockId = std::variant<ShuffleBlockId, RddBlockId>;

// INVALID_ARGUMENT for anything else (push-merged shuffleChunk ids among them), a
// negative id, or an empty or reversed range; the message quotes the id (cut to 100
// characters).
absl::StatusOr<SparkBlockId> ParseBlockId(absl::string_view id);

std::string ShuffleBlockName(const ShuffleBlockId& id);

// The map output a shuffle file's name belongs to: shuffle_<shuffleId>_<mapId>_<reduceId>
// followed by ".data" or ".index" (Spark's ShuffleDataBlockId and ShuffleIndexBlockId,
// which the driver names in RemoveBlocks to delete a shuffle's files). INVALID_ARGUMENT,
// quoting the name, for anything else.
absl::StatusOr<ShuffleBlockId> ParseShuffleFileName(absl::string_view name);

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_LAYOUT_H_
