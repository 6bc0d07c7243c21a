#include "server/spark/auth/spark_authenticator.h"

#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/spark/crypto.h"
#include "server/spark/auth/spark_cipher.h"
#include "server/storage/ids.h"

namespace ferry {

namespace {

// SASL's auth-conf as the connection's security layer.
class SaslLayer final : public SecurityLayer {
 public:
  explicit SaslLayer(std::unique_ptr<spark::SaslCipher> cipher) : cipher_(std::move(cipher)) {}
  absl::Status Seal(absl::string_view plain, std::string* wire) override {
    return cipher_->Seal(plain, wire);
  }
  absl::Status Open(absl::string_view wire, std::string* plain) override {
    return cipher_->Open(wire, plain);
  }

 private:
  std::unique_ptr<spark::SaslCipher> cipher_;
};

absl::Status TooManyMessages(absl::string_view mechanism) {
  return absl::PermissionDeniedError(absl::StrCat(mechanism, "more than ",
                                                  SparkAuthenticator::kMaxAuthMessages,
                                                  " handshake messages without authenticating"));
}

}  // namespace

SparkAuthenticator::Step SparkAuthenticator::Take(const spark::ClientMessage& message) {
  const auto* rpc = std::get_if<spark::RpcRequest>(&message);
  const uint8_t tag = rpc != nullptr && !rpc->body.empty() ? static_cast<uint8_t>(rpc->body[0]) : 0;
  if (tag == spark::kSaslMessageTag) return Sasl(rpc->request_id, rpc->body);
  // A SASL exchange under way is not switched to another handshake.
  if (tag == spark::kAuthMessageTag && sasl_ == nullptr) {
    return AuthEngine(rpc->request_id, rpc->body);
  }
  // Spark's words for anything else before authentication.
  return Refuse(rpc != nullptr ? std::optional<int64_t>(rpc->request_id) : std::nullopt,
                absl::PermissionDeniedError("Expected SaslMessage, received something else (maybe "
                                            "your client does not have SASL enabled?)"));
}

SparkAuthenticator::Step SparkAuthenticator::Refuse(std::optional<int64_t> request_id,
                                                    absl::Status status) {
  secrets_.CountHandshake(SparkSecrets::Outcome::kRefused);
  Step step;
  step.request_id = request_id;
  step.reply = std::move(status);
  step.close = true;
  return step;
}

SparkAuthenticator::Step SparkAuthenticator::Authenticated(int64_t request_id, std::string reply,
                                                           std::string app,
                                                           std::unique_ptr<SecurityLayer> layer,
                                                           SparkSecrets::Outcome outcome) {
  secrets_.CountHandshake(outcome);
  authenticated_ = true;
  app_ = std::move(app);
  Step step;
  step.request_id = request_id;
  step.reply = std::move(reply);
  step.layer = std::move(layer);
  return step;
}

SparkAuthenticator::Step SparkAuthenticator::AuthEngine(int64_t request_id,
                                                        absl::string_view body) {
  if (tls_) {
    // Spark does not run the AuthEngine's encryption inside TLS; a client that asks
    // falls back to SASL on this connection (spark.network.crypto.saslFallback). The
    // declines count against the handshake's messages, so that they cannot go on.
    if (++messages_ > kMaxAuthMessages) return Refuse(request_id, TooManyMessages(""));
    Step step;
    step.request_id = request_id;
    step.reply =
        absl::FailedPreconditionError("this connection is TLS already: authenticate with SASL");
    return step;
  }
  absl::StatusOr<spark::AuthMessage> challenge = spark::DecodeAuthMessage(body);
  if (!challenge.ok()) return Refuse(request_id, challenge.status());
  absl::StatusOr<Secret> secret = secret_of_(challenge->app_id);
  if (!secret.ok()) return Refuse(request_id, secret.status());
  absl::StatusOr<spark::AuthEngineAnswer> answer =
      spark::AnswerChallenge(secret->view(), *challenge);
  if (!answer.ok()) return Refuse(request_id, answer.status());
  std::vector<SparkCtrLayer::Candidate> candidates;
  if (secrets_.auth_engine_v1()) candidates.push_back({1, std::move(answer->v1)});
  candidates.push_back({2, std::move(answer->v2)});
  SparkSecrets& secrets = secrets_;
  absl::StatusOr<std::unique_ptr<SparkCtrLayer>> layer =
      SparkCtrLayer::Create(std::move(candidates), max_frame_bytes_,
                            [&secrets](int version) { secrets.CountAuthEngineSession(version); });
  if (!layer.ok()) return Refuse(request_id, layer.status());
  // The response goes in clear; every byte after it, either way, is encrypted.
  return Authenticated(request_id, spark::EncodeAuthMessage(answer->response), challenge->app_id,
                       *std::move(layer), SparkSecrets::Outcome::kEncrypted);
}

SparkAuthenticator::Step SparkAuthenticator::Sasl(int64_t request_id, absl::string_view body) {
  if (++messages_ > kMaxAuthMessages) return Refuse(request_id, TooManyMessages("SASL: "));
  absl::StatusOr<spark::SaslMessage> message = spark::DecodeSaslMessage(body);
  if (!message.ok()) return Refuse(request_id, message.status());
  if (sasl_ == nullptr) {
    absl::StatusOr<Secret> secret = secret_of_(message->app_id);
    if (!secret.ok()) return Refuse(request_id, secret.status());
    absl::StatusOr<std::unique_ptr<spark::SaslServer>> server =
        spark::SaslServer::Create(secret->view(), /*offer_encryption=*/!tls_);
    if (!server.ok()) return Refuse(request_id, server.status());
    sasl_ = *std::move(server);
    sasl_app_ = message->app_id;
  } else if (message->app_id != sasl_app_) {
    return Refuse(request_id, absl::PermissionDeniedError(absl::StrCat(
                                  "SASL: a handshake begun for application ", sasl_app_,
                                  " went on for application ", message->app_id)));
  }
  absl::StatusOr<std::string> token = sasl_->Step(message->token);
  if (!token.ok()) {
    return Refuse(request_id, absl::PermissionDeniedError(
                                  absl::StrCat("SASL authentication of application ", sasl_app_,
                                               " failed: ", token.status().message())));
  }
  if (!sasl_->complete()) {
    Step step;
    step.request_id = request_id;
    step.reply = *std::move(token);
    return step;
  }
  std::unique_ptr<spark::SaslCipher> cipher = sasl_->TakeCipher();
  sasl_.reset();
  // The last token goes in clear; with auth-conf, every byte after it is sealed.
  const SparkSecrets::Outcome outcome =
      cipher != nullptr ? SparkSecrets::Outcome::kEncrypted : SparkSecrets::Outcome::kAuthenticated;
  std::unique_ptr<SecurityLayer> layer;
  if (cipher != nullptr) layer = std::make_unique<SaslLayer>(std::move(cipher));
  return Authenticated(request_id, *std::move(token), std::move(sasl_app_), std::move(layer),
                       outcome);
}

bool SparkAuthenticator::Resume(const std::string& app) {
  if (!IsValidAppId(app)) return false;
  authenticated_ = true;
  app_ = app;
  return true;
}

}  // namespace ferry
