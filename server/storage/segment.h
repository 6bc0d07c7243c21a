// The bottom of the storage package: a segment of an open shuffle data file, which is
// what the store resolves a block to and what the data plane sends.
#ifndef FERRY_SERVER_STORAGE_SEGMENT_H_
#define FERRY_SERVER_STORAGE_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/block_id.h"
#include "common/checksum.h"
#include "common/shuffle_files.h"
#include "common/unique_fd.h"

namespace ferry {

// An open data file, shared by every stream that serves from it.
struct DataFile {
  // Relative to the data dir ("app-0/shuffle_0_1_0.data") or to a Spark root: errors
  // name it so, and never tell a peer where the data lives.
  std::string path;
  UniqueFd fd;
  // The disk it is on and its inode: which disk's workers read what is not cached, in
  // what order (disk_reader.h).
  FileIdentity identity;
};

// One block, resolved to a segment of a data file. Small on purpose: a stream may hold
// a million of them.
struct StreamBlock {
  std::shared_ptr<const DataFile> file;
  uint64_t offset = 0;
  uint64_t length = 0;
  BlockId id;
  // Set when the block is one partition with a stored checksum: travels in the header.
  uint32_t checksum = 0;
  ChecksumAlgorithm checksum_algorithm = ChecksumAlgorithm::kNone;
  bool has_checksum = false;
};

// OK while the block's file still holds all of the block; DATA_LOSS naming the block
// (`name`, called only then), the file and both sizes once it has shrunk (checked
// before a header promises the bytes).
absl::Status CheckSegmentHeld(const StreamBlock& block, absl::FunctionRef<std::string()> name);

// The checksum of the block's bytes in its data file now, read through a bounded
// buffer; `name` names the block in errors. DATA_LOSS if the file ends first;
// DEADLINE_EXCEEDED if `deadline` passes before the last byte is read (checked before
// each MiB, so a caller gone is not read for).
absl::StatusOr<uint32_t> ChecksumOnDisk(const StreamBlock& block, absl::string_view name,
                                        ChecksumAlgorithm algorithm,
                                        absl::Time deadline = absl::InfiniteFuture());

// Who is to blame for a block a client received corrupt: its bytes on disk no longer
// give the checksum stored when they were written (kDisk), or they still do and the
// client's bytes do not (kTransfer), or the client's match too (kNone).
enum class CorruptionCause { kDisk, kTransfer, kNone };
struct Diagnosis {
  CorruptionCause cause = CorruptionCause::kNone;
  // The checksum of the bytes on disk now; unset when the file ends before the block
  // does (then `disk_error` says so, and the cause is kDisk).
  std::optional<uint32_t> disk_checksum;
  std::string disk_error;
};
// Rereads the block (which has_checksum) to tell. `received` is the checksum of what the
// client got. An error other than the file ending early (reading failed, `deadline`
// passed) is returned as is: then nothing can be told.
absl::StatusOr<Diagnosis> DiagnoseSegment(const StreamBlock& block, uint32_t received,
                                          absl::string_view name, absl::Time deadline);

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_SEGMENT_H_
