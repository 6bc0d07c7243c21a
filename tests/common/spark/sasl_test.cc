// Spark's SASL DIGEST-MD5 exchange and its auth-conf layer, Ferry's server against
// Ferry's client, and each against tokens written by hand. Against Spark's own Java
// peers: tests/e2e/spark_test.
#include "common/spark/sasl.h"

#include <endian.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

namespace ferry::spark {
namespace {

// The tokens of one exchange, as they went.
struct Exchange {
  std::string challenge;
  std::string response;
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
  e.response = response.ok() ? *response : "";
  return e;
}

// A complete exchange; false if either end refused.
bool Complete(SaslServer& server, SaslClient& client, Exchange* out = nullptr) {
  Exchange e = Authenticate(server, client);
  if (out != nullptr) *out = e;
  absl::StatusOr<std::string> rspauth = server.Step(e.response);
  if (!rspauth.ok()) return false;
  absl::StatusOr<std::string> last = client.Step(*rspauth);
  return last.ok() && last->empty() && server.complete() && client.complete();
}

// What Netty 4.1's Base64.encode (Spark's SparkSaslServer.encodePassword) makes of
// secrets of 56, 57, 58 and 64 bytes: a line break after every 76 characters but the last.
TEST(SparkSaslTest, CredentialsAreEncodedAsSparksNettyBase64) {
  const std::string line =
      "eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4";
  EXPECT_EQ(SaslCredential(std::string(56, 'x')), line.substr(0, 72) + "eHg=");
  EXPECT_EQ(SaslCredential(std::string(57, 'x')), line);
  EXPECT_EQ(SaslCredential(std::string(58, 'x')), line + "\neA==");
  EXPECT_EQ(SaslCredential(std::string(64, 'x')), line + "\neHh4eHh4eA==");
  EXPECT_EQ(SaslCredential("sparkSaslUser"), "c3BhcmtTYXNsVXNlcg==");
}

TEST(SparkSaslTest, TheSameSecretAuthenticatesBothWays) {
  auto server = SaslServer::Create("shared secret");
  auto client = SaslClient::Create("shared secret");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(client.ok()) << client.status();
  Exchange e = Authenticate(**server, **client);
  // Spark's names; authentication and encryption offered, authentication taken.
  EXPECT_TRUE(absl::StrContains(e.challenge, "realm=\"default\"")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.challenge, "qop=\"auth-conf,auth\"")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.challenge, "cipher=\"3des\"")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.challenge, "algorithm=md5-sess")) << e.challenge;
  EXPECT_TRUE(absl::StrContains(e.response, "username=\"c3BhcmtTYXNsVXNlcg==\"")) << e.response;
  EXPECT_TRUE(absl::StrContains(e.response, "digest-uri=\"null/default\"")) << e.response;
  EXPECT_TRUE(absl::StrContains(e.response, "qop=auth")) << e.response;
  EXPECT_FALSE(absl::StrContains(e.response, "auth-conf")) << e.response;
  EXPECT_FALSE(absl::StrContains(e.response, "shared secret"));
  EXPECT_FALSE(absl::StrContains(e.response, "c2hhcmVkIHNlY3JldA=="));  // base64 of it
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
  EXPECT_EQ((*server)->TakeCipher(), nullptr);  // auth: no layer
  EXPECT_EQ((*client)->TakeCipher(), nullptr);
}

// Every exchange is a full one with its own nonces.
TEST(SparkSaslTest, EachExchangeStartsAfresh) {
  std::vector<std::string> challenges;
  for (int i = 0; i < 3; ++i) {
    auto server = SaslServer::Create("s3cret");
    auto client = SaslClient::Create("s3cret");
    ASSERT_TRUE(server.ok() && client.ok());
    Exchange e;
    ASSERT_TRUE(Complete(**server, **client, &e));
    EXPECT_TRUE(absl::StrContains(e.response, "nc=00000001")) << e.response;
    for (const std::string& seen : challenges) EXPECT_NE(seen, e.challenge);
    challenges.push_back(e.challenge);
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
  EXPECT_FALSE(absl::StrContains(refused.status().message(), "cluster's"));
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
  for (const std::string& bad :
       {std::string(), std::string("username=\"x\""), std::string(300, '\xff'),
        std::string("\0\0\0", 3), std::string("nonce=\"unterminated"), std::string(5000, 'a')}) {
    auto server = SaslServer::Create("s3cret");
    auto client = SaslClient::Create("s3cret");
    ASSERT_TRUE(server.ok() && client.ok());
    Exchange e = Authenticate(**server, **client);
    absl::StatusOr<std::string> refused =
        (*server)->Step(bad.empty() ? e.response.substr(0, e.response.size() / 2) : bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << bad.substr(0, 40);
    EXPECT_FALSE((*server)->complete());
  }
}

// A right response with one directive changed: each change is refused, though the
// response-value (which covers none of them but qop) might still match.
TEST(SparkSaslTest, AResponseOutsideWhatWasOfferedIsRefused) {
  struct Case {
    std::string from, to;
  };
  const std::vector<Case> cases = {
      {"nc=00000001", "nc=00000002"},                         // a later nonce count
      {"digest-uri=\"null/default\"", "digest-uri=\"x/y\""},  // another service
      {"qop=auth", "qop=auth-int"},                           // not offered
      {"maxbuf=262144", "maxbuf=16"},                         // Seal would wrap bytes
      {"charset=utf-8,", "charset=latin1,"},
      {"charset=utf-8,", "nc=00000001,"},          // a directive twice
      {"charset=utf-8,", "authzid=\"someone\","},  // acting as another user
  };
  for (const Case& c : cases) {
    auto server = SaslServer::Create("s3cret");
    auto client = SaslClient::Create("s3cret");
    ASSERT_TRUE(server.ok() && client.ok());
    Exchange e = Authenticate(**server, **client);
    ASSERT_TRUE(absl::StrContains(e.response, c.from)) << e.response;
    const std::string changed = absl::StrReplaceAll(e.response, {{c.from, c.to}});
    absl::StatusOr<std::string> refused = (*server)->Step(changed);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << c.to;
  }
  // auth-conf with a cipher the server did not offer.
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
  ASSERT_TRUE(server.ok() && client.ok());
  Exchange e = Authenticate(**server, **client);
  absl::StatusOr<std::string> refused =
      (*server)->Step(absl::StrReplaceAll(e.response, {{"cipher=\"3des\"", "cipher=\"rc4\""}}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  // A first token that is not empty (a subsequent authentication: no past session).
  auto fresh = SaslServer::Create("s3cret");
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->Step(e.response).status().code(), absl::StatusCode::kPermissionDenied);
}

// The client checks the server's rspauth: a server that does not know the secret cannot
// pretend it authenticated.
TEST(SparkSaslTest, TheClientRefusesAForgedRspauth) {
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret");
  ASSERT_TRUE(server.ok() && client.ok());
  Authenticate(**server, **client);
  absl::StatusOr<std::string> refused = (*client)->Step("rspauth=00000000000000000000000000000000");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE((*client)->complete());
}

// A client that must encrypt takes no exchange without auth-conf and 3des.
TEST(SparkSaslTest, AnEncryptingClientRefusesAServerThatDoesNotOfferIt) {
  for (const std::string challenge :
       {"realm=\"default\",nonce=\"n\",qop=\"auth\",charset=utf-8,algorithm=md5-sess",
        "realm=\"default\",nonce=\"n\",qop=\"auth-conf\",cipher=\"rc4\",algorithm=md5-sess",
        "realm=\"default\",nonce=\"n\",qop=\"auth-conf\",cipher=\"3des\",algorithm=md5"}) {
    auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Start().ok());
    absl::StatusOr<std::string> refused = (*client)->Step(challenge);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << challenge;
  }
  // Java's server lists every cipher it has, quoted values escaped and spaced: taken.
  auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::string> response = (*client)->Step(
      "realm=\"default\", nonce=\"a\\\"b\", qop=\"auth-conf,auth\", charset=utf-8, "
      "cipher=\"3des,rc4,des,rc4-56,rc4-40\", algorithm=md5-sess");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_TRUE(absl::StrContains(*response, "nonce=\"a\\\"b\"")) << *response;
  EXPECT_TRUE(absl::StrContains(*response, "qop=auth-conf,cipher=\"3des\"")) << *response;
}

// auth-conf: what one end seals the other opens, from records cut anywhere on the way.
TEST(SparkSaslTest, AuthConfSealsEveryByteInSparksRecords) {
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
  ASSERT_TRUE(server.ok() && client.ok());
  Exchange e;
  ASSERT_TRUE(Complete(**server, **client, &e));
  EXPECT_TRUE(absl::StrContains(e.response, "qop=auth-conf")) << e.response;
  std::unique_ptr<SaslCipher> at_server = (*server)->TakeCipher();
  std::unique_ptr<SaslCipher> at_client = (*client)->TakeCipher();
  ASSERT_NE(at_server, nullptr);
  ASSERT_NE(at_client, nullptr);

  std::string plain(300000, '\0');
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<char>(i * 7 + i / 251);
  std::string wire;
  ASSERT_TRUE(at_server->Seal(plain, &wire).ok());
  EXPECT_EQ(wire.find(plain.substr(1000, 64)), std::string::npos);  // not in clear
  // Records of at most 64 KiB of plaintext: five, each frameLen:i64 counting itself,
  // then the wrapped message: ciphertext, 00 01, the sequence number.
  uint64_t be = 0;
  std::memcpy(&be, wire.data(), 8);
  const uint64_t first = be64toh(be);
  EXPECT_EQ(first, 8u + (64u << 10) + 6 /* padding */ + 10 + 6);
  EXPECT_EQ(wire.substr(first - 6, 6), std::string("\0\1\0\0\0\0", 6));
  EXPECT_EQ(wire.substr(2 * first - 6, 6), std::string("\0\1\0\0\0\1", 6));
  std::string opened;
  for (size_t at = 0; at < wire.size(); at += 777) {
    ASSERT_TRUE(at_client->Open(absl::string_view(wire).substr(at, 777), &opened).ok());
  }
  EXPECT_EQ(opened, plain);

  // And the other way, whole records at once; and empty input opens to nothing.
  std::string request;
  ASSERT_TRUE(at_client->Seal("a request", &request).ok());
  ASSERT_TRUE(at_client->Seal("and another", &request).ok());
  std::string got;
  ASSERT_TRUE(at_server->Open(request, &got).ok());
  EXPECT_EQ(got, "a requestand another");
  ASSERT_TRUE(at_server->Open("", &got).ok());
  std::string nothing;
  ASSERT_TRUE(at_server->Seal("", &nothing).ok());
  EXPECT_EQ(nothing, "");
}

// A record changed on the way, played twice or out of order does not open, and once
// one failed the layer is not asked again (the connection is over).
TEST(SparkSaslTest, AChangedReplayedOrReorderedRecordDoesNotOpen) {
  const auto layers = [] {
    auto server = SaslServer::Create("s3cret");
    auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
    EXPECT_TRUE(server.ok() && client.ok() && Complete(**server, **client));
    return std::make_pair((*server)->TakeCipher(), (*client)->TakeCipher());
  };
  {
    auto [server, client] = layers();
    std::string one, two;
    ASSERT_TRUE(client->Seal("first", &one).ok());
    ASSERT_TRUE(client->Seal("second", &two).ok());
    std::string out;
    EXPECT_EQ(server->Open(two, &out).code(), absl::StatusCode::kDataLoss);  // reordered
    EXPECT_EQ(out, "");
  }
  {
    auto [server, client] = layers();
    std::string one;
    ASSERT_TRUE(client->Seal("first", &one).ok());
    std::string out;
    ASSERT_TRUE(server->Open(one, &out).ok());
    EXPECT_EQ(server->Open(one, &out).code(), absl::StatusCode::kDataLoss);  // replayed
    EXPECT_EQ(out, "first");
  }
  // Each byte of a record's ciphertext, type and sequence number, flipped.
  std::string sample;
  {
    auto [server, client] = layers();
    ASSERT_TRUE(client->Seal("a message of some length", &sample).ok());
  }
  for (size_t i = 8; i < sample.size(); ++i) {
    auto [server, client] = layers();
    std::string record;
    ASSERT_TRUE(client->Seal("a message of some length", &record).ok());
    record[i] ^= 0x20;
    std::string out;
    EXPECT_EQ(server->Open(record, &out).code(), absl::StatusCode::kDataLoss) << "byte " << i;
    EXPECT_EQ(out, "");
  }
  // A record under another session's keys.
  auto [server, client] = layers();
  auto [other_server, other_client] = layers();
  std::string foreign;
  ASSERT_TRUE(other_client->Seal("from elsewhere", &foreign).ok());
  std::string out;
  EXPECT_EQ(server->Open(foreign, &out).code(), absl::StatusCode::kDataLoss);
}

TEST(SparkSaslTest, ARecordOverTheBoundOrTooShortIsRefusedUnread) {
  auto server = SaslServer::Create("s3cret");
  auto client = SaslClient::Create("s3cret", /*encrypt=*/true);
  ASSERT_TRUE(server.ok() && client.ok() && Complete(**server, **client));
  for (uint64_t frame : {uint64_t{1} << 40, uint64_t{8} + SaslCipher::kMaxRecordBytes + 1,
                         uint64_t{8}, uint64_t{0}}) {
    std::unique_ptr<SaslCipher> layer = (*server)->TakeCipher();
    if (layer == nullptr) {
      server = SaslServer::Create("s3cret");
      client = SaslClient::Create("s3cret", /*encrypt=*/true);
      ASSERT_TRUE(server.ok() && client.ok() && Complete(**server, **client));
      layer = (*server)->TakeCipher();
    }
    const uint64_t be = htobe64(frame);
    std::string plain;
    absl::Status refused =
        layer->Open(absl::string_view(reinterpret_cast<const char*>(&be), 8), &plain);
    EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss) << frame << ": " << refused;
    EXPECT_TRUE(plain.empty());
  }
  // Well framed, but shorter than any wrapped message.
  server = SaslServer::Create("s3cret");
  client = SaslClient::Create("s3cret", /*encrypt=*/true);
  ASSERT_TRUE(server.ok() && client.ok() && Complete(**server, **client));
  const uint64_t be = htobe64(8 + 10);
  std::string record(reinterpret_cast<const char*>(&be), 8);
  record += std::string(10, 'x');
  std::string plain;
  EXPECT_EQ((*server)->TakeCipher()->Open(record, &plain).code(), absl::StatusCode::kDataLoss);
}

// The smallest record (16 sealed bytes) has 6 bytes before its MAC; one whose last of them
// decrypts to a padding of 7 or 8 claims more than there is. Under fixed keys about 1 in
// 128 of these made-up ciphertexts decrypts so: each is refused, and nothing before the
// buffer is read (which the ASan pass of the suite would catch).
TEST(SparkSaslTest, PaddingLongerThanTheRecordIsRefused) {
  constexpr char kHa1[] = "0123456789abcdef";
  for (int i = 0; i < 4096; ++i) {
    auto layer = SaslCipher::FromExchange(kHa1, /*server=*/true, 65536);
    ASSERT_TRUE(layer.ok()) << layer.status();
    std::string record("\0\0\0\0\0\0\0\x1e", 8);  // 8 + 16 + 6 bytes
    for (int b = 0; b < 16; ++b) record += static_cast<char>((i * 131 + b * 17 + (i >> 3)) & 0xff);
    record += std::string("\0\1\0\0\0\0", 6);
    std::string plain;
    EXPECT_EQ((*layer)->Open(record, &plain).code(), absl::StatusCode::kDataLoss) << i;
    EXPECT_EQ(plain, "");
  }
}

// Two ends made from the same H(A1) talk to each other; a wrong H(A1) or maxbuf makes none.
TEST(SparkSaslTest, LayersFromTheSameExchangeTalk) {
  constexpr char kHa1[] = "0123456789abcdef";
  auto server = SaslCipher::FromExchange(kHa1, /*server=*/true, 65536);
  auto client = SaslCipher::FromExchange(kHa1, /*server=*/false, 65536);
  ASSERT_TRUE(server.ok() && client.ok());
  std::string wire, plain;
  ASSERT_TRUE((*client)->Seal("", &wire).ok());
  EXPECT_EQ(wire, "");  // nothing to carry, no record
  ASSERT_TRUE((*client)->Seal("x", &wire).ok());
  ASSERT_TRUE((*server)->Open(wire, &plain).ok());
  EXPECT_EQ(plain, "x");
  EXPECT_FALSE(SaslCipher::FromExchange("short", true, 65536).ok());
  EXPECT_FALSE(SaslCipher::FromExchange(kHa1, true, 16).ok());
}

}  // namespace
}  // namespace ferry::spark
