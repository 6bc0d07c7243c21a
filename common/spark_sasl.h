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
// Only the `auth` quality of protection is negotiated: authentication, then the
// connection goes on in plain frames (and zero-copy) as Spark's does without
// spark.authenticate.enableSaslEncryption. A client that asks for `auth-conf` finds no
// common protection and fails its handshake.
#ifndef FERRY_COMMON_SPARK_SASL_H_
#define FERRY_COMMON_SPARK_SASL_H_

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

// SASL's errors become PERMISSION_DENIED (the peer failed to authenticate) or INTERNAL
// (the library could not run), with Cyrus's own words; a secret is never in them.
class SaslServer {
 public:
  // A server for one connection. INTERNAL when Cyrus SASL or its DIGEST-MD5 plugin is
  // missing (libsasl2-modules).
  static absl::StatusOr<std::unique_ptr<SaslServer>> Create(absl::string_view secret);
  ~SaslServer();
  SaslServer(const SaslServer&) = delete;
  SaslServer& operator=(const SaslServer&) = delete;

  // Takes the client's next token and returns the server's answer: the challenge for
  // the client's empty first token, then, for a right response, `rspauth` (which the
  // client checks, so it authenticates the server too) and complete() turns true.
  absl::StatusOr<std::string> Step(absl::string_view client_token);
  bool complete() const { return complete_; }

 private:
  SaslServer() = default;

  std::unique_ptr<sasl_internal::Credentials> credentials_;
  sasl_conn_t* conn_ = nullptr;
  bool started_ = false;
  bool complete_ = false;
};

class SaslClient {
 public:
  static absl::StatusOr<std::unique_ptr<SaslClient>> Create(absl::string_view secret);
  ~SaslClient();
  SaslClient(const SaslClient&) = delete;
  SaslClient& operator=(const SaslClient&) = delete;

  // The first token (empty: DIGEST-MD5 begins with the server's challenge).
  absl::StatusOr<std::string> Start();
  // Takes the server's token and returns the next one to send, until complete(), after
  // which the server's last token (its rspauth) has been checked and nothing is sent.
  absl::StatusOr<std::string> Step(absl::string_view server_token);
  bool complete() const { return complete_; }

 private:
  SaslClient() = default;

  std::unique_ptr<sasl_internal::Credentials> credentials_;
  sasl_conn_t* conn_ = nullptr;
  bool complete_ = false;
};

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_SASL_H_
