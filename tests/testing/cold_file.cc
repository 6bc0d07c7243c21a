#include "tests/testing/cold_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"

namespace ferry::testing {

namespace {

// Pages of [offset, offset + bytes) in the page cache, by mincore(2) on a mapping.
absl::StatusOr<size_t> CachedPages(int fd, off_t offset, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const off_t start = offset / static_cast<off_t>(page) * static_cast<off_t>(page);
  const size_t span = bytes + static_cast<size_t>(offset - start);
  void* map = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, start);
  if (map == MAP_FAILED) return absl::ErrnoToStatus(errno, "mmap");
  std::vector<unsigned char> resident((span + page - 1) / page);
  const int rc = ::mincore(map, span, resident.data());
  const int err = errno;
  ::munmap(map, span);
  if (rc != 0) return absl::ErrnoToStatus(err, "mincore");
  size_t cached = 0;
  for (unsigned char r : resident) cached += r & 1;
  return cached;
}

}  // namespace

absl::Status Evict(int fd, off_t offset, off_t len) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return absl::ErrnoToStatus(errno, "fstatfs");
  if (fs.f_type == TMPFS_MAGIC) {
    return absl::FailedPreconditionError("a tmpfs file is never out of memory");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, "fstat");
  const off_t end = len == 0 ? st.st_size : offset + len;
  if (end <= offset) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(end - offset);
  for (int i = 0; i < 20; ++i) {
    if (::fdatasync(fd) != 0) return absl::ErrnoToStatus(errno, "fdatasync");
    if (::posix_fadvise(fd, offset, end - offset, POSIX_FADV_DONTNEED) != 0) {
      return absl::InternalError("posix_fadvise(DONTNEED)");
    }
    // mincore, not a non-waiting read: a read that misses starts the kernel's
    // read-ahead, which would bring the pages back.
    absl::StatusOr<size_t> cached = CachedPages(fd, offset, bytes);
    if (!cached.ok()) return cached.status();
    if (*cached == 0) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::InternalError("the file stayed in the page cache");
}

}  // namespace ferry::testing
