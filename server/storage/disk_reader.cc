#include "server/storage/disk_reader.h"

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/option_check.h"
#include "common/pread_full.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace ferry {

namespace {

// "vda" for 254:0, from the block device's sysfs link; major:minor for a device that
// has none (tmpfs, overlay: an anonymous device).
std::string DiskName(uint64_t device) {
  const dev_t dev = static_cast<dev_t>(device);
  const std::string id = absl::StrCat(major(dev), ":", minor(dev));
  char target[PATH_MAX];
  const ssize_t n =
      ::readlink(absl::StrCat("/sys/dev/block/", id).c_str(), target, sizeof(target) - 1);
  if (n <= 0) return id;
  const std::string link(target, static_cast<size_t>(n));
  return absl::StrCat(link.substr(link.rfind('/') + 1), " (", id, ")");
}

// The kernel's own read-ahead window of the device (its queue's read_ahead_kb, or its
// disk's for a partition), in bytes; 0 when it has none or it cannot be read.
uint64_t DeviceReadAhead(uint64_t device) {
  const dev_t dev = static_cast<dev_t>(device);
  const std::string base = absl::StrCat("/sys/dev/block/", major(dev), ":", minor(dev));
  for (const char* queue : {"/queue/read_ahead_kb", "/../queue/read_ahead_kb"}) {
    std::ifstream in(base + queue);
    uint64_t kib = 0;
    if (in >> kib) return kib << 10;
  }
  return 0;
}

}  // namespace

absl::Status FileReadError(int error, absl::string_view what) {
  switch (error) {
    case EIO:
    case ENXIO:
    case ENODEV:
    case ESTALE:
    case ENOTCONN:
      return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(error)));
    default:
      return absl::ErrnoToStatus(error, what);
  }
}

absl::Status DiskReader::Options::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckRange("disk-workers", workers_per_disk, 1, 256));
  FERRY_RETURN_IF_ERROR(CheckRange("disk-queue", max_queued_per_disk, 1, kMaxLimit));
  FERRY_RETURN_IF_ERROR(CheckRange("disk-readahead", readahead_bytes, 0, uint64_t{1} << 30));
  FERRY_RETURN_IF_ERROR(CheckRange("disk-unhealthy-after", unhealthy_after, 1, 1 << 20));
  return CheckRange("max-disks", max_disks, 1, 4096);
}

struct DiskReader::Disk {
  Disk(std::string disk_name, uint64_t device_readahead, const Options& options)
      : name(std::move(disk_name)),
        // The kernel reads ahead of sequential readers by itself, in large folios; an
        // explicit WILLNEED fills the page cache one page at a time, which on this
        // kernel cost 1.6x the server's CPU per GB for no more throughput where the
        // device's window is as large (benchmarks/results/cold-*.md). So it is asked
        // for only where the device's own window is smaller.
        readahead(device_readahead >= options.readahead_bytes ? 0 : options.readahead_bytes),
        unhealthy_after(options.unhealthy_after),
        pool(BlockingPool::Options{options.workers_per_disk, options.max_queued_per_disk}) {}

  // From a worker: counts a read's result of `path` and moves the disk's health with it.
  void Record(ssize_t res, const std::string& path) {
    if (res >= 0) {
      reads.fetch_add(1, std::memory_order_relaxed);
      bytes.fetch_add(static_cast<uint64_t>(res), std::memory_order_relaxed);
      failing.store(0, std::memory_order_relaxed);
      if (!healthy.exchange(true, std::memory_order_relaxed)) {
        LOG(WARNING) << "disk " << name << " is healthy again: a read succeeded";
      }
      return;
    }
    errors.fetch_add(1, std::memory_order_relaxed);
    std::string error = absl::StrCat(path, ": ", std::strerror(static_cast<int>(-res)));
    const uint32_t in_a_row = failing.fetch_add(1, std::memory_order_relaxed) + 1;
    if (in_a_row >= unhealthy_after && healthy.exchange(false, std::memory_order_relaxed)) {
      LOG(ERROR) << "disk " << name << " is unhealthy: " << in_a_row
                 << " reads in a row failed, the last of " << error;
    }
    absl::MutexLock lock(&mu);
    last_error = std::move(error);
  }

  std::string LastError() const {
    absl::MutexLock lock(&mu);
    return last_error;
  }

  const std::string name;
  const uint64_t readahead;  // most bytes a segment's first miss asks WILLNEED for
  const uint32_t unhealthy_after;
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint32_t> failing{0};  // failed reads since the last success
  std::atomic<bool> healthy{true};
  mutable absl::Mutex mu;
  std::string last_error ABSL_GUARDED_BY(mu);
  // Last: its workers are joined before the counters they write go.
  BlockingPool pool;
};

DiskReader::DiskReader(const Options& options) : options_(options) {}
DiskReader::~DiskReader() = default;

DiskReader::Disk& DiskReader::DiskOf(const DataFile& file) {
  // Files on disks past max_disks share the queue keyed by UINT64_MAX.
  uint64_t key = file.identity.device;
  absl::MutexLock lock(&mu_);
  auto it = disks_.find(key);
  if (it == disks_.end() && disks_.size() >= options_.max_disks) {
    key = UINT64_MAX;
    it = disks_.find(key);
  }
  if (it == disks_.end()) {
    std::string name = key == UINT64_MAX ? std::string("other") : DiskName(key);
    const uint64_t device_readahead = key == UINT64_MAX ? 0 : DeviceReadAhead(key);
    auto disk = std::make_unique<Disk>(std::move(name), device_readahead, options_);
    LOG(INFO) << "disk " << disk->name << ": " << options_.workers_per_disk
              << " workers for reads the page cache misses; the kernel's read-ahead "
              << (device_readahead >> 10) << " KiB"
              << (disk->readahead > 0
                      ? absl::StrCat(", WILLNEED up to ", disk->readahead >> 10, " KiB")
                      : std::string(""));
    it = disks_.emplace(key, std::move(disk)).first;
  }
  return *it->second;
}

template <typename ReadFn>
absl::StatusOr<size_t> DiskReader::Submit(std::shared_ptr<const DataFile> file, uint64_t pos,
                                          size_t len, uint64_t readahead, absl::Time deadline,
                                          const char* what, ReadFn read) {
  Disk& disk = DiskOf(*file);
  const std::string path = file->path;
  const BlockingPool::Order order{.stream = file->identity.inode, .offset = pos};
  const uint64_t ahead = std::min<uint64_t>(readahead, disk.readahead);
  auto result = std::make_shared<ssize_t>(0);
  // The job holds the file: a caller gone early must not leave it reading a descriptor
  // number the process has since given to something else.
  absl::Status ran = disk.pool.Run(
      [&disk, file = std::move(file), pos, len, ahead, result, read = std::move(read)]() mutable {
        const int fd = file->fd.get();
        if (ahead > len) {
          (void)::posix_fadvise(fd, static_cast<off_t>(pos), static_cast<off_t>(ahead),
                                POSIX_FADV_WILLNEED);
        }
        *result = read(fd, pos, len);
        disk.Record(*result, file->path);
      },
      deadline, order);
  if (!ran.ok()) {
    return absl::Status(ran.code(),
                        absl::StrCat(what, " ", path, " on disk ", disk.name, ": ", ran.message()));
  }
  if (*result < 0) {
    return FileReadError(static_cast<int>(-*result),
                         absl::StrCat(what, " ", path, " on disk ", disk.name));
  }
  return static_cast<size_t>(*result);
}

absl::StatusOr<size_t> DiskReader::SpliceToPipe(std::shared_ptr<const DataFile> file, uint64_t pos,
                                                size_t len, int pipe_write_fd, uint64_t readahead,
                                                absl::Time deadline) {
  UniqueFd pipe(::fcntl(pipe_write_fd, F_DUPFD_CLOEXEC, 0));
  if (!pipe.valid()) return absl::ErrnoToStatus(errno, "duplicate a pipe for a disk read");
  return Submit(std::move(file), pos, len, readahead, deadline, "splice",
                [pipe = std::move(pipe)](int fd, uint64_t at, size_t n) -> ssize_t {
                  // The pipe is empty and holds `n`, so only the disk is waited for.
                  for (;;) {
                    loff_t offset = static_cast<loff_t>(at);
                    const ssize_t moved =
                        ::splice(fd, &offset, pipe.get(), nullptr, n, SPLICE_F_MOVE);
                    if (moved >= 0) return moved;
                    if (errno != EINTR) return -errno;
                  }
                });
}

absl::StatusOr<size_t> DiskReader::Read(std::shared_ptr<const DataFile> file, uint64_t pos,
                                        std::shared_ptr<char[]> buffer, size_t len,
                                        uint64_t readahead, absl::Time deadline) {
  return Submit(std::move(file), pos, len, readahead, deadline, "read",
                [buffer = std::move(buffer)](int fd, uint64_t at, size_t n) -> ssize_t {
                  return PreadFull(fd, buffer.get(), n, at);
                });
}

std::vector<DiskReader::DiskStats> DiskReader::Stats() const {
  std::vector<DiskStats> stats;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, disk] : disks_) {
    DiskStats s;
    s.name = disk->name;
    s.queued = disk->pool.queued();
    s.reads = disk->reads.load(std::memory_order_relaxed);
    s.bytes = disk->bytes.load(std::memory_order_relaxed);
    s.errors = disk->errors.load(std::memory_order_relaxed);
    s.healthy = disk->healthy.load(std::memory_order_relaxed);
    s.last_error = disk->LastError();
    stats.push_back(std::move(s));
  }
  return stats;
}

namespace {

// One value of each disk, by its name.
template <typename Value>
std::vector<std::pair<std::string, double>> ByDisk(const std::vector<DiskReader::DiskStats>& disks,
                                                   Value value) {
  std::vector<std::pair<std::string, double>> out;
  for (const DiskReader::DiskStats& d : disks) {
    out.emplace_back(d.name, static_cast<double>(value(d)));
  }
  return out;
}

}  // namespace

void DiskReader::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  const std::vector<DiskStats> disks = Stats();
  FERRY_APPEND_READS(FERRY_DISK_STATS, out);
}

}  // namespace ferry
