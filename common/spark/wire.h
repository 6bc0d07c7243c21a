// Spark's shuffle-service wire format (Spark 3.5.0; docs/protocol.md, "Spark's shuffle
// protocol", and tests/common/spark/wire_test.cc checks golden frames from Spark's own
// encoders both ways): the transport frames and the shuffle service's RPC payloads,
// encoded and decoded. Big-endian throughout.
//
//   frame = frameLen:i64 (counting its own 8 bytes) | type:u8 | header | in-frame body
//
// Decoders take bytes from the wire and check every length and count against the bytes
// there before they allocate, so a peer cannot make them hold more than it sent. Nothing
// here does I/O.
#ifndef FERRY_COMMON_SPARK_WIRE_H_
#define FERRY_COMMON_SPARK_WIRE_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/spark/bitmap.h"

namespace ferry::spark {

inline constexpr size_t kFrameLengthBytes = 8;
// The decoder's bound on frameLen - 8 (TransportFrameDecoder): a frame's type, header
// and in-frame body together are below 2^31 - 1 bytes.
inline constexpr uint64_t kMaxFrameBodyBytes = (uint64_t{1} << 31) - 2;

enum class MessageType : uint8_t {
  kChunkFetchRequest = 0,
  kChunkFetchSuccess = 1,
  kChunkFetchFailure = 2,
  kRpcRequest = 3,
  kRpcResponse = 4,
  kRpcFailure = 5,
  kStreamRequest = 6,
  kStreamResponse = 7,
  kStreamFailure = 8,
  kOneWayMessage = 9,
  kUploadStream = 10,
  kMergedBlockMetaRequest = 11,
  kMergedBlockMetaSuccess = 12,
};

// Big-endian writes onto the end of a string.
class WireWriter {
 public:
  explicit WireWriter(std::string* out) : out_(out) {}
  void U8(uint8_t v);
  void I32(int32_t v);
  void I64(int64_t v);
  void Bool(bool v) { U8(v ? 1 : 0); }
  void String(absl::string_view s);
  void StringArray(const std::vector<std::string>& v);
  void IntArray(const std::vector<int32_t>& v);
  void LongArray(const std::vector<int64_t>& v);
  void Bitmap(const spark::Bitmap& b) { b.AppendTo(out_); }

 private:
  std::string* out_;
};

// Bounds-checked big-endian reads from bytes a peer sent. Each read fails (and every
// later one with it) rather than read past the end; `what` names the field in the error.
class WireReader {
 public:
  explicit WireReader(absl::string_view bytes) : bytes_(bytes) {}
  bool U8(uint8_t* v, const char* what);
  bool I32(int32_t* v, const char* what);
  bool I64(int64_t* v, const char* what);
  bool Bool(bool* v, const char* what);
  // A string of at most `max_bytes` bytes.
  bool String(std::string* s, const char* what, size_t max_bytes = 4096);
  // Arrays whose count must fit in the bytes left (so a huge count cannot allocate).
  // A string array holds at most `max_count` strings: each costs a std::string (32
  // bytes) for as few as 4 wire bytes, so the count is what bounds its memory.
  bool StringArray(std::vector<std::string>* v, const char* what, size_t max_count,
                   size_t max_bytes = 4096);
  bool IntArray(std::vector<int32_t>* v, const char* what);
  bool LongArray(std::vector<int64_t>* v, const char* what);
  // An array of int arrays (each at least its 4-byte count on the wire).
  bool IntArrays(std::vector<std::vector<int32_t>>* v, const char* what);
  // A RoaringBitmap (no length before it) of at most `max_values` values.
  bool Bitmap(spark::Bitmap* b, const char* what, uint64_t max_values);
  // An array's count, which must fit in the bytes left as `element_bytes`-byte elements.
  bool Count(int32_t* count, size_t element_bytes, const char* what);
  // OK when every read succeeded and, with `whole`, nothing is left over; otherwise
  // INVALID_ARGUMENT naming the field and `message`.
  absl::Status Finish(absl::string_view message, bool whole = true) const;
  absl::string_view rest() const { return bytes_; }

 private:
  bool Fail(const char* what, absl::string_view why);
  absl::string_view bytes_;
  std::string error_;
};

// --- Frames a client sends -----------------------------------------------------------

struct ChunkFetchRequest {
  int64_t stream_id = 0;
  int32_t chunk_index = 0;
};
struct RpcRequest {
  int64_t request_id = 0;
  std::string body;  // a BlockTransferMessage
};
struct StreamRequest {
  std::string stream_id;  // "<streamId>_<chunkIndex>"
};
struct OneWayMessage {
  std::string body;
};
// An upload: `meta` is a BlockTransferMessage (push-based shuffle's PushBlockStream) and
// `body_bytes` raw bytes follow the frame, outside it.
struct UploadStream {
  int64_t request_id = 0;
  std::string meta;
  int64_t body_bytes = 0;
};
// Push-based shuffle: the chunk bitmaps of a merged partition (answered with
// MergedBlockMetaSuccess, whose body is the partition's .meta file).
struct MergedBlockMetaRequest {
  int64_t request_id = 0;
  std::string app_id;
  int32_t shuffle_id = 0;
  int32_t shuffle_merge_id = 0;
  int32_t reduce_id = 0;
};
// A type a client does not send (a server's, or unknown): never served.
struct UnsupportedMessage {
  MessageType type;
};
// The largest UploadStream meta taken: a PushBlockStream is an app id and six ints.
inline constexpr size_t kMaxUploadMetaBytes = 4096;
using ClientMessage = std::variant<ChunkFetchRequest, RpcRequest, StreamRequest, OneWayMessage,
                                   UploadStream, MergedBlockMetaRequest, UnsupportedMessage>;

// frameLen from the first 8 bytes of a frame: the bytes that follow it (type, header,
// in-frame body). INVALID_ARGUMENT outside (0, kMaxFrameBodyBytes].
absl::StatusOr<uint64_t> DecodeFrameLength(absl::string_view eight_bytes);

// A client frame from the bytes after its frameLen. INVALID_ARGUMENT for a malformed
// one, naming the type and field.
absl::StatusOr<ClientMessage> DecodeClientFrame(absl::string_view frame);

// Whole frames, for clients and tests.
std::string EncodeChunkFetchRequest(const ChunkFetchRequest& m);
std::string EncodeRpcRequest(int64_t request_id, absl::string_view body);
std::string EncodeStreamRequest(absl::string_view stream_id);
std::string EncodeOneWayMessage(absl::string_view body);
// The UploadStream frame; `body_bytes` raw bytes follow it.
std::string EncodeUploadStreamHeader(int64_t request_id, absl::string_view meta,
                                     int64_t body_bytes);
std::string EncodeMergedBlockMetaRequest(const MergedBlockMetaRequest& m);

// --- Frames the server sends -----------------------------------------------------------

// The frame header of a ChunkFetchSuccess whose `body_bytes` of block follow in the frame
// (sent separately: spliced or copied). body_bytes must be at most kMaxChunkBodyBytes.
// Built once per chunk served, so it lives on the caller's stack, not the heap.
inline constexpr uint64_t kMaxChunkBodyBytes = kMaxFrameBodyBytes - 13;
struct ChunkFetchSuccessHeader {
  static constexpr size_t kBytes = kFrameLengthBytes + 1 + 8 + 4;
  char bytes[kBytes];
  absl::string_view view() const { return absl::string_view(bytes, kBytes); }
};
ChunkFetchSuccessHeader EncodeChunkFetchSuccessHeader(int64_t stream_id, int32_t chunk_index,
                                                      uint64_t body_bytes);
std::string EncodeChunkFetchFailure(int64_t stream_id, int32_t chunk_index,
                                    absl::string_view error);
std::string EncodeRpcResponse(int64_t request_id, absl::string_view body);
std::string EncodeRpcFailure(int64_t request_id, absl::string_view error);
// The StreamResponse frame; `byte_count` raw bytes follow it, outside the frame.
std::string EncodeStreamResponseHeader(absl::string_view stream_id, uint64_t byte_count);
std::string EncodeStreamFailure(absl::string_view stream_id, absl::string_view error);
// The MergedBlockMetaSuccess frame header; `body_bytes` of chunk bitmaps (the .meta
// file) follow in the frame, sent separately as a block is.
std::string EncodeMergedBlockMetaSuccessHeader(int64_t request_id, int32_t num_chunks,
                                               uint64_t body_bytes);

// The frames a server sends, decoded (the client's side). A ChunkFetchSuccess's block
// is its frame's rest and a StreamResponse's follows its frame: a client reads the
// header first (kServerHeaderBytes of a ChunkFetchSuccess) and the block as it comes.
struct ChunkFetchSuccess {
  int64_t stream_id = 0;
  int32_t chunk_index = 0;
  std::string body;  // what of the block was in the bytes decoded
};
struct ChunkFetchFailure {
  int64_t stream_id = 0;
  int32_t chunk_index = 0;
  std::string error;
};
struct RpcResponse {
  int64_t request_id = 0;
  std::string body;
};
struct RpcFailure {
  int64_t request_id = 0;
  std::string error;
};
struct StreamResponse {
  std::string stream_id;
  int64_t byte_count = 0;  // the bytes that follow the frame
};
struct StreamFailure {
  std::string stream_id;
  std::string error;
};
struct MergedBlockMetaSuccess {
  int64_t request_id = 0;
  int32_t num_chunks = 0;
  std::string body;  // the chunks' bitmaps: Bitmap::Read them one after the other
};
using ServerMessage = std::variant<ChunkFetchSuccess, ChunkFetchFailure, RpcResponse, RpcFailure,
                                   StreamResponse, StreamFailure, MergedBlockMetaSuccess>;
// A ChunkFetchSuccess's type and header, before its block.
inline constexpr size_t kChunkFetchSuccessHeaderBytes = 1 + 8 + 4;
// A server frame from the bytes after its frameLen (for a ChunkFetchSuccess, at least
// its header). INVALID_ARGUMENT for a malformed one or a type a server does not send,
// naming the type and field; an error string is taken up to `max_error_bytes`.
absl::StatusOr<ServerMessage> DecodeServerFrame(absl::string_view frame,
                                                size_t max_error_bytes = 1 << 20);

// --- The shuffle service's RPC payloads (BlockTransferMessage) ------------------------

enum class BlockTransferType : uint8_t {
  kOpenBlocks = 0,
  kUploadBlock = 1,
  kRegisterExecutor = 2,
  kStreamHandle = 3,
  kRegisterDriver = 4,
  kShuffleServiceHeartbeat = 5,
  kUploadBlockStream = 6,
  kRemoveBlocks = 7,
  kBlocksRemoved = 8,
  kFetchShuffleBlocks = 9,
  kGetLocalDirsForExecutors = 10,
  kLocalDirsForExecutors = 11,
  kPushBlockStream = 12,
  kFinalizeShuffleMerge = 13,
  kMergeStatuses = 14,
  kFetchShuffleBlockChunks = 15,
  kDiagnoseCorruption = 16,
  kCorruptionCause = 17,
  kBlockPushReturnCode = 18,
  kRemoveShuffleMerge = 19,
};

struct ExecutorShuffleInfo {
  std::vector<std::string> local_dirs;
  int32_t sub_dirs_per_local_dir = 0;
  std::string shuffle_manager;
};
struct RegisterExecutor {
  std::string app_id;
  std::string exec_id;
  ExecutorShuffleInfo info;
};
struct OpenBlocks {
  std::string app_id;
  std::string exec_id;
  std::vector<std::string> block_ids;
};
struct FetchShuffleBlocks {
  std::string app_id;
  std::string exec_id;
  int32_t shuffle_id = 0;
  std::vector<int64_t> map_ids;
  // Per map id: reduce ids, or with batch_fetch_enabled one [start, end) pair.
  std::vector<std::vector<int32_t>> reduce_ids;
  bool batch_fetch_enabled = false;
};
struct RemoveBlocks {
  std::string app_id;
  std::string exec_id;
  std::vector<std::string> block_ids;
};
struct GetLocalDirsForExecutors {
  std::string app_id;
  std::vector<std::string> exec_ids;
};
struct DiagnoseCorruption {
  std::string app_id;
  std::string exec_id;
  int32_t shuffle_id = 0;
  int64_t map_id = 0;
  int32_t reduce_id = 0;
  int64_t checksum = 0;
  std::string algorithm;
};
// Bounds the decoder applies to what a peer sends, so that a decoded message holds
// little more memory than its frame: Spark's own values are far below each.
// An executor has a local dir per disk (DiskBlockManager).
inline constexpr size_t kMaxLocalDirs = 64;
// "sort", a class name, or (push-based shuffle) a class name with a short JSON tail.
inline constexpr size_t kMaxShuffleManagerBytes = 4096;
// The executors one GetLocalDirsForExecutors names: those of one host.
inline constexpr size_t kMaxLocalDirsExecutors = 16384;
// Block ids in one OpenBlocks or RemoveBlocks.
inline constexpr size_t kMaxBlockIds = size_t{1} << 20;

// Push-based shuffle (Spark 3.2+). A map task's block, pushed to a merger: the
// UploadStream's meta; the block is the upload's body.
struct PushBlockStream {
  std::string app_id;
  int32_t app_attempt_id = 0;
  int32_t shuffle_id = 0;
  int32_t shuffle_merge_id = 0;
  int32_t map_index = 0;
  int32_t reduce_id = 0;
  int32_t index = 0;  // the block's place in the pusher's batch
};
// The driver ends a shuffle's merge (answered with MergeStatuses) or drops one.
struct FinalizeShuffleMerge {
  std::string app_id;
  int32_t app_attempt_id = 0;
  int32_t shuffle_id = 0;
  int32_t shuffle_merge_id = 0;
};
struct RemoveShuffleMerge {
  std::string app_id;
  int32_t app_attempt_id = 0;
  int32_t shuffle_id = 0;
  int32_t shuffle_merge_id = 0;
};
// A reducer's fetch of merged chunks: per reduce id, its chunk ids (answered with a
// StreamHandle, one chunk per chunk id).
struct FetchShuffleBlockChunks {
  std::string app_id;
  std::string exec_id;
  int32_t shuffle_id = 0;
  int32_t shuffle_merge_id = 0;
  std::vector<int32_t> reduce_ids;
  std::vector<std::vector<int32_t>> chunk_ids;
};

// A BlockTransferMessage the service does not serve (uploads between executors, Mesos,
// a reply's type, or an unknown id).
struct UnsupportedRpc {
  uint8_t type = 0;
};
using ShuffleRpc = std::variant<RegisterExecutor, OpenBlocks, FetchShuffleBlocks, RemoveBlocks,
                                GetLocalDirsForExecutors, DiagnoseCorruption, FinalizeShuffleMerge,
                                RemoveShuffleMerge, FetchShuffleBlockChunks, UnsupportedRpc>;

// The name Spark gives a BlockTransferMessage type ("FetchShuffleBlocks"), or "type N".
std::string BlockTransferTypeName(uint8_t type);

// Decodes an RpcRequest's body. INVALID_ARGUMENT for a malformed one, naming the message
// and field; a well-formed message of a type not served is UnsupportedRpc.
absl::StatusOr<ShuffleRpc> DecodeShuffleRpc(absl::string_view body);
// An UploadStream's meta: INVALID_ARGUMENT unless it is one PushBlockStream.
absl::StatusOr<PushBlockStream> DecodePushBlockStream(absl::string_view meta);

// RPC payloads, encoded (replies for the server; requests for clients and tests).
std::string EncodeRegisterExecutor(const RegisterExecutor& m);
// EncodeRegisterExecutor(m).size(), without encoding it.
size_t EncodedSize(const RegisterExecutor& m);
std::string EncodeOpenBlocks(const OpenBlocks& m);
std::string EncodeFetchShuffleBlocks(const FetchShuffleBlocks& m);
std::string EncodeRemoveBlocks(const RemoveBlocks& m);
std::string EncodeGetLocalDirsForExecutors(const GetLocalDirsForExecutors& m);
std::string EncodeDiagnoseCorruption(const DiagnoseCorruption& m);
std::string EncodePushBlockStream(const PushBlockStream& m);
std::string EncodeFinalizeShuffleMerge(const FinalizeShuffleMerge& m);
std::string EncodeRemoveShuffleMerge(const RemoveShuffleMerge& m);
std::string EncodeFetchShuffleBlockChunks(const FetchShuffleBlockChunks& m);
std::string EncodeStreamHandle(int64_t stream_id, int32_t num_chunks);
std::string EncodeBlocksRemoved(int32_t num_removed);
std::string EncodeLocalDirsForExecutors(const std::vector<std::string>& exec_ids,
                                        const std::vector<int32_t>& num_local_dirs,
                                        const std::vector<std::string>& all_local_dirs);
// CorruptionCause: 0 DISK_ISSUE, 1 NETWORK_ISSUE, 2 UNKNOWN_ISSUE, 3 CHECKSUM_VERIFY_PASS,
// 4 UNSUPPORTED_CHECKSUM_ALGORITHM.
std::string EncodeCorruptionCause(uint8_t cause);

// What a merger answers each push (BlockPushNonFatalFailure.ReturnCode); a failure's
// `failure_block_id` names the push ("shufflePush_<shuffle>_<merge>_<map>_<reduce>").
enum class PushReturnCode : uint8_t {
  kSuccess = 0,
  kTooLateBlockPush = 1,  // the shuffle's merge is finalized
  kBlockAppendCollisionDetected = 2,
  kStaleBlockPush = 3,  // a newer shuffle merge id has been seen
  kTooOldAttemptPush = 4,
};
struct BlockPushReturnCode {
  PushReturnCode code = PushReturnCode::kSuccess;
  std::string failure_block_id;
};
std::string EncodeBlockPushReturnCode(const BlockPushReturnCode& m);
// What a finalized merge holds: per merged partition (reduce id), the map indexes merged
// and the merged bytes.
struct MergeStatuses {
  int32_t shuffle_id = 0;
  int32_t shuffle_merge_id = 0;
  std::vector<Bitmap> bitmaps;
  std::vector<int32_t> reduce_ids;
  std::vector<int64_t> sizes;
};
std::string EncodeMergeStatuses(const MergeStatuses& m);
// The map indexes one bitmap of a reply may hold (Spark's map index is an int; a
// shuffle's maps are far fewer).
inline constexpr uint64_t kMaxBitmapValues = uint64_t{1} << 24;

// The replies above, decoded: what a client reads in an RpcResponse's body.
struct StreamHandle {
  int64_t stream_id = 0;
  int32_t num_chunks = 0;
};
struct BlocksRemoved {
  int32_t num_removed = 0;
};
struct LocalDirsForExecutors {
  std::vector<std::string> exec_ids;
  std::vector<int32_t> num_local_dirs;
  std::vector<std::string> all_local_dirs;
};
struct CorruptionCause {
  uint8_t cause = 0;
};
using ShuffleReply = std::variant<StreamHandle, BlocksRemoved, LocalDirsForExecutors,
                                  CorruptionCause, BlockPushReturnCode, MergeStatuses>;
// INVALID_ARGUMENT naming the field for a body that is none of them (or has bytes left).
absl::StatusOr<ShuffleReply> DecodeShuffleReply(absl::string_view body);

// --- spark.authenticate's handshake (RPC bodies before any shuffle message) ------------

// Tags of the handshake's RPC bodies, in the byte where a BlockTransferMessage has its type.
inline constexpr uint8_t kSaslMessageTag = 0xEA;  // SaslMessage: SASL DIGEST-MD5
inline constexpr uint8_t kAuthMessageTag = 0xFB;  // AuthMessage: Spark's AuthEngine

// SaslMessage = 0xEA | appId:String | tokenLen:i32 | token. The token is what follows
// tokenLen: Spark writes tokenLen and reads past it (the frame already bounds the body).
struct SaslMessage {
  std::string app_id;
  std::string token;
};
inline constexpr size_t kMaxSaslTokenBytes = 64 << 10;

// INVALID_ARGUMENT for a body that is not a SaslMessage, or holds a token over
// kMaxSaslTokenBytes (DIGEST-MD5's are a few hundred bytes).
absl::StatusOr<SaslMessage> DecodeSaslMessage(absl::string_view body);
std::string EncodeSaslMessage(const SaslMessage& m);

// AuthMessage = 0xFB | appId:String | salt:ByteArray | ciphertext:ByteArray (a byte
// array is encoded as a string is): one side of Spark's AuthEngine handshake
// (common/spark/crypto.h). Spark's salts are 16 bytes and its ciphertexts 60.
struct AuthMessage {
  std::string app_id;
  std::string salt;
  std::string ciphertext;
};
inline constexpr size_t kMaxAuthFieldBytes = 1024;
// INVALID_ARGUMENT for a body that is not one AuthMessage, or whose salt or ciphertext
// is over kMaxAuthFieldBytes.
absl::StatusOr<AuthMessage> DecodeAuthMessage(absl::string_view body);
std::string EncodeAuthMessage(const AuthMessage& m);

}  // namespace ferry::spark

#endif  // FERRY_COMMON_SPARK_WIRE_H_
