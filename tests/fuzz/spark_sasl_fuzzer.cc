// libFuzzer target: SASL DIGEST-MD5 (common/spark/sasl.h) on arbitrary bytes. The first
// byte says which end takes the rest: 0, a server given them as the client's response to
// its challenge; 1 and 2, a client (2: one that asks for encryption) given them as the
// server's challenge; 3, the auth-conf layer of a session (fixed keys, so that a find
// replays from the corpus) given them as the peer's records. Nothing may crash or read
// past its input; a forged response must not authenticate; every refusal is
// PERMISSION_DENIED (the handshake) or DATA_LOSS (a record); nothing the fuzzer makes
// opens (a record needs the MAC key).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "common/spark/sasl.h"

using namespace ferry::spark;  // NOLINT: a fuzz target's only namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto server = SaslServer::Create("fuzz");
      if (!server.ok() || !(*server)->Step("").ok()) std::abort();
      absl::StatusOr<std::string> answer = (*server)->Step(bytes);
      // The nonce is fresh: no input can hold the digest of it.
      if (answer.ok() || (*server)->complete()) std::abort();
      if (answer.status().code() != absl::StatusCode::kPermissionDenied) std::abort();
      break;
    }
    case 1:
    case 2: {
      auto client = SaslClient::Create("fuzz", /*encrypt=*/data[0] % 4 == 2);
      if (!client.ok()) std::abort();
      absl::StatusOr<std::string> response = (*client)->Step(bytes);
      if (!response.ok() && response.status().code() != absl::StatusCode::kPermissionDenied) {
        std::abort();
      }
      if (response.ok()) {
        // A forged rspauth does not complete the exchange.
        absl::StatusOr<std::string> last = (*client)->Step(bytes);
        if (last.ok() || (*client)->complete()) std::abort();
      }
      break;
    }
    default: {
      auto server = SaslCipher::FromExchange("0123456789abcdef", /*server=*/true, 65536);
      if (!server.ok()) std::abort();
      std::string plain;
      const absl::Status opened = (*server)->Open(bytes, &plain);
      if (!opened.ok() && opened.code() != absl::StatusCode::kDataLoss) std::abort();
      if (!plain.empty()) std::abort();
      break;
    }
  }
  return 0;
}
