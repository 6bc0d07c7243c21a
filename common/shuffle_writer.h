// ShuffleWriter: writes one map output in Spark's sort-shuffle format (data, index,
// checksum files; see shuffle_files.h), atomically.
//
// Two layouts: Ferry's, the three files side by side in one directory; and a Spark
// executor's, each file in the subdirectory of the local dirs that ExecutorDiskUtils
// hashes its name to (common/spark/layout.h), as Spark's own map tasks leave them.
//
// Bytes go to hidden temporary files beside their final names. Commit() writes the
// index and checksums, fsyncs all three, renames data and checksum into place and the
// index last, then fsyncs the directories. A reader only serves a map output whose index
// exists, so a crash or an error (ENOSPC included) at any point never leaves an output
// that looks whole; the temporary files are removed on error and on destruction
// without Commit(). Move-only; not thread-safe.
#ifndef FERRY_COMMON_SHUFFLE_WRITER_H_
#define FERRY_COMMON_SHUFFLE_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checksum.h"
#include "common/unique_fd.h"

namespace ferry {

class ShuffleWriter {
 public:
  // Starts a map output in `dir` (which must exist). `algorithm` kNone writes no
  // checksum file.
  static absl::StatusOr<ShuffleWriter> Create(
      std::string dir, int32_t shuffle_id, int64_t map_id,
      ChecksumAlgorithm algorithm = ChecksumAlgorithm::kCrc32c);

  ShuffleWriter(ShuffleWriter&& other) noexcept;
  ShuffleWriter& operator=(ShuffleWriter&& other) noexcept;
  ShuffleWriter(const ShuffleWriter&) = delete;
  ShuffleWriter& operator=(const ShuffleWriter&) = delete;
  // Removes the temporary files unless Commit() succeeded.
  ~ShuffleWriter();

  // Starts a map output in Spark's layout under an executor's local dirs (which must
  // exist), creating the hashed subdirectories it needs.
  static absl::StatusOr<ShuffleWriter> CreateInSparkLayout(
      const std::vector<std::string>& local_dirs, int32_t sub_dirs_per_local_dir,
      int32_t shuffle_id, int64_t map_id, ChecksumAlgorithm algorithm = ChecksumAlgorithm::kCrc32c);

  // Appends `bytes` to partition `reduce_id`. Partitions are written in order: a
  // reduce id below the current one is INVALID_ARGUMENT; ids skipped are empty.
  absl::Status Write(int32_t reduce_id, absl::string_view bytes);

  // Finishes the output with `num_partitions` partitions (more than the highest reduce
  // id written) and publishes it. After an error the output is not published.
  absl::Status Commit(int32_t num_partitions);

  uint64_t bytes_written() const { return data_bytes_; }
  // Where the output's files go once committed.
  const std::string& data_path() const { return data_path_; }
  const std::string& index_path() const { return index_path_; }

 private:
  ShuffleWriter() = default;
  // Starts the output whose files end up at these paths (checksum_path unused with
  // kNone).
  static absl::StatusOr<ShuffleWriter> CreateAt(std::string data_path, std::string index_path,
                                                std::string checksum_path, int32_t shuffle_id,
                                                int64_t map_id, ChecksumAlgorithm algorithm);
  absl::Status WriteFile(int fd, const std::string& path, absl::string_view bytes, uint64_t offset);
  void EndPartitionsBefore(int32_t reduce_id);
  void RemoveTemporaries();

  std::string data_path_;
  std::string index_path_;
  std::string checksum_path_;
  int32_t shuffle_id_ = 0;
  int64_t map_id_ = 0;
  ChecksumAlgorithm algorithm_ = ChecksumAlgorithm::kNone;
  UniqueFd data_fd_;
  std::string data_tmp_;
  std::string index_tmp_;
  std::string checksum_tmp_;
  uint64_t data_bytes_ = 0;
  // offsets_[r] is where partition r begins; current_ is the partition being written.
  std::vector<uint64_t> offsets_;
  std::vector<uint32_t> checksums_;
  int32_t current_ = 0;
  Checksum running_{ChecksumAlgorithm::kNone};
  bool committed_ = false;
};

}  // namespace ferry

#endif  // FERRY_COMMON_SHUFFLE_WRITER_H_
