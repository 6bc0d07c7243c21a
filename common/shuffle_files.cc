#include "common/shuffle_files.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/pread_full.h"
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

// Reads a whole small file. NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::DataLossError(absl::StrCat(path, " is ", st.st_size, " bytes, over the ",
                                            max_bytes, "-byte limit"));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  const ssize_t n = PreadFull(fd.get(), data.data(), data.size(), 0);
  if (n < 0) return absl::ErrnoToStatus(static_cast<int>(-n), absl::StrCat("read ", path));
  if (static_cast<size_t>(n) != data.size()) {
    return absl::DataLossError(absl::StrCat(path, " shrank while being read"));
  }
  return data;
}

}  // namespace

std::string DataFileName(int32_t shuffle_id, int64_t map_id) {
  return Prefix(shuffle_id, map_id) + ".data";
}

std::string IndexFileName(int32_t shuffle_id, int64_t map_id) {
  return Prefix(shuffle_id, map_id) + ".index";
}

std::string ChecksumFileName(int32_t shuffle_id, int64_t map_id, ChecksumAlgorithm algorithm) {
  return absl::StrCat(Prefix(shuffle_id, map_id), ".checksum.",
                      ChecksumAlgorithmName(algorithm));
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

absl::StatusOr<std::vector<uint64_t>> ParseIndex(absl::string_view bytes,
                                                 uint64_t data_file_bytes,
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
      return absl::DataLossError(absl::StrCat(index_path, ": offset ", i, " is negative (",
                                              static_cast<int64_t>(v), ")"));
    }
    if (i == 0 && v != 0) {
      return absl::DataLossError(absl::StrCat(index_path, ": offset 0 is ", v, ", not 0"));
    }
    if (i > 0 && v < offsets[i - 1]) {
      return absl::DataLossError(absl::StrCat(index_path, ": offset ", i, " (", v,
                                              ") is below offset ", i - 1, " (",
                                              offsets[i - 1], ")"));
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
    return absl::DataLossError(absl::StrCat(checksum_path, ": ", bytes.size(),
                                            " bytes; expected ", partitions * 8, " for ",
                                            partitions, " partitions"));
  }
  std::vector<uint32_t> checksums(partitions);
  for (size_t i = 0; i < partitions; ++i) {
    const uint64_t v = BigEndian64At(bytes, i);
    if (v > UINT32_MAX) {
      return absl::DataLossError(absl::StrCat(checksum_path, ": checksum ", i, " (", v,
                                              ") does not fit in 32 bits"));
    }
    checksums[i] = static_cast<uint32_t>(v);
  }
  return checksums;
}

absl::StatusOr<MapOutputIndex> MapOutputIndex::Load(const std::string& dir, int32_t shuffle_id,
                                                    int64_t map_id) {
  MapOutputIndex out;
  out.shuffle_id_ = shuffle_id;
  out.map_id_ = map_id;
  out.data_path_ = absl::StrCat(dir, "/", DataFileName(shuffle_id, map_id));
  const std::string index_path = absl::StrCat(dir, "/", IndexFileName(shuffle_id, map_id));

  absl::StatusOr<std::string> index = ReadSmallFile(index_path, kMaxIndexFileBytes);
  if (!index.ok()) return index.status();
  struct stat st;
  if (::stat(out.data_path_.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::DataLossError(
          absl::StrCat(out.data_path_, " is missing but its index ", index_path, " exists"));
    }
    return absl::ErrnoToStatus(err, absl::StrCat("stat ", out.data_path_));
  }
  absl::StatusOr<std::vector<uint64_t>> offsets =
      ParseIndex(*index, static_cast<uint64_t>(st.st_size), index_path);
  if (!offsets.ok()) return offsets.status();
  out.offsets_ = *std::move(offsets);

  for (ChecksumAlgorithm algorithm : {ChecksumAlgorithm::kCrc32c, ChecksumAlgorithm::kCrc32,
                                      ChecksumAlgorithm::kAdler32}) {
    const std::string path =
        absl::StrCat(dir, "/", ChecksumFileName(shuffle_id, map_id, algorithm));
    absl::StatusOr<std::string> bytes = ReadSmallFile(path, kMaxIndexFileBytes);
    if (absl::IsNotFound(bytes.status())) continue;
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<std::vector<uint32_t>> checksums =
        ParseChecksums(*bytes, out.partitions(), path);
    if (!checksums.ok()) return checksums.status();
    out.checksum_algorithm_ = algorithm;
    out.checksums_ = *std::move(checksums);
    break;
  }
  return out;
}

}  // namespace ferry
