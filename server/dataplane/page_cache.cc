#include "server/dataplane/page_cache.h"

#include <sys/uio.h>

#include <cerrno>

namespace ferry {

namespace {

constexpr uint64_t kPageBytes = 4096;

// One byte at `pos` without waiting: 1 when cached, 0 at the end of the file, -EAGAIN
// when the disk would be needed, or another -errno.
ssize_t ProbeByte(int fd, uint64_t pos) {
  char byte;
  iovec iov{&byte, 1};
  for (;;) {
    const ssize_t n = ::preadv2(fd, &iov, 1, static_cast<off_t>(pos), RWF_NOWAIT);
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

}  // namespace

bool LooksCached(int fd, uint64_t pos, size_t len) {
  if (len == 0) return true;
  // An error other than a miss is the splice's to report, so it counts as cached here.
  if (ProbeByte(fd, pos) == -EAGAIN) return false;
  const uint64_t last = pos + len - 1;
  if (last / kPageBytes == pos / kPageBytes) return true;
  return ProbeByte(fd, last) != -EAGAIN;
}

CachedRead PreadCached(int fd, char* buf, size_t len, uint64_t pos) {
  size_t done = 0;
  while (done < len) {
    iovec iov{buf + done, len - done};
    const ssize_t n = ::preadv2(fd, &iov, 1, static_cast<off_t>(pos + done), RWF_NOWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) break;  // the end of the file
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return {static_cast<ssize_t>(done), true};
    return {-errno, false};
  }
  return {static_cast<ssize_t>(done), false};
}

}  // namespace ferry
