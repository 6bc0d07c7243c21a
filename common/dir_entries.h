// The names in a directory, read with the DIR* owned: opened, read and closed in one
// place, so no caller balances opendir() and closedir() by hand.
#ifndef FERRY_COMMON_DIR_ENTRIES_H_
#define FERRY_COMMON_DIR_ENTRIES_H_

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

}  // namespace ferry

#endif  // FERRY_COMMON_DIR_ENTRIES_H_
