#include "server/base/replace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace ferry {

absl::Status WriteFully(int fd, absl::string_view bytes, absl::string_view what) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, what);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status ReplaceFile(const std::string& path, absl::string_view bytes, mode_t mode) {
  const std::string temp = absl::StrCat(path, ".tmp");
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("create ", temp));
  if (absl::Status s = WriteFully(fd.get(), bytes, absl::StrCat("write ", temp)); !s.ok()) {
    return s;
  }
  if (::fsync(fd.get()) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fsync ", temp));
  fd.Reset();
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("rename ", temp, " to ", path));
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid() || ::fsync(dir_fd.get()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fsync ", dir));
  }
  return absl::OkStatus();
}

}  // namespace ferry
