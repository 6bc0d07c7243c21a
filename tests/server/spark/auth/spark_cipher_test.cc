// The AES-CTR layer of a Spark connection after the AuthEngine handshake: the version
// told from the client's first frame, bytes taken in any pieces.
#include "server/spark/auth/spark_cipher.h"

#include <string>
#include <vector>

#include "common/spark/crypto.h"
#include "common/spark/wire.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

namespace sw = ::ferry::spark;

struct Session {
  sw::SessionKeys client;
  std::vector<SparkCtrLayer::Candidate> server;
};

Session Handshake(int version) {
  Session s;
  absl::StatusOr<sw::AuthEngineClient> client =
      sw::AuthEngineClient::Create("app", Secret("k"), version);
  EXPECT_TRUE(client.ok());
  absl::StatusOr<sw::AuthMessage> challenge = client->Challenge();
  absl::StatusOr<sw::AuthEngineAnswer> answer = sw::AnswerChallenge("k", *challenge);
  EXPECT_TRUE(answer.ok()) << answer.status();
  s.client = *client->Finish(*challenge, answer->response);
  s.server = {{1, answer->v1}, {2, answer->v2}};
  return s;
}

std::string Encrypted(const sw::SessionKeys& keys, absl::string_view plain) {
  absl::StatusOr<sw::CtrCipher> c = sw::CtrCipher::Create(keys.key.view(), keys.out_iv);
  std::string out(plain);
  c->Apply(out.data(), out.data(), out.size());
  return out;
}

TEST(SparkCtrLayerTest, TheFirstFrameTellsTheVersionWhateverTheCuts) {
  for (int version : {1, 2}) {
    SCOPED_TRACE(version);
    Session s = Handshake(version);
    int chosen = 0;
    auto layer = SparkCtrLayer::Create(s.server, 1 << 20, [&](int v) { chosen = v; });
    ASSERT_TRUE(layer.ok());
    std::string sealed;
    EXPECT_FALSE((*layer)->Seal("early", &sealed).ok());  // nothing before the client's frame
    const std::string frames =
        sw::EncodeChunkFetchRequest({7, 0}) + sw::EncodeRpcRequest(9, std::string(1000, 'r'));
    const std::string wire = Encrypted(s.client, frames);
    std::string plain;
    for (char c : wire) ASSERT_TRUE((*layer)->Open(absl::string_view(&c, 1), &plain).ok());
    EXPECT_EQ(plain, frames);
    EXPECT_EQ(chosen, version);
    ASSERT_TRUE((*layer)->Seal("answer", &sealed).ok());
    absl::StatusOr<sw::CtrCipher> in = sw::CtrCipher::Create(s.client.key.view(), s.client.in_iv);
    in->Apply(sealed.data(), sealed.data(), sealed.size());
    EXPECT_EQ(sealed, "answer");
  }
}

TEST(SparkCtrLayerTest, RefusesBytesThatAreNoFrameUnderAnyKey) {
  Session s = Handshake(1);
  std::vector<SparkCtrLayer::Candidate> only_v2 = {s.server[1]};
  auto layer = SparkCtrLayer::Create(only_v2, 1 << 20, nullptr);
  ASSERT_TRUE(layer.ok());
  std::string plain;
  absl::Status refused =
      (*layer)->Open(Encrypted(s.client, sw::EncodeChunkFetchRequest({1, 0})), &plain);
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  EXPECT_NE(refused.message().find("--spark-auth-engine-v1=false"), std::string::npos) << refused;
  // A frame longer than the connection takes is refused as no frame too.
  Session t = Handshake(2);
  auto small = SparkCtrLayer::Create(t.server, 100, nullptr);
  EXPECT_FALSE(
      (*small)
          ->Open(Encrypted(t.client, sw::EncodeRpcRequest(1, std::string(200, 'x'))), &plain)
          .ok());
  EXPECT_FALSE(SparkCtrLayer::Create({}, 100, nullptr).ok());
}

}  // namespace
}  // namespace ferry
