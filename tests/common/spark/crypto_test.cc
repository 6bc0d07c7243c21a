// Spark's AuthEngine and AES-CTR: Ferry's client and server sides against each other,
// and against a session Spark itself recorded (the fixed messages and keys of Spark's
// AuthEngineSuite, 3.5.2 and later). Against Spark's own Java peers:
// tests/e2e/spark_test (SparkAuthEngineTest) and tests/e2e/real_spark_test.
#include "common/spark/crypto.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ferry::spark {
namespace {

std::string Hex(absl::string_view hex) { return absl::HexStringToBytes(hex); }
std::string ToHex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

// A session between Spark's client and server for app "appId", secret "secret".
constexpr char kClientPrivate[] =
    "efe6b68b3fce92158e3637f6ef9d937e75558928dd4b401de04b43d300a73186";
constexpr char kChallenge[] =
    "fb00000005617070496400000010890b6e960f48e998777267a7e4e623220000003c48ad7dc7ec9466da9"
    "3bda9f11488dc9404050e02c661d87d67c782444944c6e369b27e0a416c30845a2d9e64271511ca98b41d"
    "65f8c426e18ff380f6";
constexpr char kResponse[] =
    "fb00000005617070496400000010708451c9dd2792c97c1ca66e6df449ef0000003c64fe899ecdaf458d4"
    "e25e9d5c5a380b8e6d1a184692fac065ed84f8592c18e9629f9c636809dca2ffc041f20346eb53db78738"
    "08ecad08b46b5ee3ff";

AuthMessage Decoded(absl::string_view hex) {
  absl::StatusOr<AuthMessage> m = DecodeAuthMessage(Hex(hex));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : AuthMessage{};
}

TEST(SparkAuthEngineTest, DerivesTheKeysSparkDerivedForARecordedSession) {
  const AuthMessage challenge = Decoded(kChallenge);
  const AuthMessage response = Decoded(kResponse);
  for (int version : {1, 2}) {
    SCOPED_TRACE(version);
    absl::StatusOr<AuthEngineClient> client =
        AuthEngineClient::Create("appId", Secret("secret"), version, Secret(Hex(kClientPrivate)));
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<SessionKeys> keys = client->Finish(challenge, response);
    ASSERT_TRUE(keys.ok()) << keys.status();
    EXPECT_EQ(ToHex(keys->key.view()),
              version == 1 ? "31963f15a320d5c90333f7ecf5cf3a31c7eaf151de07fef8494663a9f47cfd31"
                           : "2d6e7a9048c8265c33a8f3747bfcc84c");
    EXPECT_EQ(ToHex(keys->in_iv), "fc6a5dc8b90a9dad8f54f08b51a59ed2");
    EXPECT_EQ(ToHex(keys->out_iv), "a72709baf00785cad6329ce09f631f71");
  }
}

TEST(SparkAuthEngineTest, ServerAnswersSparksChallenge) {
  absl::StatusOr<AuthEngineAnswer> answer = AnswerChallenge("secret", Decoded(kChallenge));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->response.app_id, "appId");
  EXPECT_EQ(answer->response.salt.size(), 16u);
  EXPECT_EQ(answer->response.ciphertext.size(), 60u);  // IV 12 | key 32 | tag 16
  // Spark's client, whose private key this is, finds the same keys in the answer.
  absl::StatusOr<AuthEngineClient> client =
      AuthEngineClient::Create("appId", Secret("secret"), 2, Secret(Hex(kClientPrivate)));
  ASSERT_TRUE(client.ok());
  absl::StatusOr<SessionKeys> keys = client->Finish(Decoded(kChallenge), answer->response);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->key, answer->v2.key);
  EXPECT_EQ(keys->in_iv, answer->v2.out_iv);
  EXPECT_EQ(keys->out_iv, answer->v2.in_iv);
}

TEST(SparkAuthEngineTest, BothSidesAgreeInEitherVersion) {
  for (int version : {1, 2}) {
    SCOPED_TRACE(version);
    absl::StatusOr<AuthEngineClient> client =
        AuthEngineClient::Create("app-20261202-0001", Secret("s3cret"), version);
    ASSERT_TRUE(client.ok());
    absl::StatusOr<AuthMessage> challenge = client->Challenge();
    ASSERT_TRUE(challenge.ok()) << challenge.status();
    absl::StatusOr<AuthEngineAnswer> answer = AnswerChallenge("s3cret", *challenge);
    ASSERT_TRUE(answer.ok()) << answer.status();
    absl::StatusOr<SessionKeys> keys = client->Finish(*challenge, answer->response);
    ASSERT_TRUE(keys.ok()) << keys.status();
    const SessionKeys& server = version == 1 ? answer->v1 : answer->v2;
    EXPECT_EQ(keys->key.size(), version == 1 ? 32u : 16u);
    EXPECT_EQ(keys->key, server.key);
    EXPECT_EQ(keys->in_iv, server.out_iv);
    EXPECT_EQ(keys->out_iv, server.in_iv);
    EXPECT_NE(keys->in_iv, keys->out_iv);
    // Bytes the client seals, the server opens, and the other way round.
    absl::StatusOr<CtrCipher> client_out = CtrCipher::Create(keys->key.view(), keys->out_iv);
    absl::StatusOr<CtrCipher> server_in = CtrCipher::Create(server.key.view(), server.in_iv);
    ASSERT_TRUE(client_out.ok() && server_in.ok());
    std::string bytes = "a frame, then another";
    client_out->Apply(bytes.data(), bytes.data(), bytes.size());
    EXPECT_NE(bytes, "a frame, then another");
    server_in->Apply(bytes.data(), bytes.data(), bytes.size());
    EXPECT_EQ(bytes, "a frame, then another");
  }
}

TEST(SparkAuthEngineTest, EachFreshChallengeIsNew) {
  absl::StatusOr<AuthEngineClient> a = AuthEngineClient::Create("app", Secret("s"), 2);
  absl::StatusOr<AuthEngineClient> b = AuthEngineClient::Create("app", Secret("s"), 2);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<AuthMessage> ca = a->Challenge();
  absl::StatusOr<AuthMessage> cb = b->Challenge();
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_NE(ca->salt, cb->salt);
  EXPECT_NE(ca->ciphertext, cb->ciphertext);
  // A replayed challenge is answered with a fresh server key: its session is new, and
  // the replayer, without the client's private key, cannot derive it.
  absl::StatusOr<AuthEngineAnswer> first = AnswerChallenge("s", *ca);
  absl::StatusOr<AuthEngineAnswer> again = AnswerChallenge("s", *ca);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_NE(first->v2.key, again->v2.key);
}

TEST(SparkAuthEngineTest, RefusesWrongSecretsAndChangedMessages) {
  absl::StatusOr<AuthEngineClient> client = AuthEngineClient::Create("app-1", Secret("right"), 2);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<AuthMessage> challenge = client->Challenge();
  ASSERT_TRUE(challenge.ok());
  const auto refused = [](const absl::StatusOr<AuthEngineAnswer>& a) {
    return absl::IsPermissionDenied(a.status()) &&
           (absl::StrContains(a.status().message(), "application app-1") ||
            absl::StrContains(a.status().message(), "application app-2"));
  };
  EXPECT_TRUE(refused(AnswerChallenge("wrong", *challenge)));
  AuthMessage m = *challenge;
  m.salt[0] ^= 1;
  EXPECT_TRUE(refused(AnswerChallenge("right", m)));
  m = *challenge;
  m.ciphertext[20] ^= 1;
  EXPECT_TRUE(refused(AnswerChallenge("right", m)));
  m = *challenge;
  m.app_id = "app-2";  // another application's name on this one's challenge
  EXPECT_TRUE(refused(AnswerChallenge("right", m)));
  m = *challenge;
  m.ciphertext.resize(27);  // shorter than an IV and a tag
  EXPECT_TRUE(refused(AnswerChallenge("right", m)));
  m.ciphertext.clear();
  EXPECT_TRUE(refused(AnswerChallenge("right", m)));

  // The client refuses a server that does not know the secret, or a changed response.
  absl::StatusOr<AuthEngineAnswer> impostor = AnswerChallenge("right", *challenge);
  ASSERT_TRUE(impostor.ok());
  absl::StatusOr<AuthEngineClient> other = AuthEngineClient::Create("app-1", Secret("other"), 2);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(other->Finish(*challenge, impostor->response).status()));
  AuthMessage response = impostor->response;
  response.salt[3] ^= 0x80;
  EXPECT_TRUE(absl::IsPermissionDenied(client->Finish(*challenge, response).status()));
  response = impostor->response;
  response.app_id = "app-2";
  EXPECT_TRUE(absl::IsPermissionDenied(client->Finish(*challenge, response).status()));
  EXPECT_TRUE(client->Finish(*challenge, impostor->response).ok());
}

TEST(SparkAuthEngineTest, RejectsBadParameters) {
  EXPECT_FALSE(AuthEngineClient::Create("app", Secret("s"), 3).ok());
  EXPECT_FALSE(AuthEngineClient::Create("app", Secret("s"), 1, Secret("short")).ok());
  EXPECT_FALSE(CtrCipher::Create(std::string(24, 'k'), std::string(16, 'i')).ok());
  EXPECT_FALSE(CtrCipher::Create(std::string(16, 'k'), std::string(12, 'i')).ok());
}

TEST(SparkCtrCipherTest, MatchesTheStandardVector) {
  // NIST SP 800-38A, F.5.1 (CTR-AES128.Encrypt), its first two blocks.
  absl::StatusOr<CtrCipher> c = CtrCipher::Create(Hex("2b7e151628aed2a6abf7158809cf4f3c"),
                                                  Hex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"));
  ASSERT_TRUE(c.ok());
  std::string bytes = Hex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51");
  // In uneven pieces: the stream does not care how it is cut.
  c->Apply(bytes.data(), bytes.data(), 5);
  c->Apply(bytes.data() + 5, bytes.data() + 5, 20);
  c->Apply(bytes.data() + 25, bytes.data() + 25, bytes.size() - 25);
  EXPECT_EQ(ToHex(bytes), "874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff");
}

TEST(SparkCtrCipherTest, TheCounterCarriesAcrossAll128Bits) {
  // As Java's AES/CTR/NoPadding: the block after ...00ff..ff is ...0100..00.
  const std::string key(32, '\x42');
  absl::StatusOr<CtrCipher> low = CtrCipher::Create(key, Hex("0000000000000000ffffffffffffffff"));
  absl::StatusOr<CtrCipher> next = CtrCipher::Create(key, Hex("00000000000000010000000000000000"));
  ASSERT_TRUE(low.ok() && next.ok());
  std::string two_blocks(32, '\0');
  low->Apply(two_blocks.data(), two_blocks.data(), two_blocks.size());
  std::string one_block(16, '\0');
  next->Apply(one_block.data(), one_block.data(), one_block.size());
  EXPECT_EQ(two_blocks.substr(16), one_block);
}

}  // namespace
}  // namespace ferry::spark
