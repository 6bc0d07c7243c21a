#include "tests/testing/loop_disk.h"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/pread_full.h"
#include "common/unique_fd.h"
#include "tests/testing/command.h"

namespace ferry::testing {

namespace {

constexpr char kLosetup[] = "/usr/sbin/losetup";
constexpr char kMkfs[] = "/usr/sbin/mkfs.ext4";
constexpr char kMount[] = "/usr/bin/mount";
constexpr char kUmount[] = "/usr/bin/umount";
constexpr absl::Duration kCommandTimeout = absl::Seconds(60);
// Backing files are named for the test process that made them.
constexpr char kBackingPrefix[] = "ferry-loop-disk-";

absl::StatusOr<std::string> Run(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandResult> ran = RunCommand(argv, kCommandTimeout);
  if (!ran.ok()) return ran.status();
  if (ran->exit_code != 0) {
    return absl::InternalError(absl::StrCat(argv[0], " ", argv.size() > 1 ? argv[1] : "",
                                            " exited ", ran->exit_code, ": ", ran->output));
  }
  return ran->output;
}

// Mount points of `device`, from /proc/self/mounts.
std::vector<std::string> MountsOf(const std::string& device) {
  std::vector<std::string> points;
  std::ifstream mounts("/proc/self/mounts");
  std::string source, point, rest;
  while (mounts >> source >> point && std::getline(mounts, rest)) {
    if (source == device) points.push_back(point);
  }
  return points;
}

// Loop devices whose backing files a test process now gone made: unmounted and detached.
void RemoveStaleDevices() {
  absl::StatusOr<std::string> listed =
      Run({kLosetup, "--list", "--noheadings", "--output", "NAME,BACK-FILE"});
  if (!listed.ok()) return;
  for (absl::string_view line : absl::StrSplit(*listed, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2) continue;
    const std::string back = std::string(line.substr(fields[0].size()));
    // "<dir>/ferry-loop-disk-<pid>.img", maybe " (deleted)" after it.
    const size_t at = back.find(kBackingPrefix);
    if (at == std::string::npos) continue;
    absl::string_view rest = absl::string_view(back).substr(at + std::strlen(kBackingPrefix));
    const size_t digits = rest.find(".img");
    pid_t pid = 0;
    if (digits == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, digits), &pid)) {
      continue;
    }
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    for (const std::string& point : MountsOf(fields[0])) {
      (void)Run({kUmount, "--lazy", point});
    }
    (void)Run({kLosetup, "--detach", fields[0]});
  }
}

struct Span {
  uint64_t first = UINT64_MAX;
  uint64_t end = 0;
};

// Where the extents of `path` lie on its device.
absl::StatusOr<Span> ExtentsOf(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  constexpr uint32_t kMaxExtents = 256;
  std::vector<char> storage(sizeof(fiemap) + kMaxExtents * sizeof(fiemap_extent));
  auto* map = reinterpret_cast<fiemap*>(storage.data());
  map->fm_start = 0;
  map->fm_length = FIEMAP_MAX_OFFSET;
  map->fm_flags = FIEMAP_FLAG_SYNC;  // allocates what writeback would first
  map->fm_extent_count = kMaxExtents;
  if (::ioctl(fd.get(), FS_IOC_FIEMAP, map) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("FIEMAP of ", path));
  }
  if (map->fm_mapped_extents == 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, " has no extents on its device"));
  }
  Span span;
  for (uint32_t i = 0; i < map->fm_mapped_extents; ++i) {
    const fiemap_extent& e = map->fm_extents[i];
    span.first = std::min<uint64_t>(span.first, e.fe_physical);
    span.end = std::max<uint64_t>(span.end, e.fe_physical + e.fe_length);
  }
  return span;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoopDisk>> LoopDisk::Create(const std::string& work_dir,
                                                           const std::string& mount_point,
                                                           uint64_t bytes) {
  if (::geteuid() != 0) {
    return absl::UnimplementedError("a loop-device filesystem needs root to set up");
  }
  if (::access("/dev/loop-control", F_OK) != 0) {
    return absl::UnimplementedError("this kernel has no loop driver (/dev/loop-control)");
  }
  for (const char* tool : {kLosetup, kMkfs, kMount, kUmount}) {
    if (::access(tool, X_OK) != 0) return absl::UnimplementedError(absl::StrCat("no ", tool));
  }
  RemoveStaleDevices();
  const std::string backing = absl::StrCat(work_dir, "/", kBackingPrefix, ::getpid(), ".img");
  {
    UniqueFd fd(::open(backing.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("create ", backing));
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("size ", backing));
    }
  }
  // No journal and every inode table written now: nothing writes to the device later
  // (ext4's lazy init would, in the background).
  absl::StatusOr<std::string> made = Run({kMkfs, "-q", "-F", "-b", "4096", "-O", "^has_journal",
                                          "-E", "lazy_itable_init=0,lazy_journal_init=0", backing});
  if (!made.ok()) return absl::UnimplementedError(made.status().message());
  absl::StatusOr<std::string> attached = Run({kLosetup, "--find", "--show", backing});
  if (!attached.ok()) {
    return absl::UnimplementedError(absl::StrCat("no loop device: ", attached.status().message()));
  }
  std::string device(absl::StripTrailingAsciiWhitespace(*attached));
  std::unique_ptr<LoopDisk> disk(new LoopDisk(backing, mount_point, device, bytes));
  absl::StatusOr<std::string> mounted =
      Run({kMount, "-t", "ext4", "-o", "noatime,errors=continue", device, mount_point});
  if (!mounted.ok()) {
    return absl::UnimplementedError(
        absl::StrCat("cannot mount ext4: ", mounted.status().message()));
  }
  disk->mounted_ = true;
  return disk;
}

LoopDisk::~LoopDisk() {
  if (mounted_) (void)Run({kUmount, "--lazy", mount_point_});
  (void)Run({kLosetup, "--detach", device_});
  ::unlink(backing_.c_str());
}

absl::StatusOr<uint64_t> LoopDisk::FirstByteOnDevice(const std::string& path) const {
  absl::StatusOr<Span> span = ExtentsOf(path);
  if (!span.ok()) return span.status();
  return span->first;
}

absl::StatusOr<uint64_t> LoopDisk::EndOnDevice(const std::string& path) const {
  absl::StatusOr<Span> span = ExtentsOf(path);
  if (!span.ok()) return span.status();
  return span->end;
}

absl::Status LoopDisk::Resize() const {
  absl::StatusOr<std::string> resized = Run({kLosetup, "--set-capacity", device_});
  return resized.ok() ? absl::OkStatus() : resized.status();
}

absl::Status LoopDisk::FailFrom(uint64_t offset) {
  if (cut_ != 0) return absl::FailedPreconditionError("failing already");
  if (offset == 0 || offset >= bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("cut at ", offset, " of ", bytes_));
  }
  // Whole sectors: the device's size is counted in them.
  offset &= ~uint64_t{511};
  UniqueFd fd(::open(backing_.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", backing_));
  std::string saved(bytes_ - offset, '\0');
  const ssize_t n = PreadFull(fd.get(), saved.data(), saved.size(), offset);
  if (n != static_cast<ssize_t>(saved.size())) {
    return absl::ErrnoToStatus(n < 0 ? static_cast<int>(-n) : EIO,
                               absl::StrCat("read the tail of ", backing_));
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(offset)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cut ", backing_));
  }
  saved_ = std::move(saved);
  cut_ = offset;
  return Resize();
}

absl::Status LoopDisk::Heal() {
  if (cut_ == 0) return absl::OkStatus();
  UniqueFd fd(::open(backing_.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", backing_));
  size_t done = 0;
  while (done < saved_.size()) {
    const ssize_t n = ::pwrite(fd.get(), saved_.data() + done, saved_.size() - done,
                               static_cast<off_t>(cut_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::ErrnoToStatus(errno, absl::StrCat("restore ", backing_));
    done += static_cast<size_t>(n);
  }
  saved_.clear();
  cut_ = 0;
  return Resize();
}

}  // namespace ferry::testing
