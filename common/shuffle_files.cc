#include "common/shuffle_files.h"

#include <endian.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/pread_full.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace ferry {

namespace {

std::string Prefix(int32_t shuffle_id, int64_t map_id) {
  return absl::StrCat("shuffle_", shuffle_id, "_", map_id, "_0");
}

uint64_t BigEndian64At(absl::string_view bytes, size_t i) {
  uint64_t v;
  std::memcpy(&v, bytes.data() + i * 8, 8);
  return be64toh(v);
}

// Reads a whole small file that OpenRegularFile opened. `name` names it in errors.
absl::StatusOr<std::string> ReadSmallFile(int fd, absl::string_view name, uint64_t max_bytes) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", name));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::DataLossError(
        absl::StrCat(name, " is ", st.st_size, " bytes, over the ", max_bytes, "-byte limit"));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  const ssize_t n = PreadFull(fd, data.data(), data.size(), 0);
  if (n < 0) return absl::ErrnoToStatus(static_cast<int>(-n), absl::StrCat("read ", name));
  if (static_cast<size_t>(n) != data.size()) {
    return absl::DataLossError(absl::StrCat(name, " shrank while being read"));
  }
  return data;
}

FileIdentity IdentityOf(const struct stat& st) {
  return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

}  // namespace

UniqueFd OpenBeneath(int dir_fd, const std::string& relative, int flags, mode_t mode) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.mode = (flags & O_CREAT) != 0 ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return UniqueFd(
      static_cast<int>(::syscall(SYS_openat2, dir_fd, relative.c_str(), &how, sizeof(how))));
}

absl::StatusOr<UniqueFd> OpenRegularFile(int dir_fd, const std::string& relative,
                                         absl::string_view display_name, struct stat* st) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  UniqueFd fd = OpenBeneath(dir_fd, relative, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (!fd.valid()) {
    const int err = errno;
    if (err == ELOOP) {
      return absl::DataLossError(
          absl::StrCat(display_name, " is, or is beneath, a symlink; not followed"));
    }
    if (err == EXDEV) {
      return absl::PermissionDeniedError(
          absl::StrCat(display_name, " leads outside the directory it must be in"));
    }
    return absl::ErrnoToStatus(err, absl::StrCat("open ", display_name));
  }
  if (::fstat(fd.get(), st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", display_name));
  }
  if (!S_ISREG(st->st_mode)) {
    return absl::DataLossError(absl::StrCat(display_name, " is not a regular file"));
  }
  // Back to blocking: io_uring fails a read of an O_NONBLOCK file that would wait for
  // the disk with EAGAIN instead of handing it to a worker.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fcntl ", display_name));
  }
  return fd;
}

std::string DataFileName(int32_t shuffle_id, int64_t map_id) {
  return Prefix(shuffle_id, map_id) + ".data";
}

std::string IndexFileName(int32_t shuffle_id, int64_t map_id) {
  return Prefix(shuffle_id, map_id) + ".index";
}

std::string ChecksumFileName(int32_t shuffle_id, int64_t map_id, ChecksumAlgorithm algorithm) {
  return absl::StrCat(Prefix(shuffle_id, map_id), ".checksum.", ChecksumAlgorithmName(algorithm));
}

bool ParseIndexFileName(absl::string_view name, int32_t* shuffle_id, int64_t* map_id) {
  if (!absl::ConsumePrefix(&name, "shuffle_") || !absl::ConsumeSuffix(&name, "_0.index")) {
    return false;
  }
  const size_t sep = name.find('_');
  if (sep == absl::string_view::npos) return false;
  return absl::SimpleAtoi(name.substr(0, sep), shuffle_id) &&
         absl::SimpleAtoi(name.substr(sep + 1), map_id) && *shuffle_id >= 0 && *map_id >= 0;
}

absl::StatusOr<std::vector<uint64_t>> ParseIndex(absl::string_view bytes, uint64_t data_file_bytes,
                                                 absl::string_view index_path) {
  if (bytes.size() % 8 != 0) {
    return absl::DataLossError(absl::StrCat(index_path, ": ", bytes.size(),
                                            " bytes is not a whole number of int64 offsets"));
  }
  const size_t count = bytes.size() / 8;
  if (count < 2) {
    return absl::DataLossError(
        absl::StrCat(index_path, ": ", count, " offsets; an index holds at least two"));
  }
  std::vector<uint64_t> offsets(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t v = BigEndian64At(bytes, i);
    if (static_cast<int64_t>(v) < 0) {
      return absl::DataLossError(
          absl::StrCat(index_path, ": offset ", i, " is negative (", static_cast<int64_t>(v), ")"));
    }
    if (i == 0 && v != 0) {
      return absl::DataLossError(absl::StrCat(index_path, ": offset 0 is ", v, ", not 0"));
    }
    if (i > 0 && v < offsets[i - 1]) {
      return absl::DataLossError(absl::StrCat(index_path, ": offset ", i, " (", v,
                                              ") is below offset ", i - 1, " (", offsets[i - 1],
                                              ")"));
    }
    offsets[i] = v;
  }
  if (offsets.back() != data_file_bytes) {
    return absl::DataLossError(absl::StrCat(index_path, ": last offset ", offsets.back(),
                                            " does not match the data file's size ",
                                            data_file_bytes));
  }
  return offsets;
}

absl::StatusOr<std::vector<uint32_t>> ParseChecksums(absl::string_view bytes, size_t partitions,
                                                     absl::string_view checksum_path) {
  if (bytes.size() != partitions * 8) {
    return absl::DataLossError(absl::StrCat(checksum_path, ": ", bytes.size(), " bytes; expected ",
                                            partitions * 8, " for ", partitions, " partitions"));
  }
  std::vector<uint32_t> checksums(partitions);
  for (size_t i = 0; i < partitions; ++i) {
    const uint64_t v = BigEndian64At(bytes, i);
    if (v > UINT32_MAX) {
      return absl::DataLossError(
          absl::StrCat(checksum_path, ": checksum ", i, " (", v, ") does not fit in 32 bits"));
    }
    checksums[i] = static_cast<uint32_t>(v);
  }
  return checksums;
}

absl::StatusOr<MapOutputFiles> LoadMapOutput(ShuffleFileLocator locate, int32_t shuffle_id,
                                             int64_t map_id) {
  MapOutputFiles files;
  MapOutputIndex& out = files.index;
  out.shuffle_id_ = shuffle_id;
  out.map_id_ = map_id;
  const ShuffleFileLocation index_at = locate(IndexFileName(shuffle_id, map_id));
  const ShuffleFileLocation data_at = locate(DataFileName(shuffle_id, map_id));
  out.data_path_ = data_at.display;

  struct stat st;
  FERRY_ASSIGN_OR_RETURN(UniqueFd index_fd, OpenRegularFile(index_at.dir_fd, index_at.relative,
                                                            index_at.display, &st));
  files.index_identity = IdentityOf(st);
  FERRY_ASSIGN_OR_RETURN(std::string index,
                         ReadSmallFile(index_fd.get(), index_at.display, kMaxIndexFileBytes));
  // The size comes from the descriptor that will be served, not from a second lookup of
  // the path, which may name another file by then.
  absl::StatusOr<UniqueFd> data_fd =
      OpenRegularFile(data_at.dir_fd, data_at.relative, data_at.display, &st);
  if (absl::IsNotFound(data_fd.status())) {
    return absl::DataLossError(
        absl::StrCat(data_at.display, " is missing but its index ", index_at.display, " exists"));
  }
  if (!data_fd.ok()) return data_fd.status();
  files.data = *std::move(data_fd);
  files.data_identity = IdentityOf(st);
  FERRY_ASSIGN_OR_RETURN(out.offsets_,
                         ParseIndex(index, static_cast<uint64_t>(st.st_size), index_at.display));

  for (ChecksumAlgorithm algorithm :
       {ChecksumAlgorithm::kCrc32c, ChecksumAlgorithm::kCrc32, ChecksumAlgorithm::kAdler32}) {
    const ShuffleFileLocation at = locate(ChecksumFileName(shuffle_id, map_id, algorithm));
    absl::StatusOr<UniqueFd> fd = OpenRegularFile(at.dir_fd, at.relative, at.display, &st);
    if (absl::IsNotFound(fd.status())) continue;
    if (!fd.ok()) return fd.status();
    FERRY_ASSIGN_OR_RETURN(std::string bytes,
                           ReadSmallFile(fd->get(), at.display, kMaxIndexFileBytes));
    FERRY_ASSIGN_OR_RETURN(std::vector<uint32_t> checksums,
                           ParseChecksums(bytes, out.partitions(), at.display));
    out.checksum_algorithm_ = algorithm;
    out.checksums_ = std::move(checksums);
    break;
  }
  return files;
}

absl::StatusOr<MapOutputFiles> LoadMapOutput(int dir_fd, absl::string_view dir_name,
                                             int32_t shuffle_id, int64_t map_id) {
  return LoadMapOutput(
      [&](const std::string& name) {
        return ShuffleFileLocation{dir_fd, name, absl::StrCat(dir_name, "/", name)};
      },
      shuffle_id, map_id);
}

absl::StatusOr<MapOutputIndex> MapOutputIndex::Load(const std::string& dir, int32_t shuffle_id,
                                                    int64_t map_id) {
  UniqueFd dir_fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", dir));
  FERRY_ASSIGN_OR_RETURN(MapOutputFiles files,
                         LoadMapOutput(dir_fd.get(), dir, shuffle_id, map_id));
  return std::move(files.index);
}

}  // namespace ferry
