// The codec against the golden frames Spark 3.5.0's own encoders produced
// (../shared/spark-ess/PROTOCOL.md, Appendix A), both ways, and against malformed input.
#include "common/spark/wire.h"

#include <cstdint>
#include <string>

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
  // Push-based shuffle's FinalizeShuffleMerge, and an id Spark does not define.
  for (uint8_t type : {uint8_t{13}, uint8_t{99}}) {
    auto decoded = DecodeShuffleRpc(std::string(1, static_cast<char>(type)) + "rest");
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(std::get<UnsupportedRpc>(*decoded).type, type);
  }
  EXPECT_EQ(BlockTransferTypeName(13), "FinalizeShuffleMerge");
  EXPECT_EQ(BlockTransferTypeName(99), "type 99");
  // An UploadStream frame: not served, but its request id is kept to answer with.
  std::string upload;
  WireWriter w(&upload);
  w.U8(static_cast<uint8_t>(MessageType::kUploadStream));
  w.I64(kRequestId);
  auto frame = DecodeClientFrame(upload);
  ASSERT_TRUE(frame.ok());
  EXPECT_TRUE(std::get<UnsupportedMessage>(*frame).has_request_id);
  EXPECT_EQ(std::get<UnsupportedMessage>(*frame).request_id, kRequestId);
  EXPECT_FALSE(DecodeClientFrame("").ok());
  EXPECT_FALSE(DecodeClientFrame(std::string(1, '\0') + "short").ok());
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
