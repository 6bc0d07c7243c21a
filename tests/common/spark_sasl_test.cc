// Spark's SASL DIGEST-MD5 exchange, Ferry's server against Ferry's client, both over
// Cyrus SASL. Against Spark's own Java peers: tests/e2e/spark_auth_test.
#include "common/spark_sasl.h"

#include <endian.h>

#include <cstring>
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
  // Spark's names; authentication and encryption offered, authentication taken.
  EXPECT_TRUE(absl::StrContains(e.challenge, "realm=\"default\"")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.challenge, "auth-conf")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.challenge, "cipher=\"rc4-40,rc4-56,rc4\"")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.response, "qop=auth,")) << e.response;
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
  EXPECT_FALSE((*server)->has_layer());
  EXPECT_FALSE((*client)->has_layer());
}

// auth-conf: what one end seals the other opens, from records cut anywhere on the way;
// a record changed on the way, or played twice, does not open.
TEST(SparkSaslTest, AuthConfSealsEveryByteInSparksRecords) {
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
  ASSERT_TRUE(server.ok() && client.ok());
  Exchange e = Authenticate(**server, **client);
  EXPECT_TRUE(absl::StrContains(e.response, "qop=auth-conf")) << e.response;
  absl::StatusOr<std::string> rspauth = (*server)->Step(e.response);
  ASSERT_TRUE(rspauth.ok()) << rspauth.status();
  ASSERT_TRUE((*client)->Step(*rspauth).ok());
  ASSERT_TRUE((*server)->has_layer() && (*client)->has_layer());

  std::string plain(300000, '\0');
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<char>(i * 7 + i / 251);
  std::string wire;
  ASSERT_TRUE((*server)->Seal(plain, &wire).ok());
  EXPECT_EQ(wire.find(plain.substr(1000, 64)), std::string::npos);  // not in clear
  // Records of at most the client's maxbuf: several, each frameLen:i64 counting itself.
  uint64_t be = 0;
  std::memcpy(&be, wire.data(), 8);
  EXPECT_LT(be64toh(be), wire.size());
  std::string opened;
  for (size_t at = 0; at < wire.size(); at += 777) {
    ASSERT_TRUE((*client)->Open(absl::string_view(wire).substr(at, 777), &opened).ok());
  }
  EXPECT_EQ(opened, plain);

  // And the other way, a byte flipped inside the first record.
  std::string request;
  ASSERT_TRUE((*client)->Seal("a request", &request).ok());
  std::string copy = request;
  ASSERT_TRUE((*server)->Open(request, &opened).ok());
  EXPECT_EQ(opened.substr(plain.size()), "a request");
  std::string out;
  EXPECT_EQ((*server)->Open(copy, &out).code(), absl::StatusCode::kDataLoss);  // replayed
  std::string flipped;
  ASSERT_TRUE((*client)->Seal("another", &flipped).ok());
  flipped[12] ^= 1;
  EXPECT_FALSE((*server)->Open(flipped, &out).ok());
}

TEST(SparkSaslTest, ARecordOverTheBoundIsRefusedUnread) {
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
  ASSERT_TRUE(server.ok() && client.ok());
  Exchange e = Authenticate(**server, **client);
  ASSERT_TRUE((*client)->Step(*(*server)->Step(e.response)).ok());
  const uint64_t huge = htobe64(uint64_t{1} << 40);
  std::string plain;
  absl::Status refused =
      (*server)->Open(absl::string_view(reinterpret_cast<const char*>(&huge), 8), &plain);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << refused;
  EXPECT_TRUE(plain.empty());
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
