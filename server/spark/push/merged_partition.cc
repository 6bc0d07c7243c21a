#include "server/spark/push/merged_partition.h"

#include <endian.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/pread_full.h"

namespace ferry {

namespace {

// Writes all of `bytes` at `offset`.
absl::Status WriteAt(int fd, absl::string_view bytes, int64_t offset, absl::string_view what) {
  const ssize_t n = PwriteFull(fd, bytes.data(), bytes.size(), static_cast<uint64_t>(offset));
  if (n < 0) return absl::ErrnoToStatus(static_cast<int>(-n), absl::StrCat("write ", what));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MergedPartition>> MergedPartition::Create(Files files,
                                                                         int64_t min_chunk_bytes,
                                                                         std::string name) {
  if (!files.data.valid() || !files.index.valid() || !files.meta.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": a file is not open"));
  }
  std::unique_ptr<MergedPartition> partition(
      new MergedPartition(std::move(files), min_chunk_bytes, std::move(name)));
  // The first chunk starts at 0, with no bitmap of its own.
  if (absl::Status s = partition->CloseChunk(0, /*with_bitmap=*/false); !s.ok()) return s;
  return partition;
}

MergedPartition::Progress MergedPartition::progress() const {
  return Progress{.end = end_,
                  .chunk_start = chunk_start_,
                  .index_end = index_end_,
                  .meta_end = meta_end_,
                  .chunks = chunks_,
                  .merged = merged_,
                  .chunk_maps = chunk_maps_};
}

absl::StatusOr<std::unique_ptr<MergedPartition>> MergedPartition::Resume(Files files,
                                                                         int64_t min_chunk_bytes,
                                                                         std::string name,
                                                                         Progress progress) {
  if (!files.data.valid() || !files.index.valid() || !files.meta.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": a file is not open"));
  }
  const Progress& p = progress;
  struct stat data {
  }, index{}, meta{};
  if (::fstat(files.data.get(), &data) != 0 || ::fstat(files.index.get(), &index) != 0 ||
      ::fstat(files.meta.get(), &meta) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", name));
  }
  // The index's last entry is where the open chunk starts.
  uint64_t last = 0;
  const bool consistent = p.chunks >= 0 && p.index_end == 8 * (p.chunks + 1) &&
                          p.chunk_start >= 0 && p.chunk_start <= p.end && p.meta_end >= 0 &&
                          data.st_size >= p.end && index.st_size >= p.index_end &&
                          meta.st_size >= p.meta_end &&
                          PreadFull(files.index.get(), reinterpret_cast<char*>(&last), 8,
                                    static_cast<uint64_t>(p.index_end - 8)) == 8 &&
                          static_cast<int64_t>(be64toh(last)) == p.chunk_start;
  if (!consistent) {
    return absl::DataLossError(
        absl::StrCat(name, ": its files (", data.st_size, ", ", index.st_size, ", ", meta.st_size,
                     " bytes) do not hold what the server handing it over wrote (", p.end,
                     " bytes, ", p.chunks, " chunks to ", p.chunk_start, ")"));
  }
  std::unique_ptr<MergedPartition> partition(
      new MergedPartition(std::move(files), min_chunk_bytes, std::move(name)));
  partition->end_ = p.end;
  partition->chunk_start_ = p.chunk_start;
  partition->index_end_ = p.index_end;
  partition->meta_end_ = p.meta_end;
  partition->chunks_ = p.chunks;
  partition->merged_ = std::move(progress.merged);
  partition->chunk_maps_ = std::move(progress.chunk_maps);
  return partition;
}

absl::Status MergedPartition::CloseChunk(int64_t offset, bool with_bitmap) {
  const uint64_t big_endian = htobe64(static_cast<uint64_t>(offset));
  // The index entry first and the bitmap after it; the ends move only when both are
  // written, so a failed boundary is rewritten whole at the next one.
  absl::Status s =
      WriteAt(index_.get(), absl::string_view(reinterpret_cast<const char*>(&big_endian), 8),
              index_end_, absl::StrCat(name_, ".index"));
  std::string bitmap;
  if (s.ok() && with_bitmap) {
    bitmap = chunk_maps_.Serialize();
    s = WriteAt(meta_.get(), bitmap, meta_end_, absl::StrCat(name_, ".meta"));
  }
  if (!s.ok()) return s;
  index_end_ += 8;
  meta_end_ += static_cast<int64_t>(bitmap.size());
  chunk_start_ = offset;
  if (with_bitmap) {
    ++chunks_;
    chunk_maps_.Clear();
  }
  return absl::OkStatus();
}

absl::Status MergedPartition::Commit(uint32_t map_index, int64_t length) {
  if (finalized_) {
    return absl::FailedPreconditionError(absl::StrCat(name_, " is finalized"));
  }
  end_ += length;
  merged_.Add(map_index);
  chunk_maps_.Add(map_index);
  if (end_ - chunk_start_ < min_chunk_bytes_) return absl::OkStatus();
  return CloseChunk(end_, /*with_bitmap=*/true);
}

absl::StatusOr<MergedPartition::Final> MergedPartition::Finalize() {
  if (finalized_) {
    return absl::FailedPreconditionError(absl::StrCat(name_, " is finalized"));
  }
  finalized_ = true;
  Final result;
  result.map_indexes = merged_;
  if (end_ != chunk_start_) {
    if (absl::Status s = CloseChunk(end_, /*with_bitmap=*/true); !s.ok()) {
      // The open chunk cannot be closed: it is cut, and its maps are not reported
      // merged, so that reducers fetch their blocks unmerged rather than miss them.
      result.map_indexes.Subtract(chunk_maps_);
    }
  }
  result.size = chunk_start_;
  const std::pair<const UniqueFd*, int64_t> cuts[] = {
      {data_.get(), chunk_start_}, {&index_, index_end_}, {&meta_, meta_end_}};
  for (const auto& [fd, length] : cuts) {
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0 ||
        (st.st_size != length && ::ftruncate(fd->get(), length) != 0)) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cut ", name_));
    }
  }
  return result;
}

}  // namespace ferry
