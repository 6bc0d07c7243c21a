// ReplaceFile: puts `bytes` at `path` whole or not at all, surviving a crash: written to
// `path`.tmp (never through a symlink), fsynced, renamed over `path`, and the directory
// fsynced. A reader sees the old file or the new one, never a part.
#ifndef FERRY_SERVER_BASE_REPLACE_FILE_H_
#define FERRY_SERVER_BASE_REPLACE_FILE_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ferry {

absl::Status ReplaceFile(const std::string& path, absl::string_view bytes, mode_t mode);

// Writes all of `bytes` to `fd` (at its position; with O_APPEND, at its end), across
// short writes and EINTR; an error names `what` ("append to <path>").
absl::Status WriteFully(int fd, absl::string_view bytes, absl::string_view what);

}  // namespace ferry

#endif  // FERRY_SERVER_BASE_REPLACE_FILE_H_
