// The authentication layer of a Spark connection, message by message: Ferry's SASL and
// AuthEngine clients against it, and what it does with everything else before a
// connection has authenticated. Over real sockets, with Spark's own clients:
// spark_protocol_test and tests/e2e/spark_test.
#include "server/spark/auth/spark_authenticator.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/secret.h"
#include "common/spark/crypto.h"
#include "common/spark/sasl.h"
#include "common/spark/wire.h"
#include "gtest/gtest.h"
#include "server/spark/auth/spark_auth.h"

namespace ferry {
namespace {

namespace sw = ::ferry::spark;

constexpr uint64_t kMaxFrame = 1 << 20;

// Secrets: "right" for application app-1; no other application has one.
SparkAuthenticator::SecretLookup Lookup() {
  return [](const std::string& app_id) -> absl::StatusOr<Secret> {
    if (app_id == "app-1") return Secret("right");
    return absl::PermissionDeniedError(absl::StrCat("no secret for ", app_id));
  };
}

// Every application's secret is `secret`.
SparkAuthenticator::SecretLookup EveryAppHas(std::string secret) {
  return [secret = std::move(secret)](const std::string&) -> absl::StatusOr<Secret> {
    return Secret(secret);
  };
}

sw::ClientMessage Rpc(int64_t id, std::string body) { return sw::RpcRequest{id, std::move(body)}; }

sw::ClientMessage Sasl(int64_t id, const std::string& app, const std::string& token) {
  return Rpc(id, sw::EncodeSaslMessage({app, token}));
}

// Runs Ferry's SASL client against `auth` to the end; the last step.
SparkAuthenticator::Step SaslExchange(SparkAuthenticator& auth, const char* secret, bool encrypt,
                                      const std::string& app = "app-1") {
  absl::StatusOr<std::unique_ptr<sw::SaslClient>> client = sw::SaslClient::Create(secret, encrypt);
  EXPECT_TRUE(client.ok());
  SparkAuthenticator::Step challenge = auth.Take(Sasl(1, app, *(*client)->Start()));
  EXPECT_FALSE(challenge.close);
  EXPECT_TRUE(challenge.reply.ok()) << challenge.reply.status();
  EXPECT_FALSE(auth.authenticated());
  absl::StatusOr<std::string> response = (*client)->Step(*challenge.reply);
  EXPECT_TRUE(response.ok()) << response.status();
  SparkAuthenticator::Step last = auth.Take(Sasl(2, app, response.value_or("")));
  if (last.reply.ok()) {
    EXPECT_TRUE((*client)->Step(*last.reply).ok());  // the server's rspauth checks out
  }
  return last;
}

TEST(SparkAuthenticatorTest, SaslAuthenticatesAsTheApplicationAndCountsIt) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/false, kMaxFrame, Lookup());
  SparkAuthenticator::Step last = SaslExchange(auth, "right", /*encrypt=*/false);
  EXPECT_TRUE(last.reply.ok());
  EXPECT_EQ(last.request_id, 2);
  EXPECT_FALSE(last.close);
  EXPECT_EQ(last.layer, nullptr);  // auth: plain frames after it
  EXPECT_TRUE(auth.authenticated());
  EXPECT_EQ(auth.app(), "app-1");
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kAuthenticated), 1u);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kRefused), 0u);
}

TEST(SparkAuthenticatorTest, SaslAuthConfSealsWhatFollows) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/false, kMaxFrame, Lookup());
  SparkAuthenticator::Step last = SaslExchange(auth, "right", /*encrypt=*/true);
  EXPECT_TRUE(last.reply.ok());
  EXPECT_NE(last.layer, nullptr);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kEncrypted), 1u);
}

TEST(SparkAuthenticatorTest, AWrongSecretIsRefusedAndCloses) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/false, kMaxFrame, Lookup());
  SparkAuthenticator::Step last = SaslExchange(auth, "wrong", /*encrypt=*/false);
  EXPECT_EQ(last.reply.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(last.reply.status().message(), "app-1"));
  EXPECT_TRUE(last.close);
  EXPECT_FALSE(auth.authenticated());
  EXPECT_EQ(auth.app(), "");
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kRefused), 1u);
}

TEST(SparkAuthenticatorTest, AnApplicationWithoutASecretIsRefusedWithTheLookupsWords) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/false, kMaxFrame, Lookup());
  SparkAuthenticator::Step step = auth.Take(Sasl(1, "app-2", ""));
  EXPECT_TRUE(step.close);
  EXPECT_EQ(step.reply.status().message(), "no secret for app-2");
}

TEST(SparkAuthenticatorTest, AnythingElseFirstIsRefusedInSparksWords) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/false, kMaxFrame, Lookup());
  // An RPC that is no handshake: answered, then closed.
  SparkAuthenticator::Step rpc = auth.Take(Rpc(5, sw::EncodeOpenBlocks({"app-1", "0", {}})));
  EXPECT_EQ(rpc.request_id, 5);
  EXPECT_TRUE(rpc.close);
  EXPECT_TRUE(absl::StrContains(rpc.reply.status().message(), "Expected SaslMessage"));
  // A message without a request id: closed, nothing to answer.
  SparkAuthenticator::Step chunk = auth.Take(sw::ChunkFetchRequest{1, 0});
  EXPECT_FALSE(chunk.request_id.has_value());
  EXPECT_TRUE(chunk.close);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kRefused), 2u);
}

TEST(SparkAuthenticatorTest, ASaslHandshakeCannotChangeApplication) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/false, kMaxFrame, EveryAppHas("right"));
  EXPECT_FALSE(auth.Take(Sasl(1, "app-1", "")).close);
  SparkAuthenticator::Step step = auth.Take(Sasl(2, "app-2", "x"));
  EXPECT_TRUE(step.close);
  EXPECT_TRUE(absl::StrContains(step.reply.status().message(), "went on for application app-2"));
}

TEST(SparkAuthenticatorTest, AuthEngineAuthenticatesAndEncrypts) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/false, kMaxFrame, Lookup());
  absl::StatusOr<sw::AuthEngineClient> client =
      sw::AuthEngineClient::Create("app-1", Secret("right"), 2);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<sw::AuthMessage> challenge = client->Challenge();
  ASSERT_TRUE(challenge.ok());
  SparkAuthenticator::Step step = auth.Take(Rpc(3, sw::EncodeAuthMessage(*challenge)));
  ASSERT_TRUE(step.reply.ok()) << step.reply.status();
  EXPECT_FALSE(step.close);
  EXPECT_NE(step.layer, nullptr);
  EXPECT_EQ(auth.app(), "app-1");
  absl::StatusOr<sw::AuthMessage> response = sw::DecodeAuthMessage(*step.reply);
  ASSERT_TRUE(response.ok());
  EXPECT_TRUE(client->Finish(*challenge, *response).ok());
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kEncrypted), 1u);
}

TEST(SparkAuthenticatorTest, OverTlsAuthEngineIsDeclinedABoundedNumberOfTimes) {
  SparkSecrets secrets;
  SparkAuthenticator auth(secrets, /*tls=*/true, kMaxFrame, Lookup());
  absl::StatusOr<sw::AuthEngineClient> client =
      sw::AuthEngineClient::Create("app-1", Secret("right"), 2);
  ASSERT_TRUE(client.ok());
  const std::string challenge = sw::EncodeAuthMessage(*client->Challenge());
  for (int i = 0; i < SparkAuthenticator::kMaxAuthMessages; ++i) {
    SparkAuthenticator::Step declined = auth.Take(Rpc(i, challenge));
    EXPECT_EQ(declined.reply.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_FALSE(declined.close);
  }
  SparkAuthenticator::Step last = auth.Take(Rpc(9, challenge));
  EXPECT_TRUE(last.close);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kRefused), 1u);
  // SASL over TLS offers no encryption of its own.
  SparkAuthenticator sasl(secrets, /*tls=*/true, kMaxFrame, Lookup());
  SparkAuthenticator::Step challenge_step = sasl.Take(Sasl(1, "app-1", ""));
  ASSERT_TRUE(challenge_step.reply.ok());
  EXPECT_FALSE(absl::StrContains(*challenge_step.reply, "auth-conf"));
}

}  // namespace
}  // namespace ferry
