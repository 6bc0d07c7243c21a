#include "tests/testing/small_tmpfs.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace ferry::testing {

absl::StatusOr<std::unique_ptr<SmallTmpfs>> SmallTmpfs::Mount(const std::string& path,
                                                              uint64_t bytes) {
  if (::geteuid() != 0) return absl::UnimplementedError("mounting a tmpfs needs root");
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  }
  const std::string data = absl::StrCat("size=", bytes, ",mode=0700");
  if (::mount("tmpfs", path.c_str(), "tmpfs", 0, data.c_str()) != 0) {
    return absl::UnimplementedError(
        absl::StrCat("cannot mount a tmpfs at ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<SmallTmpfs>(new SmallTmpfs(path));
}

SmallTmpfs::~SmallTmpfs() { ::umount2(path_.c_str(), MNT_DETACH); }

absl::Status SmallTmpfs::Fill() {
  UniqueFd fd(::open(filler().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("create ", filler()));
  // Whole pages while they fit, then the bytes of the last one.
  const std::string block(4096, 'f');
  for (size_t step : {block.size(), size_t{1}}) {
    ssize_t n = 0;
    while ((n = ::write(fd.get(), block.data(), step)) > 0) {
    }
    if (errno != ENOSPC) return absl::ErrnoToStatus(errno, absl::StrCat("fill ", path_));
  }
  return absl::OkStatus();
}

absl::Status SmallTmpfs::Unfill() {
  if (::unlink(filler().c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("delete ", filler()));
  }
  return absl::OkStatus();
}

}  // namespace ferry::testing
