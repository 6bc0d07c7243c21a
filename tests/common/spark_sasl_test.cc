// Spark's SASL DIGEST-MD5 exchange, Ferry's server against Ferry's client, both over
// Cyrus SASL. Against Spark's own Java peers: tests/e2e/spark_auth_test.
#include "common/spark_sasl.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ferry::spark {
namespace {

// The tokens of one exchange, as they went.
struct Exchange {
  std::string challenge;
  std::string response;
  std::string rspauth;
};

Exchange Authenticate(SaslServer& server, SaslClient& client) {
  Exchange e;
  absl::StatusOr<std::string> first = client.Start();
  EXPECT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, "");
  absl::StatusOr<std::string> challenge = server.Step(*first);
  EXPECT_TRUE(challenge.ok()) << challenge.status();
  e.challenge = *challenge;
  absl::StatusOr<std::string> response = client.Step(e.challenge);
  EXPECT_TRUE(response.ok()) << response.status();
  e.response = *response;
  return e;
}

TEST(SparkSaslTest, TheSameSecretAuthenticatesBothWays) {
  auto server = SaslServer::Create("shared secret");
  auto client = SaslClient::Create("shared secret");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(client.ok()) << client.status();
  Exchange e = Authenticate(**server, **client);
  // Spark's names, and only authentication offered.
  EXPECT_TRUE(absl::StrContains(e.challenge, "realm=\"default\"")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.challenge, "qop=\"auth\"")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.response, "username=\"c3BhcmtTYXNsVXNlcg==\"")) << e.response;
  EXPECT_TRUE(absl::StrContains(e.response, "digest-uri=\"null/default\"")) << e.response;
  EXPECT_FALSE(absl::StrContains(e.response, "shared secret"));
  EXPECT_FALSE((*server)->complete());

  absl::StatusOr<std::string> rspauth = (*server)->Step(e.response);
  ASSERT_TRUE(rspauth.ok()) << rspauth.status();
  EXPECT_TRUE((*server)->complete());
  EXPECT_TRUE(absl::StartsWith(*rspauth, "rspauth=")) << *rspauth;
  absl::StatusOr<std::string> last = (*client)->Step(*rspauth);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE((*client)->complete());
  EXPECT_EQ(*last, "");

  EXPECT_EQ((*server)->Step("more").status().code(), absl::StatusCode::kFailedPrecondition);
}

// Every exchange is a full one, as Spark's server expects: a client does not try to
// reuse a past session's nonce (Cyrus's fast reauthentication).
TEST(SparkSaslTest, EachExchangeStartsAfresh) {
  for (int i = 0; i < 3; ++i) {
    auto server = SaslServer::Create("s3cret");
    auto client = SaslClient::Create("s3cret");
    ASSERT_TRUE(server.ok() && client.ok());
    const Exchange e = Authenticate(**server, **client);
    EXPECT_TRUE(absl::StrContains(e.response, "nc=00000001")) << e.response;
    absl::StatusOr<std::string> rspauth = (*server)->Step(e.response);
    ASSERT_TRUE(rspauth.ok()) << rspauth.status();
    ASSERT_TRUE((*client)->Step(*rspauth).ok());
    EXPECT_TRUE((*client)->complete());
  }
}

TEST(SparkSaslTest, AWrongSecretIsRefused) {
  auto server = SaslServer::Create("the cluster's secret");
  auto client = SaslClient::Create("a guess");
  ASSERT_TRUE(server.ok() && client.ok());
  Exchange e = Authenticate(**server, **client);
  absl::StatusOr<std::string> refused = (*server)->Step(e.response);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_FALSE((*server)->complete());
  EXPECT_FALSE(absl::StrContains(refused.status().message(), "secret"));
}

// A response recorded from one exchange does not answer another's challenge (its nonce).
TEST(SparkSaslTest, AReplayedResponseIsRefused) {
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret");
  ASSERT_TRUE(server.ok() && client.ok());
  const Exchange recorded = Authenticate(**server, **client);
  ASSERT_TRUE((*server)->Step(recorded.response).ok());

  auto other = SaslServer::Create("s3cret");
  ASSERT_TRUE(other.ok());
  absl::StatusOr<std::string> challenge = (*other)->Step("");
  ASSERT_TRUE(challenge.ok());
  EXPECT_NE(*challenge, recorded.challenge);
  absl::StatusOr<std::string> replayed = (*other)->Step(recorded.response);
  EXPECT_EQ(replayed.status().code(), absl::StatusCode::kPermissionDenied) << replayed.status();
  EXPECT_FALSE((*other)->complete());
}

TEST(SparkSaslTest, ATruncatedOrGarbledResponseIsRefused) {
  for (const std::string& bad : {std::string(), std::string("username=\"x\""),
                                 std::string(300, '\xff'), std::string("\0\0\0", 3)}) {
    auto server = SaslServer::Create("s3cret");
    auto client = SaslClient::Create("s3cret");
    ASSERT_TRUE(server.ok() && client.ok());
    Exchange e = Authenticate(**server, **client);
    absl::StatusOr<std::string> refused =
        (*server)->Step(bad.empty() ? e.response.substr(0, e.response.size() / 2) : bad);
    EXPECT_FALSE(refused.ok()) << bad;
    EXPECT_FALSE((*server)->complete());
  }
}

// The client checks the server's rspauth: a server that does not know the secret cannot
// pretend it authenticated.
TEST(SparkSaslTest, TheClientRefusesAForgedRspauth) {
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret");
  ASSERT_TRUE(server.ok() && client.ok());
  Authenticate(**server, **client);
  absl::StatusOr<std::string> refused =
      (*client)->Step("rspauth=00000000000000000000000000000000");
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE((*client)->complete());
}

}  // namespace
}  // namespace ferry::spark
