#include "common/shuffle_writer.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/shuffle_files.h"
#include "common/spark/layout.h"
#include "common/status_macros.h"

namespace ferry {

namespace {

std::string RandomSuffix() {
  uint64_t r = 0;
  if (::getrandom(&r, sizeof(r), 0) != sizeof(r)) r = static_cast<uint64_t>(::getpid());
  return absl::StrFormat("%016x", r);
}

void AppendBigEndian64(std::string& out, uint64_t v) {
  const uint64_t be = htobe64(v);
  out.append(reinterpret_cast<const char*>(&be), 8);
}

absl::Status Fsync(int fd, const std::string& path) {
  if (::fsync(fd) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fsync ", path));
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> CreateFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("create ", path));
  return fd;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// A hidden temporary name beside `path`.
std::string TemporaryFor(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  return absl::StrCat(path.substr(0, base), ".", path.substr(base), ".", RandomSuffix(), ".tmp");
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("rename ", from, " to ", to));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShuffleWriter> ShuffleWriter::Create(std::string dir, int32_t shuffle_id,
                                                    int64_t map_id, ChecksumAlgorithm algorithm) {
  return CreateAt(absl::StrCat(dir, "/", DataFileName(shuffle_id, map_id)),
                  absl::StrCat(dir, "/", IndexFileName(shuffle_id, map_id)),
                  absl::StrCat(dir, "/", ChecksumFileName(shuffle_id, map_id, algorithm)),
                  shuffle_id, map_id, algorithm);
}

absl::StatusOr<ShuffleWriter> ShuffleWriter::CreateInSparkLayout(
    const std::vector<std::string>& local_dirs, int32_t sub_dirs_per_local_dir, int32_t shuffle_id,
    int64_t map_id, ChecksumAlgorithm algorithm) {
  std::string paths[3];
  const std::string names[3] = {DataFileName(shuffle_id, map_id), IndexFileName(shuffle_id, map_id),
                                ChecksumFileName(shuffle_id, map_id, algorithm)};
  for (int i = 0; i < 3; ++i) {
    FERRY_ASSIGN_OR_RETURN(std::string path,
                           spark::ExecutorFilePath(local_dirs, sub_dirs_per_local_dir, names[i]));
    // Spark's executors create the subdirectories as files need them.
    const std::string sub = Dirname(path);
    if (::mkdir(sub.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", sub));
    }
    paths[i] = std::move(path);
  }
  return CreateAt(std::move(paths[0]), std::move(paths[1]), std::move(paths[2]), shuffle_id, map_id,
                  algorithm);
}

absl::StatusOr<ShuffleWriter> ShuffleWriter::CreateAt(std::string data_path, std::string index_path,
                                                      std::string checksum_path, int32_t shuffle_id,
                                                      int64_t map_id, ChecksumAlgorithm algorithm) {
  if (shuffle_id < 0 || map_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shuffle id ", shuffle_id, " and map id ", map_id, " must be >= 0"));
  }
  ShuffleWriter w;
  w.data_path_ = std::move(data_path);
  w.index_path_ = std::move(index_path);
  w.checksum_path_ = std::move(checksum_path);
  w.shuffle_id_ = shuffle_id;
  w.map_id_ = map_id;
  w.algorithm_ = algorithm;
  w.running_ = Checksum(algorithm);
  w.data_tmp_ = TemporaryFor(w.data_path_);
  w.index_tmp_ = TemporaryFor(w.index_path_);
  if (algorithm != ChecksumAlgorithm::kNone) w.checksum_tmp_ = TemporaryFor(w.checksum_path_);
  FERRY_ASSIGN_OR_RETURN(w.data_fd_, CreateFile(w.data_tmp_));
  w.offsets_.push_back(0);
  return w;
}

ShuffleWriter::ShuffleWriter(ShuffleWriter&& other) noexcept { *this = std::move(other); }

ShuffleWriter& ShuffleWriter::operator=(ShuffleWriter&& other) noexcept {
  if (this != &other) {
    RemoveTemporaries();
    data_path_ = std::move(other.data_path_);
    index_path_ = std::move(other.index_path_);
    checksum_path_ = std::move(other.checksum_path_);
    shuffle_id_ = other.shuffle_id_;
    map_id_ = other.map_id_;
    algorithm_ = other.algorithm_;
    data_fd_ = std::move(other.data_fd_);
    data_tmp_ = std::exchange(other.data_tmp_, "");
    index_tmp_ = std::exchange(other.index_tmp_, "");
    checksum_tmp_ = std::exchange(other.checksum_tmp_, "");
    data_bytes_ = other.data_bytes_;
    offsets_ = std::move(other.offsets_);
    checksums_ = std::move(other.checksums_);
    current_ = other.current_;
    running_ = other.running_;
    committed_ = other.committed_;
  }
  return *this;
}

ShuffleWriter::~ShuffleWriter() { RemoveTemporaries(); }

void ShuffleWriter::RemoveTemporaries() {
  if (committed_) return;
  for (const std::string* path : {&data_tmp_, &index_tmp_, &checksum_tmp_}) {
    if (!path->empty()) ::unlink(path->c_str());
  }
  data_tmp_.clear();
  index_tmp_.clear();
  checksum_tmp_.clear();
}

absl::Status ShuffleWriter::WriteFile(int fd, const std::string& path, absl::string_view bytes,
                                      uint64_t offset) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("write ", path));
    bytes.remove_prefix(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

void ShuffleWriter::EndPartitionsBefore(int32_t reduce_id) {
  // Closes the current partition and every skipped (empty) one up to `reduce_id`.
  while (current_ < reduce_id) {
    offsets_.push_back(data_bytes_);
    checksums_.push_back(running_.Value());
    running_ = Checksum(algorithm_);
    ++current_;
  }
}

absl::Status ShuffleWriter::Write(int32_t reduce_id, absl::string_view bytes) {
  if (committed_ || !data_fd_.valid()) {
    return absl::FailedPreconditionError("write to a finished ShuffleWriter");
  }
  if (reduce_id < current_) {
    return absl::InvalidArgumentError(absl::StrCat("shuffle ", shuffle_id_, " map ", map_id_,
                                                   ": reduce id ", reduce_id, " written after ",
                                                   current_));
  }
  EndPartitionsBefore(reduce_id);
  absl::Status status = WriteFile(data_fd_.get(), data_tmp_, bytes, data_bytes_);
  if (!status.ok()) {
    data_fd_.Reset();
    RemoveTemporaries();
    return status;
  }
  running_.Update(bytes);
  data_bytes_ += bytes.size();
  return absl::OkStatus();
}

absl::Status ShuffleWriter::Commit(int32_t num_partitions) {
  if (committed_ || !data_fd_.valid()) {
    return absl::FailedPreconditionError("commit of a finished ShuffleWriter");
  }
  if (num_partitions <= current_) {
    return absl::InvalidArgumentError(absl::StrCat("shuffle ", shuffle_id_, " map ", map_id_, ": ",
                                                   num_partitions, " partitions, but reduce id ",
                                                   current_, " was written"));
  }
  // Closing every partition leaves num_partitions + 1 offsets, the last one the end.
  EndPartitionsBefore(num_partitions);

  absl::Status status = [&]() -> absl::Status {
    FERRY_RETURN_IF_ERROR(Fsync(data_fd_.get(), data_tmp_));
    std::string index;
    for (uint64_t offset : offsets_) AppendBigEndian64(index, offset);
    FERRY_ASSIGN_OR_RETURN(UniqueFd index_fd, CreateFile(index_tmp_));
    FERRY_RETURN_IF_ERROR(WriteFile(index_fd.get(), index_tmp_, index, 0));
    FERRY_RETURN_IF_ERROR(Fsync(index_fd.get(), index_tmp_));
    if (!checksum_tmp_.empty()) {
      std::string sums;
      for (uint32_t c : checksums_) AppendBigEndian64(sums, c);
      FERRY_ASSIGN_OR_RETURN(UniqueFd sum_fd, CreateFile(checksum_tmp_));
      FERRY_RETURN_IF_ERROR(WriteFile(sum_fd.get(), checksum_tmp_, sums, 0));
      FERRY_RETURN_IF_ERROR(Fsync(sum_fd.get(), checksum_tmp_));
    }
    // Data and checksum first; the index last, since its presence is what makes the
    // output whole.
    FERRY_RETURN_IF_ERROR(Rename(data_tmp_, data_path_));
    if (!checksum_tmp_.empty()) {
      FERRY_RETURN_IF_ERROR(Rename(checksum_tmp_, checksum_path_));
    }
    FERRY_RETURN_IF_ERROR(Rename(index_tmp_, index_path_));
    std::vector<std::string> dirs = {Dirname(data_path_), Dirname(index_path_)};
    if (!checksum_tmp_.empty()) dirs.push_back(Dirname(checksum_path_));
    std::sort(dirs.begin(), dirs.end());
    dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
    for (const std::string& dir : dirs) {
      UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!dir_fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", dir));
      FERRY_RETURN_IF_ERROR(Fsync(dir_fd.get(), dir));
    }
    return absl::OkStatus();
  }();
  data_fd_.Reset();
  if (!status.ok()) {
    RemoveTemporaries();
    return status;
  }
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace ferry
