// The SASL exchange of spark.authenticate when spark.network.crypto.enabled is off
// (Spark's SparkSaslServer and SparkSaslClient): DIGEST-MD5 (RFC 2831) with Spark's
// fixed names: user base64("sparkSaslUser"), password base64(secret) (as SaslCredential
// encodes them), realm "default",
// digest-uri "null/default" (Spark creates its SASL peers with no protocol name and
// the realm as the server name), algorithm md5-sess, no authorization id. The secret is
// the application's spark.authenticate.secret, or the one its cluster manager gave it.
//
// The server offers the qualities of protection Spark's does, `auth` and `auth-conf`,
// and the client chooses:
//   * `auth`: authentication only; the connection goes on in plain frames (and
//     zero-copy), as Spark's does without spark.authenticate.enableSaslEncryption;
//   * `auth-conf` (enableSaslEncryption): every byte after the exchange travels in
//     SaslCipher's records, cipher 3des (the one Java's client picks; the only one
//     offered or taken).
//
// The mechanism is written here, over OpenSSL's MD5, HMAC-MD5 and DES-EDE, not taken
// from Cyrus SASL: on Debian 12 (Cyrus 2.1.28, OpenSSL 3) Cyrus's 3des fails to start
// ("couldn't init cipher 3des"), its RC4 leaks a cipher per connection, and it does not
// hand out the session keys a record layer run on the connection's own buffers needs.
// It is driven one token at a time with no I/O of its own, so a fiber can run it.
//
// Errors are PERMISSION_DENIED (the peer failed to authenticate, or sent tokens that are
// not DIGEST-MD5's) or INTERNAL (OpenSSL failed); a secret is never in them.
#ifndef FERRY_COMMON_SPARK_SASL_H_
#define FERRY_COMMON_SPARK_SASL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/secret.h"

namespace ferry::spark {

namespace sasl_internal {
struct Keys;      // one direction's sealing cipher and integrity key
struct Exchange;  // what an exchange in progress has said
}  // namespace sasl_internal

// The `auth-conf` security layer of one end: DIGEST-MD5's wrapped messages (RFC 2831
// 2.4: 3DES-CBC, two keys, chained across messages, of the message, its padding and the
// first 10 bytes of HMAC-MD5(Ki, seq | message); then 00 01 and seq, a 4-byte counter
// from 0 each way), in Spark's SaslEncryption records:
//   record = frameLen:i64 (counting its own 8 bytes) | wrapped message
// Spark's encoding of the SASL user and password (SparkSaslServer.encodePassword):
// Netty's Base64.encode, standard alphabet with padding and a '\n' after every 76
// characters but the last (a secret of 57 bytes or more spans lines: YARN's generated
// 256-bit secret, 64 hex digits, does).
std::string SaslCredential(absl::string_view secret);

class SaslCipher {
 public:
  // The largest wrapped message taken from the peer, the maxbuf this end announces.
  static constexpr size_t kMaxRecordBytes = size_t{256} << 10;

  // The layer of one end from an exchange's H(A1) (16 bytes), `server` saying which
  // direction is whose, and the maxbuf the peer announced (1024 or more). SaslServer and
  // SaslClient make theirs so; the same H(A1) gives two ends that talk to each other.
  static absl::StatusOr<std::unique_ptr<SaslCipher>> FromExchange(absl::string_view ha1,
                                                                  bool server,
                                                                  uint64_t peer_maxbuf);

  ~SaslCipher();
  SaslCipher(const SaslCipher&) = delete;
  SaslCipher& operator=(const SaslCipher&) = delete;

  // Appends to *wire the records that carry `plain`: pieces of at most 64 KiB (Spark's
  // spark.network.sasl.maxEncryptedBlockSize) that wrap within the peer's maxbuf.
  absl::Status Seal(absl::string_view plain, std::string* wire);
  // Takes the peer's bytes as they arrive, in any pieces, and appends to *plain what the
  // records they complete carry. DATA_LOSS for a record that does not unwrap (changed on
  // the way, replayed, out of order, padded wrongly) or is over kMaxRecordBytes; the
  // connection is then over.
  absl::Status Open(absl::string_view wire, std::string* plain);

 private:
  friend class SaslServer;
  friend class SaslClient;
  SaslCipher(std::unique_ptr<sasl_internal::Keys> out, std::unique_ptr<sasl_internal::Keys> in,
             size_t max_plain);
  absl::Status Unwrap(absl::string_view wrapped, std::string* plain);

  std::unique_ptr<sasl_internal::Keys> out_;
  std::unique_ptr<sasl_internal::Keys> in_;
  size_t max_plain_;  // of a piece Seal wraps
  // Open's place in the peer's stream: the record being read, its length once known.
  std::string record_;
  uint64_t record_bytes_ = 0;
  std::string scratch_;  // what Open decrypts into, reused
};

class SaslServer {
 public:
  // `offer_encryption`: offer `auth-conf` beside `auth` (Ferry does but over TLS, where
  // Spark 4 turns SASL encryption off).
  static absl::StatusOr<std::unique_ptr<SaslServer>> Create(absl::string_view secret,
                                                            bool offer_encryption = true);
  ~SaslServer();
  SaslServer(const SaslServer&) = delete;
  SaslServer& operator=(const SaslServer&) = delete;

  // Takes the client's next token and returns the server's answer: the challenge for
  // the client's empty first token, then, for a right response, `rspauth` (which the
  // client checks, so it authenticates the server too) and complete() turns true.
  absl::StatusOr<std::string> Step(absl::string_view client_token);
  bool complete() const { return complete_; }
  // After complete(): the security layer when the client chose `auth-conf` (once), null
  // for `auth`.
  std::unique_ptr<SaslCipher> TakeCipher() { return std::move(cipher_); }

 private:
  SaslServer() = default;

  Secret password_;  // base64(secret)
  std::string nonce_;
  bool offer_encryption_ = true;
  bool challenged_ = false;
  bool complete_ = false;
  std::unique_ptr<SaslCipher> cipher_;
};

class SaslClient {
 public:
  // `encrypt`: ask for `auth-conf` (as spark.authenticate.enableSaslEncryption does), and
  // take nothing less; otherwise `auth`.
  static absl::StatusOr<std::unique_ptr<SaslClient>> Create(absl::string_view secret,
                                                            bool encrypt = false);
  ~SaslClient();
  SaslClient(const SaslClient&) = delete;
  SaslClient& operator=(const SaslClient&) = delete;

  // The first token (empty: DIGEST-MD5 begins with the server's challenge).
  absl::StatusOr<std::string> Start();
  // Takes the server's token and returns the next one to send, until complete(), after
  // which the server's last token (its rspauth) has been checked and nothing is sent.
  absl::StatusOr<std::string> Step(absl::string_view server_token);
  bool complete() const { return complete_; }
  // After complete() with `encrypt`: the security layer (once).
  std::unique_ptr<SaslCipher> TakeCipher() { return std::move(cipher_); }

 private:
  SaslClient() = default;

  Secret password_;  // base64(secret)
  bool encrypt_ = false;
  std::unique_ptr<sasl_internal::Exchange> exchange_;  // after the challenge
  bool complete_ = false;
  std::unique_ptr<SaslCipher> cipher_;
};

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_SASL_H_
