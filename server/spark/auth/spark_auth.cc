#include "server/spark/auth/spark_auth.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/dir_entries.h"
#include "common/spark/sasl.h"
#include "common/status_macros.h"
#include "server/base/small_file.h"
#include "server/storage/ids.h"

namespace ferry {

namespace {

// One whole exchange with auth-conf between a server and a client of ours, and a record
// sealed and opened: what every handshake will need of OpenSSL.
absl::Status ProbeSasl() {
  absl::StatusOr<std::unique_ptr<spark::SaslServer>> server = spark::SaslServer::Create("-");
  absl::StatusOr<std::unique_ptr<spark::SaslClient>> client =
      spark::SaslClient::Create("-", /*encrypt=*/true);
  if (!server.ok()) return server.status();
  if (!client.ok()) return client.status();
  absl::StatusOr<std::string> token = (*client)->Start();
  while (token.ok() && !(*client)->complete()) {
    FERRY_ASSIGN_OR_RETURN(std::string answer, (*server)->Step(*token));
    token = (*client)->Step(answer);
  }
  if (!token.ok()) return token.status();
  std::unique_ptr<spark::SaslCipher> sealing = (*client)->TakeCipher();
  std::unique_ptr<spark::SaslCipher> opening = (*server)->TakeCipher();
  if (sealing == nullptr || opening == nullptr) return absl::InternalError("no SASL layer");
  std::string wire, plain;
  FERRY_RETURN_IF_ERROR(sealing->Seal("probe", &wire));
  FERRY_RETURN_IF_ERROR(opening->Open(wire, &plain));
  return plain == "probe" ? absl::OkStatus() : absl::InternalError("a record did not open");
}

// Spark's secrets are short strings (Spark generates 256 bits, base64-encoded).
constexpr size_t kMaxSecretBytes = 4096;

// A secret file's contents, surrounding whitespace dropped.
absl::StatusOr<Secret> ReadSecret(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadSmallFile(path, kMaxSecretBytes);
  if (!bytes.ok()) {
    if (absl::IsInvalidArgument(bytes.status())) {
      return absl::InvalidArgumentError(absl::StrCat(bytes.status().message(), ": not a secret"));
    }
    return bytes.status();
  }
  const Secret file(*std::move(bytes));
  Secret secret(absl::StripAsciiWhitespace(file.view()));
  if (secret.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return secret;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparkSecrets>> SparkSecrets::Load(const Options& options,
                                                                 const HandedOffApps* handed_off) {
  auto secrets = std::make_unique<SparkSecrets>();
  if (options.yarn || options.apps) {
    if (handed_off == nullptr) {
      return absl::InvalidArgumentError(options.yarn ? "--spark-auth-yarn needs --spark-yarn-dir"
                                                     : "--spark-auth-apps needs --spark-apps-dir");
    }
    secrets->handed_off_ = handed_off;
  }
  secrets->auth_engine_v1_ = options.auth_engine_v1;
  if (!options.secret_file.empty()) {
    absl::StatusOr<Secret> secret = ReadSecret(options.secret_file);
    if (!secret.ok()) {
      return absl::Status(secret.status().code(),
                          absl::StrCat("--spark-auth-secret-file: ", secret.status().message()));
    }
    secrets->shared_ = *std::move(secret);
  }
  if (!options.secrets_dir.empty()) {
    FERRY_RETURN_IF_ERROR(
        CheckDirectory("--spark-auth-secrets-dir", options.secrets_dir, R_OK | X_OK));
    secrets->dir_ = options.secrets_dir;
  }
  if (secrets->required()) {
    // Fails here, at start, rather than at each client's handshake: an OpenSSL without
    // MD5 or DES (a FIPS-only configuration) cannot run DIGEST-MD5.
    if (absl::Status s = ProbeSasl(); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "spark.authenticate needs SASL DIGEST-MD5, which needs OpenSSL's MD5, HMAC-MD5 and "
          "DES-EDE: ",
          s.message()));
    }
  }
  return secrets;
}

absl::StatusOr<Secret> SparkSecrets::SecretOf(absl::string_view app_id) const {
  if (handed_off_ != nullptr) {
    absl::StatusOr<HandedOffApps::ServiceData> data = handed_off_->Find(app_id);
    if (data.ok() && data->secret.has_value()) return *std::move(data->secret);
    if (!data.ok() && !absl::IsNotFound(data.status())) {
      return absl::PermissionDeniedError(
          absl::StrCat("no usable secret for application ", app_id, ": ", data.status().message()));
    }
  }
  if (!dir_.empty() && IsValidAppId(app_id)) {
    absl::StatusOr<Secret> own = ReadSecret(absl::StrCat(dir_, "/", app_id));
    if (own.ok()) return own;
    // A file that is there and cannot be read is the operator's to fix, not a reason to
    // fall back to the shared secret.
    if (!absl::IsNotFound(own.status())) {
      return absl::PermissionDeniedError(
          absl::StrCat("no usable secret for application ", app_id, ": ", own.status().message()));
    }
  }
  if (!shared_.empty()) return shared_;
  return absl::PermissionDeniedError(absl::StrCat("Trying to authenticate non-registered app ",
                                                  app_id,
                                                  " (this shuffle service has no secret for it)"));
}

void SparkSecrets::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  if (required()) FERRY_APPEND_STATS(FERRY_SPARK_AUTH_STATS, {&stats_}, out);
}

}  // namespace ferry
