#include "server/base/small_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "common/unique_fd.h"

namespace ferry {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  return ReadSmallFile(fd.get(), st, path, max_bytes);
}

absl::StatusOr<std::string> ReadSmallFile(int fd, const struct stat& st, const std::string& path,
                                          size_t max_bytes) {
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  std::string bytes(max_bytes + 1, '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("read ", path));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {
    Secret::Wipe(bytes);
    return absl::InvalidArgumentError(absl::StrCat(path, " holds more than ", max_bytes, " bytes"));
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace ferry
