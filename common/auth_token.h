// The control plane's credentials, read from files by both ferry_server and clients
// (the ferry CLI, ControlClient users): the shared secret (--auth-token-file) and the
// TLS certificates and keys (--tls-*-file).
#ifndef FERRY_COMMON_AUTH_TOKEN_H_
#define FERRY_COMMON_AUTH_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/secret.h"

namespace ferry {

// The file's contents without surrounding whitespace. INVALID_ARGUMENT naming the file
// when it is empty or holds characters outside printable ASCII (gRPC metadata values
// must be); NOT_FOUND or another errno status when it cannot be read.
absl::StatusOr<Secret> ReadAuthToken(const std::string& path);

// A PEM file (TLS certificate chain, private key or CA bundle) for gRPC's credentials:
// its contents (a Secret: a private key is one), INVALID_ARGUMENT naming the file when it holds no
// PEM block or is larger than 1 MiB.
absl::StatusOr<Secret> ReadPemFile(const std::string& path);

}  // namespace ferry

#endif  // FERRY_COMMON_AUTH_TOKEN_H_
