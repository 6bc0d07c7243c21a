// Spark's AuthEngine (spark.authenticate with spark.network.crypto.enabled): the key
// agreement of Spark's AuthEngine and AuthMessage, and the AES-CTR stream cipher
// (CtrTransportCipher) that then carries every byte of the connection both ways.
//
// The handshake is one RPC: the client's challenge, the server's response, each an
// AuthMessage (common/spark/wire.h) holding an ephemeral X25519 public key sealed with
// AES-128-GCM under a key derived (HKDF-SHA256) from the application's secret, a fresh
// salt and the transcript so far, all of it also the GCM tag's associated data. Only a
// peer that knows the secret can seal or open one, so both sides authenticate; the
// session key comes from the X25519 exchange, so a secret that leaks later opens no
// recorded session. The GCM ciphertext is Tink's layout: a 12-byte IV, the sealed key,
// a 16-byte tag.
//
// Session keys, from the X25519 shared secret and the transcript (challenge then
// response, as encoded on the wire) as HKDF-SHA256's salt:
//   * version 1 (spark.network.crypto.authEngineVersion=1, Spark's default): the shared
//     secret itself is the key, AES-256-CTR;
//   * version 2 (SPARK-47318): HKDF(info "derivedKey"), 16 bytes, AES-128-CTR.
//   * IVs (both versions): HKDF(info "inputIv") is the counter the server sends from,
//     HKDF(info "outputIv") the one the client sends from.
// Nothing on the wire says which version the client runs: the server derives both and
// the first bytes the client sends tell (server/spark/auth/spark_cipher.h).
//
// Everything here is OpenSSL's (libcrypto: X25519, HKDF, AES-GCM, AES-CTR, its
// random generator). Errors never hold a secret or a key.
#ifndef FERRY_COMMON_SPARK_CRYPTO_H_
#define FERRY_COMMON_SPARK_CRYPTO_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/secret.h"
#include "common/spark/wire.h"

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace ferry::spark {

// AES in counter mode over one direction of a connection: every byte, in order, the
// counter starting at the IV and counting up as a 128-bit big-endian number (as Java's
// AES/CTR/NoPadding does).
class CtrCipher {
 public:
  // `key` of 16 (AES-128) or 32 (AES-256) bytes, `iv` of 16.
  static absl::StatusOr<CtrCipher> Create(absl::string_view key, absl::string_view iv);
  CtrCipher(CtrCipher&&) = default;
  CtrCipher& operator=(CtrCipher&&) = default;

  // Encrypts (or decrypts: the same in CTR) `n` bytes from `in` into `out`, which may be
  // `in`.
  void Apply(const char* in, char* out, size_t n);

 private:
  struct Free {
    void operator()(EVP_CIPHER_CTX* ctx) const;
  };
  explicit CtrCipher(std::unique_ptr<EVP_CIPHER_CTX, Free> ctx) : ctx_(std::move(ctx)) {}
  std::unique_ptr<EVP_CIPHER_CTX, Free> ctx_;
};

// One side's keys for a session: what it sends is encrypted from `out_iv`, what it
// receives decrypted from `in_iv`.
struct SessionKeys {
  Secret key;  // 32 bytes (version 1) or 16 (version 2)
  std::string in_iv;
  std::string out_iv;
};

// The server's answer to a client's challenge: the response to send, and the session
// keys of each version, the client's choice being in no message.
struct AuthEngineAnswer {
  AuthMessage response;
  SessionKeys v1;
  SessionKeys v2;
};

// PERMISSION_DENIED, naming the application, when the challenge does not open under
// `secret` (a wrong secret, a changed salt, ciphertext or app id, a cut message) or holds
// no usable key.
absl::StatusOr<AuthEngineAnswer> AnswerChallenge(absl::string_view secret,
                                                 const AuthMessage& challenge);

// The client's side, for one connection.
class AuthEngineClient {
 public:
  // `version` 1 or 2. `private_key` (32 bytes) fixes the ephemeral key, for tests;
  // empty, a fresh one is drawn.
  static absl::StatusOr<AuthEngineClient> Create(std::string app_id, Secret secret, int version,
                                                 Secret private_key = Secret());

  absl::StatusOr<AuthMessage> Challenge() const;
  // The session keys, once `response` (to `challenge`) opened: PERMISSION_DENIED when it
  // does not (a server without the secret, or a changed response).
  absl::StatusOr<SessionKeys> Finish(const AuthMessage& challenge,
                                     const AuthMessage& response) const;

 private:
  AuthEngineClient(std::string app_id, Secret secret, int version, Secret private_key);

  std::string app_id_;
  Secret secret_;
  int version_;
  Secret private_key_;
};

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_CRYPTO_H_
