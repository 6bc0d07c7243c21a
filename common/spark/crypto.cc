#include "common/spark/crypto.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ferry::spark {

namespace {

constexpr size_t kX25519Bytes = 32;
constexpr size_t kKekBytes = 16;  // the AES-128-GCM key that seals a public key
constexpr size_t kSaltBytes = 16;
constexpr size_t kGcmIvBytes = 12;
constexpr size_t kGcmTagBytes = 16;
constexpr size_t kCtrIvBytes = 16;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* p) const { EVP_CIPHER_CTX_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

const unsigned char* Bytes(absl::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

absl::Status OpenSslError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("OpenSSL: ", what, " failed"));
}

absl::StatusOr<std::string> Random(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return OpenSslError("RAND_bytes");
  }
  return out;
}

// HKDF-SHA256 (RFC 5869), as Tink's Hkdf.computeHkdf("HMACSHA256", ...).
absl::StatusOr<std::string> Hkdf(absl::string_view ikm, absl::string_view salt,
                                 absl::string_view info, size_t n) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return OpenSslError("fetching HKDF");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return OpenSslError("EVP_KDF_CTX_new");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(ikm.data()),
                                        ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()),
                                        info.size()),
      OSSL_PARAM_construct_end()};
  std::string out(n, '\0');
  const int ok = EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), n, params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return OpenSslError("HKDF");
  return out;
}

// AES-128-GCM in Tink's AesGcmJce layout: IV (12) | ciphertext | tag (16).
absl::StatusOr<std::string> GcmSeal(absl::string_view key, absl::string_view plain,
                                    absl::string_view aad) {
  FERRY_ASSIGN_OR_RETURN(std::string iv, Random(kGcmIvBytes));
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx(EVP_CIPHER_CTX_new());
  std::string out = iv;
  out.resize(kGcmIvBytes + plain.size() + kGcmTagBytes);
  auto* body = reinterpret_cast<unsigned char*>(out.data() + kGcmIvBytes);
  int len = 0;
  if (ctx == nullptr ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_128_gcm(), nullptr, Bytes(key), Bytes(iv)) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, Bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), body, &len, Bytes(plain), static_cast<int>(plain.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), body + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kGcmTagBytes, body + plain.size()) !=
          1) {
    return OpenSslError("AES-GCM encryption");
  }
  return out;
}

// The plaintext, or nullopt when `sealed` does not open under `key` and `aad`.
absl::StatusOr<std::optional<std::string>> GcmOpen(absl::string_view key, absl::string_view sealed,
                                                   absl::string_view aad) {
  if (sealed.size() < kGcmIvBytes + kGcmTagBytes) return std::nullopt;
  const absl::string_view iv = sealed.substr(0, kGcmIvBytes);
  const absl::string_view body =
      sealed.substr(kGcmIvBytes, sealed.size() - kGcmIvBytes - kGcmTagBytes);
  std::string tag(sealed.substr(sealed.size() - kGcmTagBytes));
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx(EVP_CIPHER_CTX_new());
  std::string plain(body.size(), '\0');
  auto* out = reinterpret_cast<unsigned char*>(plain.data());
  int len = 0;
  if (ctx == nullptr ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_128_gcm(), nullptr, Bytes(key), Bytes(iv)) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, Bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), out, &len, Bytes(body), static_cast<int>(body.size())) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kGcmTagBytes, tag.data()) != 1) {
    return OpenSslError("AES-GCM decryption");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), out + len, &len) != 1) return std::nullopt;  // the tag
  return plain;
}

absl::StatusOr<Pkey> X25519Private(absl::string_view raw) {
  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, Bytes(raw), raw.size()));
  if (key == nullptr) return OpenSslError("loading an X25519 private key");
  return key;
}

absl::StatusOr<Secret> X25519Generate() {
  Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519"));
  std::string raw(kX25519Bytes, '\0');
  size_t len = raw.size();
  if (key == nullptr ||
      EVP_PKEY_get_raw_private_key(key.get(), reinterpret_cast<unsigned char*>(raw.data()), &len) !=
          1 ||
      len != kX25519Bytes) {
    Secret::Wipe(raw);
    return OpenSslError("X25519 key generation");
  }
  return Secret(std::move(raw));
}

absl::StatusOr<std::string> X25519Public(const Pkey& key) {
  std::string raw(kX25519Bytes, '\0');
  size_t len = raw.size();
  if (EVP_PKEY_get_raw_public_key(key.get(), reinterpret_cast<unsigned char*>(raw.data()), &len) !=
          1 ||
      len != kX25519Bytes) {
    return OpenSslError("X25519 public key");
  }
  return raw;
}

// The shared secret, or nullopt for a peer key that is not one (wrong size, or one of
// the small-order points whose shared secret is all zeros).
absl::StatusOr<std::optional<Secret>> X25519Shared(const Pkey& own, absl::string_view peer_public) {
  if (peer_public.size() != kX25519Bytes) return std::nullopt;
  Pkey peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, Bytes(peer_public),
                                        peer_public.size()));
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new(own.get(), nullptr));
  if (peer == nullptr || ctx == nullptr || EVP_PKEY_derive_init(ctx.get()) != 1) {
    return OpenSslError("X25519 derivation");
  }
  if (EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1) return std::nullopt;
  std::string shared(kX25519Bytes, '\0');
  size_t len = shared.size();
  if (EVP_PKEY_derive(ctx.get(), reinterpret_cast<unsigned char*>(shared.data()), &len) != 1 ||
      len != kX25519Bytes) {
    Secret::Wipe(shared);
    return std::nullopt;
  }
  return Secret(std::move(shared));
}

// The AES-GCM additional data, which is also HKDF's info: app id | salt | transcript.
std::string AadOf(absl::string_view app_id, absl::string_view salt, absl::string_view transcript) {
  return absl::StrCat(app_id, salt, transcript);
}

// The key that seals public keys (HKDF of the secret).
absl::StatusOr<Secret> KeyEncryptionKey(absl::string_view secret, absl::string_view salt,
                                        absl::string_view aad) {
  FERRY_ASSIGN_OR_RETURN(std::string kek, Hkdf(secret, salt, aad, kKekBytes));
  return Secret(std::move(kek));
}

// Seals `public_key` for `app_id` after `transcript` (AuthEngine.encryptEphemeralPublicKey).
absl::StatusOr<AuthMessage> SealPublicKey(absl::string_view app_id, absl::string_view secret,
                                          absl::string_view public_key,
                                          absl::string_view transcript) {
  AuthMessage m;
  m.app_id = std::string(app_id);
  FERRY_ASSIGN_OR_RETURN(m.salt, Random(kSaltBytes));
  const std::string aad = AadOf(app_id, m.salt, transcript);
  FERRY_ASSIGN_OR_RETURN(const Secret kek, KeyEncryptionKey(secret, m.salt, aad));
  FERRY_ASSIGN_OR_RETURN(m.ciphertext, GcmSeal(kek.view(), public_key, aad));
  return m;
}

// The peer's public key out of `m`, or nullopt when it does not open.
absl::StatusOr<std::optional<std::string>> OpenPublicKey(const AuthMessage& m,
                                                         absl::string_view secret,
                                                         absl::string_view transcript) {
  const std::string aad = AadOf(m.app_id, m.salt, transcript);
  FERRY_ASSIGN_OR_RETURN(const Secret kek, KeyEncryptionKey(secret, m.salt, aad));
  return GcmOpen(kek.view(), m.ciphertext, aad);
}

// One side's session keys (the client's, or the server's) for `version`.
absl::StatusOr<SessionKeys> KeysOf(absl::string_view shared, absl::string_view transcript,
                                   int version, bool client) {
  SessionKeys keys;
  if (version == 1) {
    keys.key = Secret(shared);
  } else {
    FERRY_ASSIGN_OR_RETURN(std::string derived, Hkdf(shared, transcript, "derivedKey", kKekBytes));
    keys.key = Secret(std::move(derived));
  }
  FERRY_ASSIGN_OR_RETURN(std::string server_sends,
                         Hkdf(shared, transcript, "inputIv", kCtrIvBytes));
  FERRY_ASSIGN_OR_RETURN(std::string client_sends,
                         Hkdf(shared, transcript, "outputIv", kCtrIvBytes));
  keys.in_iv = client ? std::move(server_sends) : std::move(client_sends);
  keys.out_iv = client ? std::move(client_sends) : std::move(server_sends);
  return keys;
}

}  // namespace

void CtrCipher::Free::operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }

absl::StatusOr<CtrCipher> CtrCipher::Create(absl::string_view key, absl::string_view iv) {
  const EVP_CIPHER* cipher = key.size() == 16   ? EVP_aes_128_ctr()
                             : key.size() == 32 ? EVP_aes_256_ctr()
                                                : nullptr;
  if (cipher == nullptr || iv.size() != kCtrIvBytes) {
    return absl::InvalidArgumentError(absl::StrCat("AES-CTR takes a 16- or 32-byte key and a ",
                                                   kCtrIvBytes, "-byte IV; got ", key.size(),
                                                   " and ", iv.size()));
  }
  std::unique_ptr<EVP_CIPHER_CTX, Free> ctx(EVP_CIPHER_CTX_new());
  if (ctx == nullptr ||
      EVP_EncryptInit_ex(ctx.get(), cipher, nullptr, Bytes(key), Bytes(iv)) != 1) {
    return OpenSslError("AES-CTR set-up");
  }
  return CtrCipher(std::move(ctx));
}

void CtrCipher::Apply(const char* in, char* out, size_t n) {
  // In counter mode an update of any length succeeds and writes as many bytes as it
  // takes; lengths are an int's.
  while (n > 0) {
    const int step = static_cast<int>(std::min<size_t>(n, INT_MAX / 2));
    int len = 0;
    EVP_EncryptUpdate(ctx_.get(), reinterpret_cast<unsigned char*>(out), &len,
                      reinterpret_cast<const unsigned char*>(in), step);
    in += step;
    out += step;
    n -= static_cast<size_t>(step);
  }
}

absl::StatusOr<AuthEngineAnswer> AnswerChallenge(absl::string_view secret,
                                                 const AuthMessage& challenge) {
  const auto refused = [&](absl::string_view why) {
    return absl::PermissionDeniedError(
        absl::StrCat("AuthEngine: the challenge of application ", challenge.app_id, " ", why));
  };
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> client_public,
                         OpenPublicKey(challenge, secret, ""));
  if (!client_public.has_value()) {
    return refused("does not open with its secret (a wrong secret, or a changed message)");
  }
  FERRY_ASSIGN_OR_RETURN(const Secret server_private, X25519Generate());
  FERRY_ASSIGN_OR_RETURN(Pkey own, X25519Private(server_private.view()));
  FERRY_ASSIGN_OR_RETURN(std::optional<Secret> shared, X25519Shared(own, *client_public));
  if (!shared.has_value()) return refused("holds no usable X25519 key");
  FERRY_ASSIGN_OR_RETURN(const std::string server_public, X25519Public(own));
  const std::string challenge_bytes = EncodeAuthMessage(challenge);
  AuthEngineAnswer answer;
  FERRY_ASSIGN_OR_RETURN(answer.response,
                         SealPublicKey(challenge.app_id, secret, server_public, challenge_bytes));
  const std::string transcript = challenge_bytes + EncodeAuthMessage(answer.response);
  FERRY_ASSIGN_OR_RETURN(answer.v1, KeysOf(shared->view(), transcript, 1, /*client=*/false));
  FERRY_ASSIGN_OR_RETURN(answer.v2, KeysOf(shared->view(), transcript, 2, /*client=*/false));
  return answer;
}

absl::StatusOr<AuthEngineClient> AuthEngineClient::Create(std::string app_id, Secret secret,
                                                          int version, Secret private_key) {
  if (version != 1 && version != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("AuthEngine version ", version, ": Spark has versions 1 and 2"));
  }
  if (private_key.empty()) {
    FERRY_ASSIGN_OR_RETURN(private_key, X25519Generate());
  } else if (private_key.size() != kX25519Bytes) {
    return absl::InvalidArgumentError("an X25519 private key is 32 bytes");
  }
  return AuthEngineClient(std::move(app_id), std::move(secret), version, std::move(private_key));
}

AuthEngineClient::AuthEngineClient(std::string app_id, Secret secret, int version,
                                   Secret private_key)
    : app_id_(std::move(app_id)),
      secret_(std::move(secret)),
      version_(version),
      private_key_(std::move(private_key)) {}

absl::StatusOr<AuthMessage> AuthEngineClient::Challenge() const {
  FERRY_ASSIGN_OR_RETURN(Pkey own, X25519Private(private_key_.view()));
  FERRY_ASSIGN_OR_RETURN(const std::string public_key, X25519Public(own));
  return SealPublicKey(app_id_, secret_.view(), public_key, "");
}

absl::StatusOr<SessionKeys> AuthEngineClient::Finish(const AuthMessage& challenge,
                                                     const AuthMessage& response) const {
  const auto refused = [&](absl::string_view why) {
    return absl::PermissionDeniedError(
        absl::StrCat("AuthEngine: the server's response for application ", app_id_, " ", why));
  };
  if (response.app_id != app_id_ || challenge.app_id != app_id_) {
    return refused(absl::StrCat("names application ", response.app_id));
  }
  const std::string challenge_bytes = EncodeAuthMessage(challenge);
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> server_public,
                         OpenPublicKey(response, secret_.view(), challenge_bytes));
  if (!server_public.has_value()) {
    return refused("does not open with the secret (a server without it, or a changed message)");
  }
  FERRY_ASSIGN_OR_RETURN(Pkey own, X25519Private(private_key_.view()));
  FERRY_ASSIGN_OR_RETURN(std::optional<Secret> shared, X25519Shared(own, *server_public));
  if (!shared.has_value()) return refused("holds no usable X25519 key");
  return KeysOf(shared->view(), challenge_bytes + EncodeAuthMessage(response), version_,
                /*client=*/true);
}

}  // namespace ferry::spark
