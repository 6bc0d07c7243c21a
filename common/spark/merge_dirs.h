// Push-based shuffle's part of an executor's registration, and its merged files' names
// (Spark 3.5.0: DiskBlockManager, BlockManager, RemoteBlockPushResolver).
//
// An executor of a push-enabled application registers with a shuffle manager of
//   <class name>:{"mergeDir":"merge_manager_<attempt>","attemptId":"<attempt>"}
// (Jackson's map of strings; Spark's BlockManager appends two stray '}' after it, which
// Spark's service, reading one JSON value, ignores). The merge dir is a sibling of each
// of the executor's block-manager dirs: <parent of local dir>/<mergeDir>, hashed into
// sub dirs as the executor's own files are. A merged partition's files there are
//   shuffleMerged_<appId>_<shuffleId>_<shuffleMergeId>_<reduceId>.{data,index,meta}
#ifndef FERRY_COMMON_SPARK_MERGE_DIRS_H_
#define FERRY_COMMON_SPARK_MERGE_DIRS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::spark {

// What an application attempt's executors said of its merge dir.
struct MergeDirInfo {
  std::string merge_dir;    // one path component
  int32_t attempt_id = -1;  // -1: none given (Spark's UNDEFINED_ATTEMPT_ID)
};

// nullopt for a shuffle manager without push-based shuffle's suffix (no ':'), or whose
// suffix is not JSON (Spark's service logs and ignores it). INVALID_ARGUMENT for a JSON
// object without "mergeDir", an attemptId that is not an int (Spark's service refuses
// the registration then too), or a merge dir that is not one plain path component
// (Spark would resolve "../x" outside the executor's dirs; Ferry refuses it).
absl::StatusOr<std::optional<MergeDirInfo>> ParseMergeDirInfo(absl::string_view shuffle_manager);

// The executor id a reducer asks GetLocalDirsForExecutors for to learn the merge dirs of
// its application (ExternalBlockHandler's SHUFFLE_MERGER_IDENTIFIER): it reads merged
// partitions of a merger on its own host from the disk, as host-local map outputs.
inline constexpr char kShuffleMergerExecId[] = "shuffle-push-merger";

// shuffleMerged_<appId>_<shuffleId>_<shuffleMergeId>_<reduceId>.<suffix>
std::string MergedFileName(absl::string_view app_id, int32_t shuffle_id, int32_t shuffle_merge_id,
                           int32_t reduce_id, absl::string_view suffix);

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_MERGE_DIRS_H_
