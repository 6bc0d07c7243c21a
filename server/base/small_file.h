// ReadSmallFile: a small regular file's whole contents (secrets, hand-off files), or an
// error naming the path. Only a regular file is read (a FIFO would block the thread),
// never past `max_bytes`: a larger file is INVALID_ARGUMENT, not a truncated read.
#ifndef FERRY_SERVER_BASE_SMALL_FILE_H_
#define FERRY_SERVER_BASE_SMALL_FILE_H_

#include <sys/stat.h>

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace ferry {

// NOT_FOUND when nothing is at `path`.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

// The same, of a file opened already (`fd`, whose fstat is `st`); `path` names it in
// errors.
absl::StatusOr<std::string> ReadSmallFile(int fd, const struct stat& st, const std::string& path,
                                          size_t max_bytes);

}  // namespace ferry

#endif  // FERRY_SERVER_BASE_SMALL_FILE_H_
