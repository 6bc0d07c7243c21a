#include "common/unique_fd.h"

#include <unistd.h>

namespace ferry {

void UniqueFd::Reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released either way,
  // and a retry could close a descriptor another thread has just been given.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace ferry
