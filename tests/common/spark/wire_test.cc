// The codec against the golden frames Spark 3.5.0's own encoders produced
// (../shared/spark-ess/PROTOCOL.md, Appendix A), both ways, and against malformed input.
#include "common/spark/wire.h"

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ferry::spark {
namespace {

constexpr int64_t kRequestId = 0x0102030405060708;
constexpr int64_t kStreamId = 0x1122334455667788;
constexpr char kSortShuffleManager[] = "org.apache.spark.shuffle.sort.SortShuffleManager";

// Hex digits in pairs, whitespace anywhere (the literals are split across lines).
std::string Hex(absl::string_view text) {
  std::string digits;
  for (char c : text) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) digits.push_back(c);
  }
  EXPECT_EQ(digits.size() % 2, 0u);
  std::string out;
  for (size_t i = 0; i + 1 < digits.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The bytes after frameLen, checked against frameLen.
absl::string_view AfterLength(absl::string_view frame) {
  auto rest = DecodeFrameLength(frame.substr(0, kFrameLengthBytes));
  EXPECT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(*rest, frame.size() - kFrameLengthBytes);
  return frame.substr(kFrameLengthBytes);
}

ShuffleRpc RpcOf(absl::string_view frame) {
  auto message = DecodeClientFrame(AfterLength(frame));
  EXPECT_TRUE(message.ok()) << message.status();
  const RpcRequest& rpc = std::get<RpcRequest>(*message);
  EXPECT_EQ(rpc.request_id, kRequestId);
  auto decoded = DecodeShuffleRpc(rpc.body);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  return *decoded;
}

TEST(SparkWireTest, RegisterExecutor) {
  const std::string golden =
      Hex("00 00 00 00 00 00 00 6e 03 01 02 03 04 05 06 07 08 00 00 00 59 02 00 00 00 05 61 70 70 "
          "2d 31 00"
          "00 00 01 30 00 00 00 02 00 00 00 03 2f 64 30 00 00 00 03 2f 64 31 00 00 00 40 00 00 00 "
          "30 6f 72"
          "67 2e 61 70 61 63 68 65 2e 73 70 61 72 6b 2e 73 68 75 66 66 6c 65 2e 73 6f 72 74 2e 53 "
          "6f 72 74"
          "53 68 75 66 66 6c 65 4d 61 6e 61 67 65 72");
  const RegisterExecutor m{"app-1", "0", {{"/d0", "/d1"}, 64, kSortShuffleManager}};
  EXPECT_EQ(EncodeRpcRequest(kRequestId, EncodeRegisterExecutor(m)), golden);
  const auto got = std::get<RegisterExecutor>(RpcOf(golden));
  EXPECT_EQ(got.app_id, "app-1");
  EXPECT_EQ(got.exec_id, "0");
  EXPECT_EQ(got.info.local_dirs, (std::vector<std::string>{"/d0", "/d1"}));
  EXPECT_EQ(got.info.sub_dirs_per_local_dir, 64);
  EXPECT_EQ(got.info.shuffle_manager, kSortShuffleManager);
  EXPECT_EQ(EncodeRpcResponse(kRequestId, ""),
            Hex("00 00 00 00 00 00 00 15 04 01 02 03 04 05 06 07 08 00 00 00 00"));
}

TEST(SparkWireTest, ARegistrationsSizeIsItsEncodingsWithoutEncodingIt) {
  for (const RegisterExecutor& m :
       {RegisterExecutor{"app-1", "0", {{"/a", "/bb"}, 64, "sort"}},
        RegisterExecutor{"", "", {{}, 0, ""}},
        RegisterExecutor{"application_1_0001",
                         "12",
                         {{std::string(300, 'x')},
                          64,
                          "org.apache.spark.shuffle.sort.SortShuffleManager:{}"}}}) {
    EXPECT_EQ(EncodedSize(m), EncodeRegisterExecutor(m).size()) << m.app_id;
  }
}

TEST(SparkWireTest, FetchShuffleBlocks) {
  const std::string plain =
      Hex("00 00 00 00 00 00 00 55 03 01 02 03 04 05 06 07 08 00 00 00 40 09 00 00 00 05 61 70 70 "
          "2d 31 00"
          "00 00 01 30 00 00 00 03 00 00 00 02 00 00 00 00 00 00 03 e8 00 00 00 00 00 00 03 ef 00 "
          "00 00 02"
          "00 00 00 02 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 05 00");
  const FetchShuffleBlocks m{"app-1", "0", 3, {1000, 1007}, {{0, 2}, {5}}, false};
  EXPECT_EQ(EncodeRpcRequest(kRequestId, EncodeFetchShuffleBlocks(m)), plain);
  auto got = std::get<FetchShuffleBlocks>(RpcOf(plain));
  EXPECT_EQ(got.shuffle_id, 3);
  EXPECT_EQ(got.map_ids, (std::vector<int64_t>{1000, 1007}));
  EXPECT_EQ(got.reduce_ids, (std::vector<std::vector<int32_t>>{{0, 2}, {5}}));
  EXPECT_FALSE(got.batch_fetch_enabled);

  const std::string batch =
      Hex("00 00 00 00 00 00 00 45 03 01 02 03 04 05 06 07 08 00 00 00 30 09 00 00 00 05 61 70 70 "
          "2d 31 00"
          "00 00 01 30 00 00 00 03 00 00 00 01 00 00 00 00 00 00 03 e8 00 00 00 01 00 00 00 02 00 "
          "00 00 02"
          "00 00 00 06 01");
  EXPECT_EQ(EncodeRpcRequest(kRequestId,
                             EncodeFetchShuffleBlocks({"app-1", "0", 3, {1000}, {{2, 6}}, true})),
            batch);
  got = std::get<FetchShuffleBlocks>(RpcOf(batch));
  EXPECT_TRUE(got.batch_fetch_enabled);
  EXPECT_EQ(got.reduce_ids, (std::vector<std::vector<int32_t>>{{2, 6}}));
}

TEST(SparkWireTest, OpenBlocksAndStreamHandle) {
  const std::string golden =
      Hex("00 00 00 00 00 00 00 50 03 01 02 03 04 05 06 07 08 00 00 00 3b 00 00 00 00 05 61 70 70 "
          "2d 31 00"
          "00 00 01 30 00 00 00 02 00 00 00 10 73 68 75 66 66 6c 65 5f 33 5f 31 30 30 30 5f 30 00 "
          "00 00 10"
          "73 68 75 66 66 6c 65 5f 33 5f 31 30 30 30 5f 32");
  EXPECT_EQ(
      EncodeRpcRequest(kRequestId,
                       EncodeOpenBlocks({"app-1", "0", {"shuffle_3_1000_0", "shuffle_3_1000_2"}})),
      golden);
  EXPECT_EQ(std::get<OpenBlocks>(RpcOf(golden)).block_ids,
            (std::vector<std::string>{"shuffle_3_1000_0", "shuffle_3_1000_2"}));
  EXPECT_EQ(
      EncodeRpcResponse(kRequestId, EncodeStreamHandle(kStreamId, 3)),
      Hex("00 00 00 00 00 00 00 22 04 01 02 03 04 05 06 07 08 00 00 00 0d 03 11 22 33 44 55 66"
          "77 88 00 00 00 03"));
}

TEST(SparkWireTest, ChunkFrames) {
  const std::string request = Hex("00 00 00 00 00 00 00 15 00 11 22 33 44 55 66 77 88 00 00 00 01");
  EXPECT_EQ(EncodeChunkFetchRequest({kStreamId, 1}), request);
  auto decoded = DecodeClientFrame(AfterLength(request));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(std::get<ChunkFetchRequest>(*decoded).stream_id, kStreamId);
  EXPECT_EQ(std::get<ChunkFetchRequest>(*decoded).chunk_index, 1);
  // The header goes out on its own; the body follows inside the frame.
  EXPECT_EQ(std::string(EncodeChunkFetchSuccessHeader(kStreamId, 1, 5).view()) + "hello",
            Hex("00 00 00 00 00 00 00 1a 01 11 22 33 44 55 66 77 88 00 00 00 01 68 65 6c 6c 6f"));
  EXPECT_EQ(EncodeChunkFetchFailure(kStreamId, 1, "boom"),
            Hex("00 00 00 00 00 00 00 1d 02 11 22 33 44 55 66 77 88 00 00 00 01 00 00 00 04 62 6f"
                "6f 6d"));
}

TEST(SparkWireTest, StreamFrames) {
  const std::string request = Hex("00 00 00 00 00 00 00 13 06 00 00 00 06 31 32 33 34 5f 30");
  EXPECT_EQ(EncodeStreamRequest("1234_0"), request);
  auto decoded = DecodeClientFrame(AfterLength(request));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(std::get<StreamRequest>(*decoded).stream_id, "1234_0");
  // The body follows the frame and is not counted in it.
  EXPECT_EQ(EncodeStreamResponseHeader("1234_0", 5) + "hello",
            Hex("00 00 00 00 00 00 00 1b 07 00 00 00 06 31 32 33 34 5f 30 00 00 00 00 00 00 00 05"
                "68 65 6c 6c 6f"));
  EXPECT_EQ(
      EncodeStreamFailure("1234_0", "boom"),
      Hex("00 00 00 00 00 00 00 1b 08 00 00 00 06 31 32 33 34 5f 30 00 00 00 04 62 6f 6f 6d"));
}

TEST(SparkWireTest, FailureAndOneWayFrames) {
  EXPECT_EQ(EncodeRpcFailure(kRequestId, "boom"),
            Hex("00 00 00 00 00 00 00 19 05 01 02 03 04 05 06 07 08 00 00 00 04 62 6f 6f 6d"));
  const std::string one_way = Hex("00 00 00 00 00 00 00 0f 09 00 00 00 02 01 02");
  EXPECT_EQ(EncodeOneWayMessage(std::string("\x01\x02", 2)), one_way);
  auto decoded = DecodeClientFrame(AfterLength(one_way));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(std::get<OneWayMessage>(*decoded).body, std::string("\x01\x02", 2));
}

TEST(SparkWireTest, RemoveBlocksAndLocalDirs) {
  const std::string remove =
      Hex("00 00 00 00 00 00 00 33 03 01 02 03 04 05 06 07 08 00 00 00 1e 07 00 00 00 05 61 70 70 "
          "2d 31 00"
          "00 00 01 30 00 00 00 01 00 00 00 07 72 64 64 5f 31 5f 32");
  EXPECT_EQ(EncodeRpcRequest(kRequestId, EncodeRemoveBlocks({"app-1", "0", {"rdd_1_2"}})), remove);
  EXPECT_EQ(std::get<RemoveBlocks>(RpcOf(remove)).block_ids, (std::vector<std::string>{"rdd_1_2"}));
  EXPECT_EQ(EncodeRpcResponse(kRequestId, EncodeBlocksRemoved(1)),
            Hex("00 00 00 00 00 00 00 1a 04 01 02 03 04 05 06 07 08 00 00 00 05 08 00 00 00 01"));
  const std::string dirs =
      Hex("00 00 00 00 00 00 00 28 03 01 02 03 04 05 06 07 08 00 00 00 13 0a 00 00 00 05 61 70 70 "
          "2d 31 00"
          "00 00 01 00 00 00 01 30");
  EXPECT_EQ(EncodeRpcRequest(kRequestId, EncodeGetLocalDirsForExecutors({"app-1", {"0"}})), dirs);
  EXPECT_EQ(std::get<GetLocalDirsForExecutors>(RpcOf(dirs)).exec_ids,
            (std::vector<std::string>{"0"}));
  EXPECT_EQ(
      EncodeRpcResponse(kRequestId, EncodeLocalDirsForExecutors({"0"}, {2}, {"/d0", "/d1"})),
      Hex("00 00 00 00 00 00 00 39 04 01 02 03 04 05 06 07 08 00 00 00 24 0b 00 00 00 01 00 00"
          "00 01 30 00 00 00 01 00 00 00 02 00 00 00 02 00 00 00 03 2f 64 30 00 00 00 03 2f 64"
          "31"));
}

TEST(SparkWireTest, DiagnoseCorruptionRoundTrip) {
  const DiagnoseCorruption m{"app-1", "3", 2, 77, 5, 0xdeadbeef, "CRC32C"};
  auto decoded = DecodeShuffleRpc(EncodeDiagnoseCorruption(m));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const auto& got = std::get<DiagnoseCorruption>(*decoded);
  EXPECT_EQ(got.map_id, 77);
  EXPECT_EQ(got.checksum, 0xdeadbeef);
  EXPECT_EQ(got.algorithm, "CRC32C");
  EXPECT_EQ(EncodeCorruptionCause(1), std::string("\x11\x01", 2));
}

// The replies decode as they encode, in one place (the client and the tests read them
// so); a body that is no reply, or has bytes left, names what is wrong.
TEST(SparkWireTest, RepliesDecodeAsTheyEncode) {
  absl::StatusOr<ShuffleReply> handle = DecodeShuffleReply(EncodeStreamHandle(kStreamId, 3));
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(std::get<StreamHandle>(*handle).stream_id, kStreamId);
  EXPECT_EQ(std::get<StreamHandle>(*handle).num_chunks, 3);
  absl::StatusOr<ShuffleReply> removed = DecodeShuffleReply(EncodeBlocksRemoved(7));
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(std::get<BlocksRemoved>(*removed).num_removed, 7);
  absl::StatusOr<ShuffleReply> dirs =
      DecodeShuffleReply(EncodeLocalDirsForExecutors({"0", "1"}, {2, 1}, {"/d0", "/d1", "/e0"}));
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  const auto& local = std::get<LocalDirsForExecutors>(*dirs);
  EXPECT_EQ(local.exec_ids, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(local.num_local_dirs, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(local.all_local_dirs, (std::vector<std::string>{"/d0", "/d1", "/e0"}));
  absl::StatusOr<ShuffleReply> cause = DecodeShuffleReply(EncodeCorruptionCause(4));
  ASSERT_TRUE(cause.ok());
  EXPECT_EQ(std::get<CorruptionCause>(*cause).cause, 4);

  EXPECT_TRUE(absl::StrContains(
      DecodeShuffleReply(EncodeStreamHandle(1, 2) + "x").status().message(), "StreamHandle"));
  EXPECT_TRUE(absl::StrContains(
      DecodeShuffleReply(EncodeStreamHandle(1, 2).substr(0, 5)).status().message(), "streamId"));
  EXPECT_TRUE(
      absl::StrContains(DecodeShuffleReply(EncodeOpenBlocks({"a", "0", {}})).status().message(),
                        "OpenBlocks is not a shuffle service's reply"));
  EXPECT_FALSE(DecodeShuffleReply("").ok());
}

// The server's frames decode as they encode (the frame after its length field); a
// ChunkFetchSuccess from its header alone, as a client reads it before the block.
TEST(SparkWireTest, ServerFramesDecodeAsTheyEncode) {
  const auto decode = [](const std::string& frame) {
    return DecodeServerFrame(absl::string_view(frame).substr(kFrameLengthBytes));
  };
  const ChunkFetchSuccessHeader header = EncodeChunkFetchSuccessHeader(kStreamId, 2, 5);
  ASSERT_EQ(header.view().size(), kFrameLengthBytes + kChunkFetchSuccessHeaderBytes);
  absl::StatusOr<ServerMessage> success = decode(std::string(header.view()));
  ASSERT_TRUE(success.ok()) << success.status();
  EXPECT_EQ(std::get<ChunkFetchSuccess>(*success).stream_id, kStreamId);
  EXPECT_EQ(std::get<ChunkFetchSuccess>(*success).chunk_index, 2);
  EXPECT_EQ(std::get<ChunkFetchSuccess>(*decode(std::string(header.view()) + "block")).body,
            "block");
  absl::StatusOr<ServerMessage> chunk_failure = decode(EncodeChunkFetchFailure(kStreamId, 3, "no"));
  ASSERT_TRUE(chunk_failure.ok());
  EXPECT_EQ(std::get<ChunkFetchFailure>(*chunk_failure).chunk_index, 3);
  EXPECT_EQ(std::get<ChunkFetchFailure>(*chunk_failure).error, "no");
  absl::StatusOr<ServerMessage> response = decode(EncodeRpcResponse(9, "body"));
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(std::get<RpcResponse>(*response).request_id, 9);
  EXPECT_EQ(std::get<RpcResponse>(*response).body, "body");
  absl::StatusOr<ServerMessage> failure = decode(EncodeRpcFailure(9, "refused"));
  ASSERT_TRUE(failure.ok());
  EXPECT_EQ(std::get<RpcFailure>(*failure).error, "refused");
  absl::StatusOr<ServerMessage> stream = decode(EncodeStreamResponseHeader("7_0", 1234));
  ASSERT_TRUE(stream.ok());
  EXPECT_EQ(std::get<StreamResponse>(*stream).stream_id, "7_0");
  EXPECT_EQ(std::get<StreamResponse>(*stream).byte_count, 1234);
  absl::StatusOr<ServerMessage> stream_failure = decode(EncodeStreamFailure("7_0", "gone"));
  ASSERT_TRUE(stream_failure.ok());
  EXPECT_EQ(std::get<StreamFailure>(*stream_failure).error, "gone");

  // A client's frame, a cut one, bytes left over, an error past the bound.
  EXPECT_TRUE(absl::StrContains(decode(EncodeRpcRequest(1, "x")).status().message(),
                                "not one a shuffle service sends"));
  EXPECT_TRUE(absl::StrContains(decode(std::string(header.view()).substr(0, 19)).status().message(),
                                "chunkIndex"));
  EXPECT_FALSE(decode(EncodeRpcFailure(9, "refused") + "x").ok());
  EXPECT_FALSE(
      DecodeServerFrame(absl::string_view(EncodeRpcFailure(9, std::string(100, 'e'))).substr(8), 99)
          .ok());
  EXPECT_FALSE(DecodeServerFrame("").ok());
}

TEST(SparkWireTest, FrameLengthsOutsideSparksBoundsAreRefused) {
  auto length = [](int64_t v) {
    std::string out;
    WireWriter(&out).I64(v);
    return DecodeFrameLength(out);
  };
  EXPECT_EQ(*length(9), 1u);
  EXPECT_FALSE(length(8).ok());  // nothing after the length
  EXPECT_FALSE(length(0).ok());
  EXPECT_FALSE(length(-1).ok());
  EXPECT_FALSE(length(INT64_MIN).ok());  // found by the fuzzer: no overflow on the way
  EXPECT_FALSE(length(int64_t{1} << 40).ok());
  EXPECT_TRUE(length(8 + int64_t{kMaxFrameBodyBytes}).ok());
  EXPECT_FALSE(length(9 + int64_t{kMaxFrameBodyBytes}).ok());
  EXPECT_FALSE(DecodeFrameLength("short").ok());
}

TEST(SparkWireTest, MalformedPayloadsNameTheField) {
  // A count that the bytes left could never hold, before anything is allocated.
  std::string huge;
  WireWriter w(&huge);
  w.U8(static_cast<uint8_t>(BlockTransferType::kOpenBlocks));
  w.String("app-1");
  w.String("0");
  w.I32(2000000000);
  auto decoded = DecodeShuffleRpc(huge);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("blockIds"), std::string::npos) << decoded.status();

  std::string negative;
  WireWriter n(&negative);
  n.U8(static_cast<uint8_t>(BlockTransferType::kGetLocalDirsForExecutors));
  n.I32(-4);
  decoded = DecodeShuffleRpc(negative);
  EXPECT_NE(decoded.status().message().find("appId: a negative length"), std::string::npos)
      << decoded.status();

  // Every truncation of a valid message is refused, never read past.
  const std::string whole =
      EncodeFetchShuffleBlocks({"app-1", "0", 3, {1000, 1007}, {{0, 2}, {5}}, false});
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    EXPECT_FALSE(DecodeShuffleRpc(whole.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(DecodeShuffleRpc(whole + "x").ok());  // trailing bytes
  // Map ids and reduce-id lists must pair up.
  EXPECT_FALSE(
      DecodeShuffleRpc(EncodeFetchShuffleBlocks({"a", "0", 1, {1, 2}, {{0}}, false})).ok());
  // A boolean is 0 or 1.
  std::string bad_bool = EncodeFetchShuffleBlocks({"a", "0", 1, {1}, {{0}}, false});
  bad_bool.back() = 7;
  EXPECT_FALSE(DecodeShuffleRpc(bad_bool).ok());
}

TEST(SparkWireTest, MessagesNotServedAreNamedNotRejected) {
  // Mesos's heartbeat, and an id Spark does not define.
  for (uint8_t type : {uint8_t{5}, uint8_t{99}}) {
    auto decoded = DecodeShuffleRpc(std::string(1, static_cast<char>(type)) + "rest");
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(std::get<UnsupportedRpc>(*decoded).type, type);
  }
  EXPECT_EQ(BlockTransferTypeName(13), "FinalizeShuffleMerge");
  EXPECT_EQ(BlockTransferTypeName(99), "type 99");
  // A server's frame type from a client, or an unknown one.
  for (uint8_t type : {uint8_t{4}, uint8_t{200}}) {
    auto frame = DecodeClientFrame(std::string(1, static_cast<char>(type)) + "rest");
    ASSERT_TRUE(frame.ok());
    EXPECT_EQ(std::get<UnsupportedMessage>(*frame).type, static_cast<MessageType>(type));
  }
  EXPECT_FALSE(DecodeClientFrame("").ok());
  EXPECT_FALSE(DecodeClientFrame(std::string(1, '\0') + "short").ok());
}

// Push-based shuffle's messages against the bytes Spark 3.5.0's own classes wrote
// (tests/testdata/push_wire/run prints them): each decodes to its fields and encodes
// back to the same bytes.
struct PushGolden {
  const char* name;
  const char* hex;
};
constexpr PushGolden kPush[] = {
    {"PushBlockStream", "0c000000056170702d31000000020000000300000004000000050000000600000007"},
    {"UploadStream",
     "000000000000003f0a0102030405060708000000220c000000056170702d310000000200000003000000"
     "040000000500000006000000070000000000000005626c6f636b"},
    {"FinalizeShuffleMerge",
     "000000000000002b030102030405060708000000160d000000056170702d310000000200000003000000"
     "04"},
    {"BitmapSparse", "3a300000020000000000010001000000180000001c000000000005007011"},
    {"BitmapRun", "3b300000010000b60b01000100b60b"},
    {"BitmapEmpty", "3a30000000000000"},
    {"MergeStatuses",
     "000000000000006f0401020304050607080000005a0e0000000300000004000000023a30000002000000"
     "0000010001000000180000001c0000000000050070113b300000010000b60b01000100b60b0000000200"
     "000000000000090000000200000000000003e80000000200000000"},
    {"FetchShuffleBlockChunks",
     "00000000000000500301020304050607080000003b0f000000056170702d310000000130000000030000"
     "0004000000020000000000000009000000020000000200000000000000010000000100000002"},
    {"BlockPushReturnCode",
     "000000000000002e0401020304050607080000001912030000001373687566666c65507573685f335f34"
     "5f355f36"},
    {"BlockPushReturnCodeSuccess", "000000000000001b04010203040506070800000006120000000000"},
    {"RemoveShuffleMerge",
     "0000000000000023090000001613000000056170702d31000000020000000300000004"},
    {"MergedBlockMetaRequest",
     "00000000000000260b0102030405060708000000056170702d31000000030000000400000005"},
    {"MergedBlockMetaSuccess",
     "00000000000000420c0102030405060708000000023a300000020000000000010001000000180000001c"
     "0000000000050070113b300000010000b60b01000100b60b"},
};

std::string PushBytes(absl::string_view name) {
  for (const PushGolden& g : kPush) {
    if (name == g.name) return Hex(g.hex);
  }
  ADD_FAILURE() << "no golden " << name;
  return "";
}

// The two bitmaps of the golden vectors: {0, 5, 70000} (two array containers) and the run
// [1, 3000), run-optimized by Spark's side (a run container).
Bitmap Sparse() { return Bitmap::Of({0, 5, 70000}); }

TEST(SparkWireTest, PushMessagesAreSparksBytesBothWays) {
  const PushBlockStream push{"app-1", 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(EncodePushBlockStream(push), PushBytes("PushBlockStream"));
  absl::StatusOr<PushBlockStream> decoded = DecodePushBlockStream(PushBytes("PushBlockStream"));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->app_id, "app-1");
  EXPECT_EQ(decoded->app_attempt_id, 2);
  EXPECT_EQ(decoded->shuffle_id, 3);
  EXPECT_EQ(decoded->shuffle_merge_id, 4);
  EXPECT_EQ(decoded->map_index, 5);
  EXPECT_EQ(decoded->reduce_id, 6);
  EXPECT_EQ(decoded->index, 7);

  // UploadStream: the frame, then the block outside it.
  const std::string upload = PushBytes("UploadStream");
  const std::string header = EncodeUploadStreamHeader(kRequestId, PushBytes("PushBlockStream"), 5);
  EXPECT_EQ(header + "block", upload);
  absl::StatusOr<ClientMessage> frame =
      DecodeClientFrame(absl::string_view(header).substr(kFrameLengthBytes));
  ASSERT_TRUE(frame.ok()) << frame.status();
  const auto& up = std::get<UploadStream>(*frame);
  EXPECT_EQ(up.request_id, kRequestId);
  EXPECT_EQ(up.meta, PushBytes("PushBlockStream"));
  EXPECT_EQ(up.body_bytes, 5);

  EXPECT_EQ(EncodeRpcRequest(kRequestId, EncodeFinalizeShuffleMerge({"app-1", 2, 3, 4})),
            PushBytes("FinalizeShuffleMerge"));
  const auto finalize = std::get<FinalizeShuffleMerge>(RpcOf(PushBytes("FinalizeShuffleMerge")));
  EXPECT_EQ(finalize.app_id, "app-1");
  EXPECT_EQ(finalize.app_attempt_id, 2);
  EXPECT_EQ(finalize.shuffle_id, 3);
  EXPECT_EQ(finalize.shuffle_merge_id, 4);

  const std::string remove = PushBytes("RemoveShuffleMerge");
  EXPECT_EQ(EncodeOneWayMessage(EncodeRemoveShuffleMerge({"app-1", 2, 3, 4})), remove);
  frame = DecodeClientFrame(absl::string_view(remove).substr(kFrameLengthBytes));
  ASSERT_TRUE(frame.ok());
  absl::StatusOr<ShuffleRpc> one_way = DecodeShuffleRpc(std::get<OneWayMessage>(*frame).body);
  ASSERT_TRUE(one_way.ok());
  EXPECT_EQ(std::get<RemoveShuffleMerge>(*one_way).shuffle_merge_id, 4);

  FetchShuffleBlockChunks chunks{"app-1", "0", 3, 4, {0, 9}, {{0, 1}, {2}}};
  EXPECT_EQ(EncodeRpcRequest(kRequestId, EncodeFetchShuffleBlockChunks(chunks)),
            PushBytes("FetchShuffleBlockChunks"));
  const auto fetched =
      std::get<FetchShuffleBlockChunks>(RpcOf(PushBytes("FetchShuffleBlockChunks")));
  EXPECT_EQ(fetched.exec_id, "0");
  EXPECT_EQ(fetched.reduce_ids, (std::vector<int32_t>{0, 9}));
  EXPECT_EQ(fetched.chunk_ids, (std::vector<std::vector<int32_t>>{{0, 1}, {2}}));

  const MergedBlockMetaRequest meta{kRequestId, "app-1", 3, 4, 5};
  EXPECT_EQ(EncodeMergedBlockMetaRequest(meta), PushBytes("MergedBlockMetaRequest"));
  frame = DecodeClientFrame(
      absl::string_view(PushBytes("MergedBlockMetaRequest")).substr(kFrameLengthBytes));
  ASSERT_TRUE(frame.ok());
  EXPECT_EQ(std::get<MergedBlockMetaRequest>(*frame).reduce_id, 5);
  EXPECT_EQ(std::get<MergedBlockMetaRequest>(*frame).app_id, "app-1");
}

TEST(SparkWireTest, BitmapsAreSparksBytes) {
  EXPECT_EQ(Sparse().Serialize(), PushBytes("BitmapSparse"));
  EXPECT_EQ(Bitmap().Serialize(), PushBytes("BitmapEmpty"));
  // Spark's run container reads as the values it holds.
  std::string run = PushBytes("BitmapRun");
  absl::string_view rest = run;
  absl::StatusOr<Bitmap> read = Bitmap::Read(&rest, kMaxBitmapValues);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(rest.empty());
  EXPECT_EQ(read->Cardinality(), 2999u);
  EXPECT_TRUE(read->Contains(1));
  EXPECT_TRUE(read->Contains(2999));
  EXPECT_FALSE(read->Contains(3000));
  // Built by adds, as Spark's trackers are, past the array container's 4,096 values.
  Bitmap big;
  for (uint32_t i = 0; i < 5000; i += 1) big.Add(i * 3);
  absl::string_view big_bytes;
  const std::string serialized = big.Serialize();
  big_bytes = serialized;
  absl::StatusOr<Bitmap> again = Bitmap::Read(&big_bytes, kMaxBitmapValues);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, big);
  // One after another, as in a .meta file; each read takes its own bytes only.
  const std::string two = Sparse().Serialize() + run;
  absl::string_view both = two;
  EXPECT_EQ(*Bitmap::Read(&both, 10), Sparse());
  EXPECT_EQ(Bitmap::Read(&both, 10).status().code(), absl::StatusCode::kInvalidArgument)
      << "2,999 values over a bound of 10";
}

TEST(SparkWireTest, PushRepliesAreSparksBytesBothWays) {
  absl::string_view run_bytes;
  const std::string run_serialized = PushBytes("BitmapRun");
  run_bytes = run_serialized;
  const Bitmap run = *Bitmap::Read(&run_bytes, kMaxBitmapValues);
  // MergeStatuses: encoded from the same bitmaps, Spark's bytes; decoded, the same values.
  const MergeStatuses statuses{3, 4, {Sparse(), run}, {0, 9}, {1000, int64_t{1} << 33}};
  EXPECT_EQ(EncodeRpcResponse(kRequestId, EncodeMergeStatuses(statuses)),
            PushBytes("MergeStatuses"));
  absl::StatusOr<ServerMessage> response =
      DecodeServerFrame(absl::string_view(PushBytes("MergeStatuses")).substr(kFrameLengthBytes));
  ASSERT_TRUE(response.ok()) << response.status();
  absl::StatusOr<ShuffleReply> reply = DecodeShuffleReply(std::get<RpcResponse>(*response).body);
  ASSERT_TRUE(reply.ok()) << reply.status();
  const auto& got = std::get<MergeStatuses>(*reply);
  EXPECT_EQ(got.shuffle_id, 3);
  EXPECT_EQ(got.shuffle_merge_id, 4);
  ASSERT_EQ(got.bitmaps.size(), 2u);
  EXPECT_EQ(got.bitmaps[0], Sparse());
  EXPECT_EQ(got.bitmaps[1], run);
  EXPECT_EQ(got.reduce_ids, (std::vector<int32_t>{0, 9}));
  EXPECT_EQ(got.sizes, (std::vector<int64_t>{1000, int64_t{1} << 33}));

  for (const auto& [name, code, block] :
       {std::tuple{"BlockPushReturnCode", PushReturnCode::kStaleBlockPush, "shufflePush_3_4_5_6"},
        std::tuple{"BlockPushReturnCodeSuccess", PushReturnCode::kSuccess, ""}}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(EncodeRpcResponse(kRequestId, EncodeBlockPushReturnCode({code, block})),
              PushBytes(name));
    response = DecodeServerFrame(absl::string_view(PushBytes(name)).substr(kFrameLengthBytes));
    ASSERT_TRUE(response.ok());
    reply = DecodeShuffleReply(std::get<RpcResponse>(*response).body);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(std::get<BlockPushReturnCode>(*reply).code, code);
    EXPECT_EQ(std::get<BlockPushReturnCode>(*reply).failure_block_id, block);
  }

  // MergedBlockMetaSuccess: the header, then the .meta file's bitmaps in the frame.
  const std::string meta = Sparse().Serialize() + run_serialized;
  EXPECT_EQ(EncodeMergedBlockMetaSuccessHeader(kRequestId, 2, meta.size()) + meta,
            PushBytes("MergedBlockMetaSuccess"));
  response = DecodeServerFrame(
      absl::string_view(PushBytes("MergedBlockMetaSuccess")).substr(kFrameLengthBytes));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(std::get<MergedBlockMetaSuccess>(*response).num_chunks, 2);
  EXPECT_EQ(std::get<MergedBlockMetaSuccess>(*response).body, meta);
}

TEST(SparkWireTest, MalformedPushMessagesNameTheField) {
  // A meta that is not a PushBlockStream, or one cut short.
  EXPECT_TRUE(absl::StrContains(
      DecodePushBlockStream(EncodeFinalizeShuffleMerge({"a", 0, 1, 2})).status().message(),
      "FinalizeShuffleMerge, not PushBlockStream"));
  const std::string push = PushBytes("PushBlockStream");
  EXPECT_TRUE(absl::StrContains(
      DecodePushBlockStream(push.substr(0, push.size() - 2)).status().message(), "index"));
  // An upload whose body is of a negative size; a meta past the bound.
  const std::string negative = EncodeUploadStreamHeader(1, push, -1);
  EXPECT_FALSE(DecodeClientFrame(absl::string_view(negative).substr(kFrameLengthBytes)).ok());
  const std::string huge =
      EncodeUploadStreamHeader(1, std::string(kMaxUploadMetaBytes + 1, 'm'), 1);
  EXPECT_FALSE(DecodeClientFrame(absl::string_view(huge).substr(kFrameLengthBytes)).ok());
  // Chunk-id lists must pair with reduce ids.
  EXPECT_FALSE(
      DecodeShuffleRpc(EncodeFetchShuffleBlockChunks({"a", "0", 1, 0, {1, 2}, {{0}}})).ok());
  // MergeStatuses: a cut bitmap, a count the bytes cannot hold, arrays that do not pair.
  std::string statuses = EncodeMergeStatuses({3, 4, {Sparse()}, {0}, {10}});
  EXPECT_FALSE(DecodeShuffleReply(statuses.substr(0, 20)).ok());
  std::string count = statuses;
  count[9 + 3] = 100;  // 100 bitmaps announced
  EXPECT_FALSE(DecodeShuffleReply(count).ok());
  EXPECT_FALSE(DecodeShuffleReply(EncodeMergeStatuses({3, 4, {Sparse()}, {0, 1}, {10}})).ok());
  // A return code Spark does not define.
  std::string code = EncodeBlockPushReturnCode({PushReturnCode::kSuccess, ""});
  code[1] = 9;
  EXPECT_FALSE(DecodeShuffleReply(code).ok());
}

// A string array's count was bounded only by the bytes left, so 4 wire bytes
// per empty string made 32 bytes of std::string: millions of empty local dirs decoded
// before anything checked them.
TEST(SparkWireTest, StringArraysAreBoundedInCountAsTheyAreDecoded) {
  const std::string dirs = EncodeRegisterExecutor(
      {"app", "0", {std::vector<std::string>(kMaxLocalDirs + 1), 1, "sort"}});
  absl::StatusOr<ShuffleRpc> decoded = DecodeShuffleRpc(dirs);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("localDirs: 65 strings, over the limit of 64"),
            std::string::npos)
      << decoded.status();
  const std::string execs = EncodeGetLocalDirsForExecutors(
      {"app", std::vector<std::string>(kMaxLocalDirsExecutors + 1, "1")});
  EXPECT_FALSE(DecodeShuffleRpc(execs).ok());
  EXPECT_TRUE(DecodeShuffleRpc(EncodeGetLocalDirsForExecutors(
                                   {"app", std::vector<std::string>(kMaxLocalDirsExecutors, "1")}))
                  .ok());
}

}  // namespace
}  // namespace ferry::spark
