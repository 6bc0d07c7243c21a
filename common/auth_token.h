// The control plane's shared secret: read from a file by both ferry_server
// (--auth-token-file) and clients (the ferry CLI, ControlClient users).
#ifndef FERRY_COMMON_AUTH_TOKEN_H_
#define FERRY_COMMON_AUTH_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"

namespace ferry {

// The file's contents without surrounding whitespace. INVALID_ARGUMENT naming the file
// when it is empty or holds characters outside printable ASCII (gRPC metadata values
// must be); NOT_FOUND or another errno status when it cannot be read.
absl::StatusOr<std::string> ReadAuthToken(const std::string& path);

}  // namespace ferry

#endif  // FERRY_COMMON_AUTH_TOKEN_H_
