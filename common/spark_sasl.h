// The SASL exchange of spark.authenticate when spark.network.crypto.enabled is off
// (Spark's SparkSaslServer and SparkSaslClient): DIGEST-MD5 (RFC 2831) with Spark's
// fixed names: user base64("sparkSaslUser"), password base64(secret), realm "default",
// digest-uri "null/default" (Spark creates its SASL peers with no protocol name and
// the realm as the server name). The secret is the application's
// spark.authenticate.secret, or the one its cluster manager gave it.
//
// The mechanism is Cyrus SASL's (Debian's libsasl2 and the DIGEST-MD5 plugin of
// libsasl2-modules): it is driven one token at a time with no I/O of its own, so a fiber
// can run it. The server's password comes from an auxiliary-property plugin of ours
// that asks the connection it serves, so no password database is read or written.
//
// The server offers `auth` and `auth-conf`, as Spark's does, and the client chooses:
// with `auth` the connection goes on in plain frames (and zero-copy); with `auth-conf`
// (spark.authenticate.enableSaslEncryption) every byte after the exchange travels in
// the security layer's records, which Spark's SaslEncryption frames as
//   record = frameLen:i64 (counting its own 8 bytes) | the wrapped bytes
// each wrapping at most the peer's maxbuf of plaintext (Spark's clients wrap 64 KiB).
// Only the RC4 ciphers are offered for it: Cyrus 2.1.28's DES and 3DES fail with
// OpenSSL 3.
#ifndef FERRY_COMMON_SPARK_SASL_H_
#define FERRY_COMMON_SPARK_SASL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

typedef struct sasl_conn sasl_conn_t;

namespace ferry::spark {

namespace sasl_internal {
// What the library's callbacks of one connection read: names and password as Spark
// encodes them.
struct Credentials;
}  // namespace sasl_internal

// What both ends share once the exchange is complete: its security layer, if any.
class SaslSession {
 public:
  virtual ~SaslSession();
  SaslSession(const SaslSession&) = delete;
  SaslSession& operator=(const SaslSession&) = delete;

  // The largest wrapped record taken from the peer (the maxbuf this end offers).
  static constexpr size_t kMaxRecordBytes = size_t{256} << 10;

  // Whether the exchange settled on a security layer (`auth-conf`, or `auth-int`), so
  // that every later byte must go through Seal and Open.
  bool has_layer() const;
  // Appends to *wire the records that carry `plain`.
  absl::Status Seal(absl::string_view plain, std::string* wire);
  // Takes the peer's bytes as they arrive, in any pieces; appends to *plain what the
  // records they complete carry. DATA_LOSS for a record that does not unwrap (tampered
  // with, replayed, out of order) or is over kMaxRecordBytes.
  absl::Status Open(absl::string_view wire, std::string* plain);

 protected:
  SaslSession();
  // What the connection's callbacks read; disposed of after the connection.
  std::unique_ptr<sasl_internal::Credentials> credentials_;
  sasl_conn_t* conn_ = nullptr;

 private:
  // Open's place in the peer's stream: the record length being read, and the bytes of
  // the record's payload still to come.
  std::string length_bytes_;
  uint64_t payload_left_ = 0;
};

// SASL's errors become PERMISSION_DENIED (the peer failed to authenticate) or INTERNAL
// (the library could not run), with Cyrus's own words; a secret is never in them.
class SaslServer : public SaslSession {
 public:
  // A server for one connection. INTERNAL when Cyrus SASL or its DIGEST-MD5 plugin is
  // missing (libsasl2-modules).
  static absl::StatusOr<std::unique_ptr<SaslServer>> Create(absl::string_view secret);

  // Takes the client's next token and returns the server's answer: the challenge for
  // the client's empty first token, then, for a right response, `rspauth` (which the
  // client checks, so it authenticates the server too) and complete() turns true.
  absl::StatusOr<std::string> Step(absl::string_view client_token);
  bool complete() const { return complete_; }

 private:
  SaslServer() = default;

  bool started_ = false;
  bool complete_ = false;
};

class SaslClient : public SaslSession {
 public:
  // `encrypt`: ask for `auth-conf` (as spark.authenticate.enableSaslEncryption does);
  // otherwise `auth`, the only protection it then accepts.
  static absl::StatusOr<std::unique_ptr<SaslClient>> Create(absl::string_view secret,
                                                            bool encrypt = false);

  // The first token (empty: DIGEST-MD5 begins with the server's challenge).
  absl::StatusOr<std::string> Start();
  // Takes the server's token and returns the next one to send, until complete(), after
  // which the server's last token (its rspauth) has been checked and nothing is sent.
  absl::StatusOr<std::string> Step(absl::string_view server_token);
  bool complete() const { return complete_; }

 private:
  SaslClient() = default;

  bool complete_ = false;
};

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_SASL_H_
