#include "common/pipe.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {

size_t Pipe::MaxCapacityBytes() {
  std::ifstream in("/proc/sys/fs/pipe-max-size");
  size_t max_bytes = 0;
  if (in >> max_bytes && max_bytes > 0) return max_bytes;
  return size_t{1} << 20;
}

absl::StatusOr<Pipe> Pipe::Create(size_t capacity_bytes, int extra_flags) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | extra_flags) != 0) {
    return absl::ErrnoToStatus(errno, "pipe2");
  }
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);

  int granted = ::fcntl(write_end.get(), F_SETPIPE_SZ, static_cast<int>(capacity_bytes));
  if (granted < 0 && errno == EPERM) {
    const size_t max_bytes = MaxCapacityBytes();
    if (capacity_bytes > max_bytes) {
      granted = ::fcntl(write_end.get(), F_SETPIPE_SZ, static_cast<int>(max_bytes));
    }
  }
  if (granted < 0) {
    // Over the user's pipe page budget even the fallback is refused; the pipe keeps
    // the size the kernel gave it at creation, which is still a working pipe.
    granted = ::fcntl(write_end.get(), F_GETPIPE_SZ);
    if (granted < 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("F_GETPIPE_SZ on a new pipe (asked ", capacity_bytes, " bytes)"));
    }
  }
  return Pipe(std::move(read_end), std::move(write_end), static_cast<size_t>(granted));
}

int Pipe::BufferedBytes() const {
  int n = 0;
  if (::ioctl(read_.get(), FIONREAD, &n) != 0) return -errno;
  return n;
}

}  // namespace ferry
