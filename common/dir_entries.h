// Directories: the names in one, read with the DIR* owned (opened, read and closed in
// one place, so no caller balances opendir() and closedir() by hand), and whether a
// path is one, asked in one place.
#ifndef FERRY_COMMON_DIR_ENTRIES_H_
#define FERRY_COMMON_DIR_ENTRIES_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ferry {

// Calls `each` with every name in the directory `dir_fd` refers to (an O_PATH
// descriptor will do; it stays open and is the caller's), "." and ".." left out, until
// `each` returns false. The directory is read through a descriptor of its own, so the
// caller may use `dir_fd` (fstatat, unlinkat) meanwhile. An error names `what`.
absl::Status ForEachEntry(int dir_fd, absl::string_view what,
                          absl::FunctionRef<bool(const char* name)> each);

// The same for the directory at `path` (followed if a symlink).
absl::Status ForEachEntry(const char* path, absl::FunctionRef<bool(const char* name)> each);

// Whether `name` in the directory `dir_fd` is a directory itself (a symlink is not).
bool IsDirectoryAt(int dir_fd, const char* name);

// OK if `path` is a directory (a symlink to one will do) that this process may access
// with `access_mode` (access(2)'s R_OK, W_OK, X_OK); otherwise an error naming `what`
// (a flag, say) and the path: NOT_FOUND if there is nothing there, INVALID_ARGUMENT if
// it is no directory, PERMISSION_DENIED if access is refused.
absl::Status CheckDirectory(absl::string_view what, const std::string& path, int access_mode);

}  // namespace ferry

#endif  // FERRY_COMMON_DIR_ENTRIES_H_
