// Reading Spark's sort-shuffle output: one map task's `.data`, `.index` and optional
// `.checksum.<ALGO>` files.
//
//   shuffle_<shuffleId>_<mapId>_0.data             partitions' bytes back to back
//   shuffle_<shuffleId>_<mapId>_0.index            (partitions + 1) big-endian int64
//                                                  offsets; partition r is
//                                                  [offset[r], offset[r+1])
//   shuffle_<shuffleId>_<mapId>_0.checksum.<ALGO>  one big-endian int64 per partition
//
// Everything read from disk is validated before use, and errors name the file and the
// offending entry. Files are opened beneath a directory descriptor, never through a
// symlink, and must be regular files. Loading is synchronous file I/O: call it off the
// data plane's fibers (the control plane does, and caches the result).
#ifndef FERRY_COMMON_SHUFFLE_FILES_H_
#define FERRY_COMMON_SHUFFLE_FILES_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checksum.h"
#include "common/unique_fd.h"

struct stat;

namespace ferry {

// Largest index file Ferry reads: 8 MiB, about a million partitions.
inline constexpr uint64_t kMaxIndexFileBytes = uint64_t{8} << 20;

std::string DataFileName(int32_t shuffle_id, int64_t map_id);
std::string IndexFileName(int32_t shuffle_id, int64_t map_id);
std::string ChecksumFileName(int32_t shuffle_id, int64_t map_id, ChecksumAlgorithm algorithm);

// openat2(dir_fd, relative, flags) resolving beneath `dir_fd` and through no symlink
// (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS): the one way Ferry
// opens anything a peer's request can name. `mode`: a file O_CREAT makes. Invalid, with
// errno set, on failure.
UniqueFd OpenBeneath(int dir_fd, const std::string& relative, int flags, mode_t mode = 0);

// Opens `relative` (one or more path components) beneath the directory `dir_fd` for
// reading: resolution never leaves `dir_fd` and follows no symlink (openat2
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), and anything but a regular file (a FIFO, a
// device, a directory) is DATA_LOSS without waiting on it. NOT_FOUND when it does not
// exist. Fills `st`. `display_name` names the file in errors.
absl::StatusOr<UniqueFd> OpenRegularFile(int dir_fd, const std::string& relative,
                                         absl::string_view display_name, struct stat* st);

// Where a file of a map output is: `relative` beneath the directory `dir_fd`, named
// `display` in errors.
struct ShuffleFileLocation {
  int dir_fd = -1;
  std::string relative;
  std::string display;
};
// A producer's layout: where the file called `name` (IndexFileName(...) and the like)
// is. Ferry keeps an app's files in one directory; a Spark executor spreads them over
// hashed subdirectories of its local dirs (common/spark/layout.h).
using ShuffleFileLocator = absl::FunctionRef<ShuffleFileLocation(const std::string& name)>;

// Parses `name` as one of the three file names; returns false for anything else.
bool ParseIndexFileName(absl::string_view name, int32_t* shuffle_id, int64_t* map_id);

// Parses an index file's bytes and checks them against the data file's size: a whole
// number of int64s, at least two of them, the first 0, never decreasing, the last equal
// to `data_file_bytes`. `index_path` names the file in errors.
absl::StatusOr<std::vector<uint64_t>> ParseIndex(absl::string_view bytes, uint64_t data_file_bytes,
                                                 absl::string_view index_path);

// Parses a checksum file's bytes: exactly `partitions` int64s, each a 32-bit value.
absl::StatusOr<std::vector<uint32_t>> ParseChecksums(absl::string_view bytes, size_t partitions,
                                                     absl::string_view checksum_path);

// Which file a path named when it was opened: a file replaced under the same name
// (a map task run again) has another.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
};

struct MapOutputFiles;

// One map output's index (and checksums, when stored), loaded and validated.
class MapOutputIndex {
 public:
  // LoadMapOutput() on the directory `dir`, keeping only the index.
  static absl::StatusOr<MapOutputIndex> Load(const std::string& dir, int32_t shuffle_id,
                                             int64_t map_id);

  int32_t shuffle_id() const { return shuffle_id_; }
  int64_t map_id() const { return map_id_; }
  const std::string& data_path() const { return data_path_; }
  size_t partitions() const { return offsets_.size() - 1; }
  uint64_t data_bytes() const { return offsets_.back(); }
  // Byte range of partitions [start, end) in the data file. Requires
  // start <= end <= partitions().
  uint64_t RangeOffset(size_t start) const { return offsets_[start]; }
  uint64_t RangeLength(size_t start, size_t end) const { return offsets_[end] - offsets_[start]; }
  ChecksumAlgorithm checksum_algorithm() const { return checksum_algorithm_; }
  // One per partition when checksum_algorithm() is not kNone; empty otherwise.
  const std::vector<uint32_t>& checksums() const { return checksums_; }

 private:
  friend absl::StatusOr<MapOutputFiles> LoadMapOutput(ShuffleFileLocator, int32_t, int64_t);

  int32_t shuffle_id_ = 0;
  int64_t map_id_ = 0;
  std::string data_path_;
  std::vector<uint64_t> offsets_;
  ChecksumAlgorithm checksum_algorithm_ = ChecksumAlgorithm::kNone;
  std::vector<uint32_t> checksums_;
};

// A map output loaded whole: its index, its data file open, and which files both were.
struct MapOutputFiles {
  MapOutputIndex index;
  UniqueFd data;
  FileIdentity index_identity;
  FileIdentity data_identity;
};

// Loads the map output (shuffle_id, map_id), its files where `locate` says. NOT_FOUND
// when its index file is absent (a map output without an index is not whole: writers
// rename the index into place first and the data file after it, so a missing data
// file is DATA_LOSS); DATA_LOSS when a file is malformed, not a regular file, or
// disagrees with the data file (whose size is read from the descriptor returned): an
// index committed over an older data file, or a torn write, is never served. Looks for
// checksum files in the order CRC32C, CRC32, ADLER32; none is fine.
absl::StatusOr<MapOutputFiles> LoadMapOutput(ShuffleFileLocator locate, int32_t shuffle_id,
                                             int64_t map_id);
// LoadMapOutput() of files all in the directory `dir_fd`, which `dir_name` names.
absl::StatusOr<MapOutputFiles> LoadMapOutput(int dir_fd, absl::string_view dir_name,
                                             int32_t shuffle_id, int64_t map_id);

}  // namespace ferry

#endif  // FERRY_COMMON_SHUFFLE_FILES_H_
