#include "server/storage/segment.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/pread_full.h"

namespace ferry {

absl::Status CheckSegmentHeld(const StreamBlock& block, absl::FunctionRef<std::string()> name) {
  struct stat st;
  if (::fstat(block.file->fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", block.file->path, " for ", name()));
  }
  if (static_cast<uint64_t>(st.st_size) < block.offset + block.length) {
    return absl::DataLossError(absl::StrCat(name(), ": data file ", block.file->path, " is now ",
                                            st.st_size, " bytes but the block ends at byte ",
                                            block.offset + block.length));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ChecksumOnDisk(const StreamBlock& block, absl::string_view name,
                                        ChecksumAlgorithm algorithm, absl::Time deadline) {
  constexpr size_t kBufferBytes = size_t{1} << 20;
  auto buffer = std::make_unique<char[]>(kBufferBytes);
  Checksum checksum(algorithm);
  for (uint64_t done = 0; done < block.length;) {
    if (deadline != absl::InfiniteFuture() && absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("checksumming ", name,
                                                      " did not finish in time (", done, " of ",
                                                      block.length, " bytes read)"));
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(block.length - done, kBufferBytes));
    const ssize_t n = PreadFull(block.file->fd.get(), buffer.get(), want, block.offset + done);
    if (n < 0) {
      return absl::ErrnoToStatus(static_cast<int>(-n), absl::StrCat("read ", block.file->path));
    }
    if (static_cast<size_t>(n) != want) {
      return absl::DataLossError(absl::StrCat(block.file->path, " ends before ", name,
                                              " does (byte ", block.offset + block.length, ")"));
    }
    checksum.Update(absl::string_view(buffer.get(), want));
    done += want;
  }
  return checksum.Value();
}

absl::StatusOr<Diagnosis> DiagnoseSegment(const StreamBlock& block, uint32_t received,
                                          absl::string_view name, absl::Time deadline) {
  absl::StatusOr<uint32_t> disk = ChecksumOnDisk(block, name, block.checksum_algorithm, deadline);
  Diagnosis d;
  if (absl::IsDataLoss(disk.status())) {
    d.cause = CorruptionCause::kDisk;
    d.disk_error = std::string(disk.status().message());
    return d;
  }
  if (!disk.ok()) return disk.status();
  d.disk_checksum = *disk;
  d.cause = *disk != block.checksum      ? CorruptionCause::kDisk
            : received != block.checksum ? CorruptionCause::kTransfer
                                         : CorruptionCause::kNone;
  return d;
}

}  // namespace ferry
