#include "common/dir_entries.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace ferry {

namespace {

struct CloseDir {
  void operator()(DIR* dir) const { ::closedir(dir); }
};

// Reads the directory `fd` (which fdopendir takes over) to the end or until `each`
// returns false.
absl::Status Read(UniqueFd fd, absl::string_view what,
                  absl::FunctionRef<bool(const char* name)> each) {
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("list ", what));
  std::unique_ptr<DIR, CloseDir> dir(::fdopendir(fd.get()));
  if (dir == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("list ", what));
  static_cast<void>(fd.release());  // the DIR owns it now
  // Bounded by the directory's entries.
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir.get());
    if (entry == nullptr) {
      return errno == 0 ? absl::OkStatus()
                        : absl::ErrnoToStatus(errno, absl::StrCat("list ", what));
    }
    if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
    if (!each(entry->d_name)) return absl::OkStatus();
  }
}

}  // namespace

absl::Status ForEachEntry(int dir_fd, absl::string_view what,
                          absl::FunctionRef<bool(const char* name)> each) {
  return Read(UniqueFd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)), what, each);
}

absl::Status ForEachEntry(const char* path, absl::FunctionRef<bool(const char* name)> each) {
  return Read(UniqueFd(::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)), path, each);
}

bool IsDirectoryAt(int dir_fd, const char* name) {
  struct stat st {};
  return ::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

absl::Status CheckDirectory(absl::string_view what, const std::string& path, int access_mode) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a directory"));
  }
  if (::access(path.c_str(), access_mode) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, " ", path, " is a directory this user cannot ",
        (access_mode & W_OK) != 0 ? "write" : "read", " (", std::strerror(errno), ")"));
  }
  return absl::OkStatus();
}

}  // namespace ferry
