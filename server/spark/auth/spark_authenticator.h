// The authentication layer of a Spark connection (spark.authenticate), between TLS and
// the dispatcher: it takes every message that arrives before the connection has
// authenticated, runs the handshake the client chose (SASL DIGEST-MD5, or Spark's
// AuthEngine and then AES-CTR on every byte), and ends as Spark's own service does:
// authenticated as one application, or refused and the connection closed. The
// dispatcher behind it sees only an authenticated connection's messages and knows only
// the application it authenticated as. docs/protocol.md has the bytes; docs/security.md
// what each mode protects.
#ifndef FERRY_SERVER_SPARK_AUTH_SPARK_AUTHENTICATOR_H_
#define FERRY_SERVER_SPARK_AUTH_SPARK_AUTHENTICATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "common/secret.h"
#include "common/spark/sasl.h"
#include "common/spark/wire.h"
#include "server/dataplane/security_layer.h"
#include "server/spark/auth/spark_auth.h"

namespace ferry {

class SparkAuthenticator {
 public:
  // Where an application's secret comes from (SparkSecrets::SecretOf, perhaps on a
  // blocking worker).
  using SecretLookup = absl::AnyInvocable<absl::StatusOr<Secret>(const std::string& app_id)>;

  // What the connection does with one message.
  struct Step {
    // The request the reply answers; none for a message without one (the connection
    // then only closes).
    std::optional<int64_t> request_id;
    absl::StatusOr<std::string> reply = std::string();
    // Sent after the reply, in clear; every byte after it is sealed by it.
    std::unique_ptr<SecurityLayer> layer;
    // The connection closes after the reply.
    bool close = false;
  };

  // Handshake messages a connection may send before it has authenticated: DIGEST-MD5
  // takes two (the empty first token, the response); the bound holds whatever the
  // mechanism does. Spark's AuthEngine takes one message, which authenticates or closes
  // the connection, or over TLS is declined (and counted here) so that the client goes
  // on with SASL.
  static constexpr int kMaxAuthMessages = 4;

  // `secrets` counts the outcomes and must outlive the authenticator. `tls`: the
  // connection is TLS already (AuthEngine is declined, SASL offers no encryption).
  // `max_frame_bytes`: the largest request frame the connection takes, which the
  // AuthEngine's layer checks before it decrypts one.
  SparkAuthenticator(SparkSecrets& secrets, bool tls, uint64_t max_frame_bytes,
                     SecretLookup secret_of)
      : secrets_(secrets),
        tls_(tls),
        max_frame_bytes_(max_frame_bytes),
        secret_of_(std::move(secret_of)) {}

  // Takes the next message of a connection that has not authenticated.
  Step Take(const spark::ClientMessage& message);
  bool authenticated() const { return authenticated_; }
  // The application the connection authenticated as; empty before.
  const std::string& app() const { return app_; }
  // Whether a handshake has begun and not ended.
  bool in_handshake() const { return messages_ > 0 && !authenticated_; }
  // A connection another server authenticated as `app` (with no layer since: SASL's
  // plain frames) and handed over: authenticated here too. False, and nothing changed,
  // for a name no application has (IsValidAppId, server/storage/ids.h).
  bool Resume(const std::string& app);

 private:
  Step Sasl(int64_t request_id, absl::string_view body);
  Step AuthEngine(int64_t request_id, absl::string_view body);
  // A failed handshake: counted, answered with `status`, and the connection closes, as
  // Spark's service closes it: a client retries with a new one, and a peer guessing
  // the secret pays a connection per guess.
  Step Refuse(std::optional<int64_t> request_id, absl::Status status);
  Step Authenticated(int64_t request_id, std::string reply, std::string app,
                     std::unique_ptr<SecurityLayer> layer, SparkSecrets::Outcome outcome);

  SparkSecrets& secrets_;
  const bool tls_;
  const uint64_t max_frame_bytes_;
  SecretLookup secret_of_;
  std::unique_ptr<spark::SaslServer> sasl_;  // the SASL exchange under way
  std::string sasl_app_;
  int messages_ = 0;
  bool authenticated_ = false;
  std::string app_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_AUTH_SPARK_AUTHENTICATOR_H_
