#include "common/spark/wire.h"

#include <endian.h>

#include <cstring>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ferry::spark {

namespace {

// A frame: frameLen (counting itself), then the type byte, then `rest`.
std::string Frame(MessageType type, absl::string_view rest, uint64_t body_outside = 0) {
  std::string out;
  WireWriter w(&out);
  w.I64(static_cast<int64_t>(kFrameLengthBytes + 1 + rest.size() + body_outside));
  w.U8(static_cast<uint8_t>(type));
  out.append(rest.data(), rest.size());
  return out;
}

}  // namespace

void WireWriter::U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }

void WireWriter::I32(int32_t v) {
  const uint32_t be = htobe32(static_cast<uint32_t>(v));
  out_->append(reinterpret_cast<const char*>(&be), sizeof(be));
}

void WireWriter::I64(int64_t v) {
  const uint64_t be = htobe64(static_cast<uint64_t>(v));
  out_->append(reinterpret_cast<const char*>(&be), sizeof(be));
}

void WireWriter::String(absl::string_view s) {
  I32(static_cast<int32_t>(s.size()));
  out_->append(s.data(), s.size());
}

void WireWriter::StringArray(const std::vector<std::string>& v) {
  I32(static_cast<int32_t>(v.size()));
  for (const std::string& s : v) String(s);
}

void WireWriter::IntArray(const std::vector<int32_t>& v) {
  I32(static_cast<int32_t>(v.size()));
  for (int32_t x : v) I32(x);
}

void WireWriter::LongArray(const std::vector<int64_t>& v) {
  I32(static_cast<int32_t>(v.size()));
  for (int64_t x : v) I64(x);
}

bool WireReader::Fail(const char* what, absl::string_view why) {
  if (error_.empty()) error_ = absl::StrCat(what, ": ", why);
  bytes_ = absl::string_view();
  return false;
}

bool WireReader::U8(uint8_t* v, const char* what) {
  if (!error_.empty()) return false;
  if (bytes_.empty()) return Fail(what, "the message ends before it");
  *v = static_cast<uint8_t>(bytes_[0]);
  bytes_.remove_prefix(1);
  return true;
}

bool WireReader::I32(int32_t* v, const char* what) {
  if (!error_.empty()) return false;
  if (bytes_.size() < 4) return Fail(what, "the message ends before it");
  uint32_t be;
  std::memcpy(&be, bytes_.data(), 4);
  *v = static_cast<int32_t>(be32toh(be));
  bytes_.remove_prefix(4);
  return true;
}

bool WireReader::I64(int64_t* v, const char* what) {
  if (!error_.empty()) return false;
  if (bytes_.size() < 8) return Fail(what, "the message ends before it");
  uint64_t be;
  std::memcpy(&be, bytes_.data(), 8);
  *v = static_cast<int64_t>(be64toh(be));
  bytes_.remove_prefix(8);
  return true;
}

bool WireReader::Bool(bool* v, const char* what) {
  uint8_t b = 0;
  if (!U8(&b, what)) return false;
  if (b > 1) return Fail(what, absl::StrCat("a boolean of ", b));
  *v = b == 1;
  return true;
}

bool WireReader::String(std::string* s, const char* what, size_t max_bytes) {
  int32_t len = 0;
  if (!I32(&len, what)) return false;
  if (len < 0) return Fail(what, absl::StrCat("a negative length (", len, ")"));
  if (static_cast<size_t>(len) > max_bytes) {
    return Fail(what, absl::StrCat(len, " bytes, over the limit of ", max_bytes));
  }
  if (static_cast<size_t>(len) > bytes_.size()) {
    return Fail(what, absl::StrCat(len, " bytes, but the message has ", bytes_.size(), " left"));
  }
  s->assign(bytes_.data(), static_cast<size_t>(len));
  bytes_.remove_prefix(static_cast<size_t>(len));
  return true;
}

bool WireReader::Count(int32_t* count, size_t element_bytes, const char* what) {
  if (!I32(count, what)) return false;
  if (*count < 0 || static_cast<size_t>(*count) > bytes_.size() / element_bytes) {
    return Fail(what, absl::StrCat("a count of ", *count, " that the ", bytes_.size(),
                                   " bytes left cannot hold"));
  }
  return true;
}

bool WireReader::StringArray(std::vector<std::string>* v, const char* what, size_t max_count,
                             size_t max_bytes) {
  int32_t count = 0;
  if (!Count(&count, 4, what)) return false;
  if (static_cast<size_t>(count) > max_count) {
    return Fail(what, absl::StrCat(count, " strings, over the limit of ", max_count));
  }
  v->clear();
  v->reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    v->emplace_back();
    if (!String(&v->back(), what, max_bytes)) return false;
  }
  return true;
}

bool WireReader::IntArray(std::vector<int32_t>* v, const char* what) {
  int32_t count = 0;
  if (!Count(&count, 4, what)) return false;
  v->resize(static_cast<size_t>(count));
  for (int32_t& x : *v) {
    if (!I32(&x, what)) return false;
  }
  return true;
}

bool WireReader::IntArrays(std::vector<std::vector<int32_t>>* v, const char* what) {
  int32_t count = 0;
  if (!Count(&count, 4, what)) return false;
  v->resize(static_cast<size_t>(count));
  for (std::vector<int32_t>& ids : *v) {
    if (!IntArray(&ids, what)) return false;
  }
  return true;
}

bool WireReader::LongArray(std::vector<int64_t>* v, const char* what) {
  int32_t count = 0;
  if (!Count(&count, 8, what)) return false;
  v->resize(static_cast<size_t>(count));
  for (int64_t& x : *v) {
    if (!I64(&x, what)) return false;
  }
  return true;
}

bool WireReader::Bitmap(spark::Bitmap* b, const char* what, uint64_t max_values) {
  if (!error_.empty()) return false;
  absl::StatusOr<spark::Bitmap> read = spark::Bitmap::Read(&bytes_, max_values);
  if (!read.ok()) return Fail(what, read.status().message());
  *b = *std::move(read);
  return true;
}

absl::Status WireReader::Finish(absl::string_view message, bool whole) const {
  if (!error_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", message, ": ", error_));
  }
  if (whole && !bytes_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", message, ": ", bytes_.size(), " bytes after its last field"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DecodeFrameLength(absl::string_view eight_bytes) {
  WireReader r(eight_bytes);
  int64_t frame_length = 0;
  r.I64(&frame_length, "frame length");
  FERRY_RETURN_IF_ERROR(r.Finish("frame"));
  // Compared before subtracting: the length is the peer's, and may be INT64_MIN.
  if (frame_length <= static_cast<int64_t>(kFrameLengthBytes) ||
      static_cast<uint64_t>(frame_length) - kFrameLengthBytes > kMaxFrameBodyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame length ", frame_length,
                                                   " is outside Spark's bounds (9 to 2^31 bytes)"));
  }
  return static_cast<uint64_t>(frame_length) - kFrameLengthBytes;
}

absl::StatusOr<ClientMessage> DecodeClientFrame(absl::string_view frame) {
  WireReader r(frame);
  uint8_t type = 0;
  if (!r.U8(&type, "message type")) return r.Finish("frame");
  switch (static_cast<MessageType>(type)) {
    case MessageType::kChunkFetchRequest: {
      ChunkFetchRequest m;
      r.I64(&m.stream_id, "streamId");
      r.I32(&m.chunk_index, "chunkIndex");
      FERRY_RETURN_IF_ERROR(r.Finish("ChunkFetchRequest"));
      return m;
    }
    case MessageType::kRpcRequest: {
      RpcRequest m;
      int32_t body_len = 0;
      r.I64(&m.request_id, "requestId");
      r.I32(&body_len, "bodyLen");  // redundant with the frame length; Spark ignores it
      FERRY_RETURN_IF_ERROR(r.Finish("RpcRequest", /*whole=*/false));
      m.body = std::string(r.rest());
      return m;
    }
    case MessageType::kStreamRequest: {
      StreamRequest m;
      r.String(&m.stream_id, "streamId", 64);
      FERRY_RETURN_IF_ERROR(r.Finish("StreamRequest"));
      return m;
    }
    case MessageType::kOneWayMessage: {
      OneWayMessage m;
      int32_t body_len = 0;
      r.I32(&body_len, "bodyLen");
      FERRY_RETURN_IF_ERROR(r.Finish("OneWayMessage", /*whole=*/false));
      m.body = std::string(r.rest());
      return m;
    }
    case MessageType::kUploadStream: {
      UploadStream m;
      r.I64(&m.request_id, "requestId");
      r.String(&m.meta, "meta", kMaxUploadMetaBytes);
      r.I64(&m.body_bytes, "bodyByteCount");
      FERRY_RETURN_IF_ERROR(r.Finish("UploadStream"));
      if (m.body_bytes < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("UploadStream: a bodyByteCount of ", m.body_bytes));
      }
      return m;
    }
    case MessageType::kMergedBlockMetaRequest: {
      MergedBlockMetaRequest m;
      r.I64(&m.request_id, "requestId");
      r.String(&m.app_id, "appId");
      r.I32(&m.shuffle_id, "shuffleId");
      r.I32(&m.shuffle_merge_id, "shuffleMergeId");
      r.I32(&m.reduce_id, "reduceId");
      FERRY_RETURN_IF_ERROR(r.Finish("MergedBlockMetaRequest"));
      return m;
    }
    default:
      return UnsupportedMessage{static_cast<MessageType>(type)};
  }
}

absl::StatusOr<ServerMessage> DecodeServerFrame(absl::string_view frame, size_t max_error_bytes) {
  WireReader r(frame);
  uint8_t type = 0;
  if (!r.U8(&type, "message type")) return r.Finish("frame");
  switch (static_cast<MessageType>(type)) {
    case MessageType::kChunkFetchSuccess: {
      ChunkFetchSuccess m;
      r.I64(&m.stream_id, "streamId");
      r.I32(&m.chunk_index, "chunkIndex");
      FERRY_RETURN_IF_ERROR(r.Finish("ChunkFetchSuccess", /*whole=*/false));
      m.body = std::string(r.rest());
      return m;
    }
    case MessageType::kChunkFetchFailure: {
      ChunkFetchFailure m;
      r.I64(&m.stream_id, "streamId");
      r.I32(&m.chunk_index, "chunkIndex");
      r.String(&m.error, "errorString", max_error_bytes);
      FERRY_RETURN_IF_ERROR(r.Finish("ChunkFetchFailure"));
      return m;
    }
    case MessageType::kRpcResponse: {
      RpcResponse m;
      int32_t body_len = 0;
      r.I64(&m.request_id, "requestId");
      r.I32(&body_len, "bodyLen");
      FERRY_RETURN_IF_ERROR(r.Finish("RpcResponse", /*whole=*/false));
      m.body = std::string(r.rest());
      return m;
    }
    case MessageType::kRpcFailure: {
      RpcFailure m;
      r.I64(&m.request_id, "requestId");
      r.String(&m.error, "errorString", max_error_bytes);
      FERRY_RETURN_IF_ERROR(r.Finish("RpcFailure"));
      return m;
    }
    case MessageType::kStreamResponse: {
      StreamResponse m;
      r.String(&m.stream_id, "streamId", 64);
      r.I64(&m.byte_count, "byteCount");
      FERRY_RETURN_IF_ERROR(r.Finish("StreamResponse"));
      if (m.byte_count < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("StreamResponse: a byteCount of ", m.byte_count));
      }
      return m;
    }
    case MessageType::kStreamFailure: {
      StreamFailure m;
      r.String(&m.stream_id, "streamId", 64);
      r.String(&m.error, "errorString", max_error_bytes);
      FERRY_RETURN_IF_ERROR(r.Finish("StreamFailure"));
      return m;
    }
    case MessageType::kMergedBlockMetaSuccess: {
      MergedBlockMetaSuccess m;
      r.I64(&m.request_id, "requestId");
      r.I32(&m.num_chunks, "numChunks");
      FERRY_RETURN_IF_ERROR(r.Finish("MergedBlockMetaSuccess", /*whole=*/false));
      if (m.num_chunks < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("MergedBlockMetaSuccess: ", m.num_chunks, " chunks"));
      }
      m.body = std::string(r.rest());
      return m;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("message type ", int{type}, " is not one a shuffle service sends"));
  }
}

std::string EncodeChunkFetchRequest(const ChunkFetchRequest& m) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(m.stream_id);
  w.I32(m.chunk_index);
  return Frame(MessageType::kChunkFetchRequest, rest);
}

std::string EncodeRpcRequest(int64_t request_id, absl::string_view body) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(request_id);
  w.I32(static_cast<int32_t>(body.size()));
  rest.append(body.data(), body.size());
  return Frame(MessageType::kRpcRequest, rest);
}

std::string EncodeStreamRequest(absl::string_view stream_id) {
  std::string rest;
  WireWriter(&rest).String(stream_id);
  return Frame(MessageType::kStreamRequest, rest);
}

std::string EncodeUploadStreamHeader(int64_t request_id, absl::string_view meta,
                                     int64_t body_bytes) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(request_id);
  w.String(meta);
  w.I64(body_bytes);
  return Frame(MessageType::kUploadStream, rest);
}

std::string EncodeMergedBlockMetaRequest(const MergedBlockMetaRequest& m) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(m.request_id);
  w.String(m.app_id);
  w.I32(m.shuffle_id);
  w.I32(m.shuffle_merge_id);
  w.I32(m.reduce_id);
  return Frame(MessageType::kMergedBlockMetaRequest, rest);
}

std::string EncodeMergedBlockMetaSuccessHeader(int64_t request_id, int32_t num_chunks,
                                               uint64_t body_bytes) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(request_id);
  w.I32(num_chunks);
  return Frame(MessageType::kMergedBlockMetaSuccess, rest, body_bytes);
}

std::string EncodeOneWayMessage(absl::string_view body) {
  std::string rest;
  WireWriter(&rest).I32(static_cast<int32_t>(body.size()));
  rest.append(body.data(), body.size());
  return Frame(MessageType::kOneWayMessage, rest);
}

ChunkFetchSuccessHeader EncodeChunkFetchSuccessHeader(int64_t stream_id, int32_t chunk_index,
                                                      uint64_t body_bytes) {
  ChunkFetchSuccessHeader header;
  const uint64_t length = htobe64(ChunkFetchSuccessHeader::kBytes + body_bytes);
  const uint64_t stream = htobe64(static_cast<uint64_t>(stream_id));
  const uint32_t chunk = htobe32(static_cast<uint32_t>(chunk_index));
  std::memcpy(header.bytes, &length, 8);
  header.bytes[8] = static_cast<char>(MessageType::kChunkFetchSuccess);
  std::memcpy(header.bytes + 9, &stream, 8);
  std::memcpy(header.bytes + 17, &chunk, 4);
  return header;
}

std::string EncodeChunkFetchFailure(int64_t stream_id, int32_t chunk_index,
                                    absl::string_view error) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(stream_id);
  w.I32(chunk_index);
  w.String(error);
  return Frame(MessageType::kChunkFetchFailure, rest);
}

std::string EncodeRpcResponse(int64_t request_id, absl::string_view body) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(request_id);
  w.I32(static_cast<int32_t>(body.size()));
  rest.append(body.data(), body.size());
  return Frame(MessageType::kRpcResponse, rest);
}

std::string EncodeRpcFailure(int64_t request_id, absl::string_view error) {
  std::string rest;
  WireWriter w(&rest);
  w.I64(request_id);
  w.String(error);
  return Frame(MessageType::kRpcFailure, rest);
}

std::string EncodeStreamResponseHeader(absl::string_view stream_id, uint64_t byte_count) {
  std::string rest;
  WireWriter w(&rest);
  w.String(stream_id);
  w.I64(static_cast<int64_t>(byte_count));
  return Frame(MessageType::kStreamResponse, rest);
}

std::string EncodeStreamFailure(absl::string_view stream_id, absl::string_view error) {
  std::string rest;
  WireWriter w(&rest);
  w.String(stream_id);
  w.String(error);
  return Frame(MessageType::kStreamFailure, rest);
}

std::string BlockTransferTypeName(uint8_t type) {
  static constexpr const char* kNames[] = {"OpenBlocks",
                                           "UploadBlock",
                                           "RegisterExecutor",
                                           "StreamHandle",
                                           "RegisterDriver",
                                           "ShuffleServiceHeartbeat",
                                           "UploadBlockStream",
                                           "RemoveBlocks",
                                           "BlocksRemoved",
                                           "FetchShuffleBlocks",
                                           "GetLocalDirsForExecutors",
                                           "LocalDirsForExecutors",
                                           "PushBlockStream",
                                           "FinalizeShuffleMerge",
                                           "MergeStatuses",
                                           "FetchShuffleBlockChunks",
                                           "DiagnoseCorruption",
                                           "CorruptionCause",
                                           "BlockPushReturnCode",
                                           "RemoveShuffleMerge"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return absl::StrCat("type ", type);
}

namespace {

// A FetchShuffleBlocks after its type byte: a list of reduce ids per map id.
absl::StatusOr<FetchShuffleBlocks> DecodeFetchShuffleBlocks(WireReader& r,
                                                            const std::string& name) {
  FetchShuffleBlocks m;
  r.String(&m.app_id, "appId");
  r.String(&m.exec_id, "execId");
  r.I32(&m.shuffle_id, "shuffleId");
  r.LongArray(&m.map_ids, "mapIds");
  r.IntArrays(&m.reduce_ids, "reduceIds");
  r.Bool(&m.batch_fetch_enabled, "batchFetchEnabled");
  FERRY_RETURN_IF_ERROR(r.Finish(name));
  if (m.reduce_ids.size() != m.map_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", name, ": ", m.map_ids.size(),
                                                   " map ids but ", m.reduce_ids.size(),
                                                   " lists of reduce ids"));
  }
  return m;
}

// A FetchShuffleBlockChunks after its type byte: a list of chunk ids per reduce id.
absl::StatusOr<FetchShuffleBlockChunks> DecodeFetchShuffleBlockChunks(WireReader& r,
                                                                      const std::string& name) {
  FetchShuffleBlockChunks m;
  r.String(&m.app_id, "appId");
  r.String(&m.exec_id, "execId");
  r.I32(&m.shuffle_id, "shuffleId");
  r.I32(&m.shuffle_merge_id, "shuffleMergeId");
  r.IntArray(&m.reduce_ids, "reduceIds");
  r.IntArrays(&m.chunk_ids, "chunkIds");
  FERRY_RETURN_IF_ERROR(r.Finish(name));
  if (m.chunk_ids.size() != m.reduce_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", name, ": ", m.reduce_ids.size(),
                                                   " reduce ids but ", m.chunk_ids.size(),
                                                   " lists of chunk ids"));
  }
  return m;
}

}  // namespace

absl::StatusOr<ShuffleRpc> DecodeShuffleRpc(absl::string_view body) {
  WireReader r(body);
  uint8_t type = 0;
  if (!r.U8(&type, "message type")) return r.Finish("shuffle RPC");
  const std::string name = BlockTransferTypeName(type);
  switch (static_cast<BlockTransferType>(type)) {
    case BlockTransferType::kOpenBlocks:
    case BlockTransferType::kRemoveBlocks: {
      OpenBlocks m;
      r.String(&m.app_id, "appId");
      r.String(&m.exec_id, "execId");
      r.StringArray(&m.block_ids, "blockIds", kMaxBlockIds, 256);
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      if (type == static_cast<uint8_t>(BlockTransferType::kRemoveBlocks)) {
        return RemoveBlocks{std::move(m.app_id), std::move(m.exec_id), std::move(m.block_ids)};
      }
      return m;
    }
    case BlockTransferType::kRegisterExecutor: {
      RegisterExecutor m;
      r.String(&m.app_id, "appId");
      r.String(&m.exec_id, "execId");
      r.StringArray(&m.info.local_dirs, "localDirs", kMaxLocalDirs);
      r.I32(&m.info.sub_dirs_per_local_dir, "subDirsPerLocalDir");
      r.String(&m.info.shuffle_manager, "shuffleManager", kMaxShuffleManagerBytes);
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      return m;
    }
    case BlockTransferType::kFetchShuffleBlocks:
      return DecodeFetchShuffleBlocks(r, name);
    case BlockTransferType::kGetLocalDirsForExecutors: {
      GetLocalDirsForExecutors m;
      r.String(&m.app_id, "appId");
      r.StringArray(&m.exec_ids, "execIds", kMaxLocalDirsExecutors, 128);
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      return m;
    }
    case BlockTransferType::kDiagnoseCorruption: {
      DiagnoseCorruption m;
      r.String(&m.app_id, "appId");
      r.String(&m.exec_id, "execId");
      r.I32(&m.shuffle_id, "shuffleId");
      r.I64(&m.map_id, "mapId");
      r.I32(&m.reduce_id, "reduceId");
      r.I64(&m.checksum, "checksum");
      r.String(&m.algorithm, "algorithm", 64);
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      return m;
    }
    case BlockTransferType::kFinalizeShuffleMerge:
    case BlockTransferType::kRemoveShuffleMerge: {
      FinalizeShuffleMerge m;
      r.String(&m.app_id, "appId");
      r.I32(&m.app_attempt_id, "appAttemptId");
      r.I32(&m.shuffle_id, "shuffleId");
      r.I32(&m.shuffle_merge_id, "shuffleMergeId");
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      if (type == static_cast<uint8_t>(BlockTransferType::kRemoveShuffleMerge)) {
        return RemoveShuffleMerge{std::move(m.app_id), m.app_attempt_id, m.shuffle_id,
                                  m.shuffle_merge_id};
      }
      return m;
    }
    case BlockTransferType::kFetchShuffleBlockChunks:
      return DecodeFetchShuffleBlockChunks(r, name);
    default:
      return UnsupportedRpc{type};
  }
}

absl::StatusOr<PushBlockStream> DecodePushBlockStream(absl::string_view meta) {
  WireReader r(meta);
  uint8_t type = 0;
  r.U8(&type, "message type");
  if (r.Finish("UploadStream meta", /*whole=*/false).ok() &&
      type != static_cast<uint8_t>(BlockTransferType::kPushBlockStream)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an UploadStream whose meta is ", BlockTransferTypeName(type), ", not PushBlockStream"));
  }
  PushBlockStream m;
  r.String(&m.app_id, "appId");
  r.I32(&m.app_attempt_id, "appAttemptId");
  r.I32(&m.shuffle_id, "shuffleId");
  r.I32(&m.shuffle_merge_id, "shuffleMergeId");
  r.I32(&m.map_index, "mapIndex");
  r.I32(&m.reduce_id, "reduceId");
  r.I32(&m.index, "index");
  FERRY_RETURN_IF_ERROR(r.Finish("PushBlockStream"));
  return m;
}

namespace {

std::string Payload(BlockTransferType type, const std::function<void(WireWriter&)>& fields) {
  std::string out;
  WireWriter w(&out);
  w.U8(static_cast<uint8_t>(type));
  fields(w);
  return out;
}

// OpenBlocks and RemoveBlocks: the same fields under two type ids.
std::string EncodeBlockList(BlockTransferType type, const std::string& app_id,
                            const std::string& exec_id, const std::vector<std::string>& ids) {
  return Payload(type, [&](WireWriter& w) {
    w.String(app_id);
    w.String(exec_id);
    w.StringArray(ids);
  });
}

}  // namespace

std::string EncodeRegisterExecutor(const RegisterExecutor& m) {
  return Payload(BlockTransferType::kRegisterExecutor, [&](WireWriter& w) {
    w.String(m.app_id);
    w.String(m.exec_id);
    w.StringArray(m.info.local_dirs);
    w.I32(m.info.sub_dirs_per_local_dir);
    w.String(m.info.shuffle_manager);
  });
}

size_t EncodedSize(const RegisterExecutor& m) {
  // The type, three strings and an int, and a string array (its count, then each string).
  size_t bytes = 1 + (4 + m.app_id.size()) + (4 + m.exec_id.size()) + 4 + 4 +
                 (4 + m.info.shuffle_manager.size());
  for (const std::string& dir : m.info.local_dirs) bytes += 4 + dir.size();
  return bytes;
}

std::string EncodeOpenBlocks(const OpenBlocks& m) {
  return EncodeBlockList(BlockTransferType::kOpenBlocks, m.app_id, m.exec_id, m.block_ids);
}

std::string EncodeFetchShuffleBlocks(const FetchShuffleBlocks& m) {
  return Payload(BlockTransferType::kFetchShuffleBlocks, [&](WireWriter& w) {
    w.String(m.app_id);
    w.String(m.exec_id);
    w.I32(m.shuffle_id);
    w.LongArray(m.map_ids);
    w.I32(static_cast<int32_t>(m.reduce_ids.size()));
    for (const std::vector<int32_t>& ids : m.reduce_ids) w.IntArray(ids);
    w.Bool(m.batch_fetch_enabled);
  });
}

std::string EncodeRemoveBlocks(const RemoveBlocks& m) {
  return EncodeBlockList(BlockTransferType::kRemoveBlocks, m.app_id, m.exec_id, m.block_ids);
}

std::string EncodeGetLocalDirsForExecutors(const GetLocalDirsForExecutors& m) {
  return Payload(BlockTransferType::kGetLocalDirsForExecutors, [&](WireWriter& w) {
    w.String(m.app_id);
    w.StringArray(m.exec_ids);
  });
}

std::string EncodeDiagnoseCorruption(const DiagnoseCorruption& m) {
  return Payload(BlockTransferType::kDiagnoseCorruption, [&](WireWriter& w) {
    w.String(m.app_id);
    w.String(m.exec_id);
    w.I32(m.shuffle_id);
    w.I64(m.map_id);
    w.I32(m.reduce_id);
    w.I64(m.checksum);
    w.String(m.algorithm);
  });
}

std::string EncodePushBlockStream(const PushBlockStream& m) {
  return Payload(BlockTransferType::kPushBlockStream, [&](WireWriter& w) {
    w.String(m.app_id);
    w.I32(m.app_attempt_id);
    w.I32(m.shuffle_id);
    w.I32(m.shuffle_merge_id);
    w.I32(m.map_index);
    w.I32(m.reduce_id);
    w.I32(m.index);
  });
}

namespace {

// FinalizeShuffleMerge and RemoveShuffleMerge: the same fields under two type ids.
std::string EncodeMergeId(BlockTransferType type, const std::string& app_id, int32_t app_attempt_id,
                          int32_t shuffle_id, int32_t shuffle_merge_id) {
  return Payload(type, [&](WireWriter& w) {
    w.String(app_id);
    w.I32(app_attempt_id);
    w.I32(shuffle_id);
    w.I32(shuffle_merge_id);
  });
}

}  // namespace

std::string EncodeFinalizeShuffleMerge(const FinalizeShuffleMerge& m) {
  return EncodeMergeId(BlockTransferType::kFinalizeShuffleMerge, m.app_id, m.app_attempt_id,
                       m.shuffle_id, m.shuffle_merge_id);
}

std::string EncodeRemoveShuffleMerge(const RemoveShuffleMerge& m) {
  return EncodeMergeId(BlockTransferType::kRemoveShuffleMerge, m.app_id, m.app_attempt_id,
                       m.shuffle_id, m.shuffle_merge_id);
}

std::string EncodeFetchShuffleBlockChunks(const FetchShuffleBlockChunks& m) {
  return Payload(BlockTransferType::kFetchShuffleBlockChunks, [&](WireWriter& w) {
    w.String(m.app_id);
    w.String(m.exec_id);
    w.I32(m.shuffle_id);
    w.I32(m.shuffle_merge_id);
    w.IntArray(m.reduce_ids);
    w.I32(static_cast<int32_t>(m.chunk_ids.size()));
    for (const std::vector<int32_t>& ids : m.chunk_ids) w.IntArray(ids);
  });
}

std::string EncodeBlockPushReturnCode(const BlockPushReturnCode& m) {
  return Payload(BlockTransferType::kBlockPushReturnCode, [&](WireWriter& w) {
    w.U8(static_cast<uint8_t>(m.code));
    w.String(m.failure_block_id);
  });
}

std::string EncodeMergeStatuses(const MergeStatuses& m) {
  return Payload(BlockTransferType::kMergeStatuses, [&](WireWriter& w) {
    w.I32(m.shuffle_id);
    w.I32(m.shuffle_merge_id);
    w.I32(static_cast<int32_t>(m.bitmaps.size()));
    for (const Bitmap& b : m.bitmaps) w.Bitmap(b);
    w.IntArray(m.reduce_ids);
    w.LongArray(m.sizes);
  });
}

std::string EncodeStreamHandle(int64_t stream_id, int32_t num_chunks) {
  return Payload(BlockTransferType::kStreamHandle, [&](WireWriter& w) {
    w.I64(stream_id);
    w.I32(num_chunks);
  });
}

std::string EncodeBlocksRemoved(int32_t num_removed) {
  return Payload(BlockTransferType::kBlocksRemoved, [&](WireWriter& w) { w.I32(num_removed); });
}

std::string EncodeLocalDirsForExecutors(const std::vector<std::string>& exec_ids,
                                        const std::vector<int32_t>& num_local_dirs,
                                        const std::vector<std::string>& all_local_dirs) {
  return Payload(BlockTransferType::kLocalDirsForExecutors, [&](WireWriter& w) {
    w.StringArray(exec_ids);
    w.IntArray(num_local_dirs);
    w.StringArray(all_local_dirs);
  });
}

std::string EncodeCorruptionCause(uint8_t cause) {
  return Payload(BlockTransferType::kCorruptionCause, [&](WireWriter& w) { w.U8(cause); });
}

absl::StatusOr<ShuffleReply> DecodeShuffleReply(absl::string_view body) {
  WireReader r(body);
  uint8_t type = 0;
  if (!r.U8(&type, "message type")) return r.Finish("shuffle reply");
  const std::string name = BlockTransferTypeName(type);
  switch (static_cast<BlockTransferType>(type)) {
    case BlockTransferType::kStreamHandle: {
      StreamHandle m;
      r.I64(&m.stream_id, "streamId");
      r.I32(&m.num_chunks, "numChunks");
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      return m;
    }
    case BlockTransferType::kBlocksRemoved: {
      BlocksRemoved m;
      r.I32(&m.num_removed, "numRemovedBlocks");
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      return m;
    }
    case BlockTransferType::kLocalDirsForExecutors: {
      LocalDirsForExecutors m;
      r.StringArray(&m.exec_ids, "execIds", kMaxLocalDirsExecutors);
      r.IntArray(&m.num_local_dirs, "numLocalDirsByExec");
      r.StringArray(&m.all_local_dirs, "allLocalDirs", kMaxLocalDirsExecutors * kMaxLocalDirs);
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      return m;
    }
    case BlockTransferType::kCorruptionCause: {
      CorruptionCause m;
      r.U8(&m.cause, "cause");
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      return m;
    }
    case BlockTransferType::kBlockPushReturnCode: {
      BlockPushReturnCode m;
      uint8_t code = 0;
      r.U8(&code, "returnCode");
      r.String(&m.failure_block_id, "failureBlockId");
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      if (code > static_cast<uint8_t>(PushReturnCode::kTooOldAttemptPush)) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": return code ", int{code}));
      }
      m.code = static_cast<PushReturnCode>(code);
      return m;
    }
    case BlockTransferType::kMergeStatuses: {
      MergeStatuses m;
      r.I32(&m.shuffle_id, "shuffleId");
      r.I32(&m.shuffle_merge_id, "shuffleMergeId");
      int32_t count = 0;
      // The smallest bitmap (an empty one) is 8 bytes.
      if (r.Count(&count, 8, "bitmaps")) m.bitmaps.resize(static_cast<size_t>(count));
      for (Bitmap& b : m.bitmaps) r.Bitmap(&b, "bitmaps", kMaxBitmapValues);
      r.IntArray(&m.reduce_ids, "reduceIds");
      r.LongArray(&m.sizes, "sizes");
      FERRY_RETURN_IF_ERROR(r.Finish(name));
      if (m.reduce_ids.size() != m.bitmaps.size() || m.sizes.size() != m.bitmaps.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed ", name, ": ", m.bitmaps.size(), " bitmaps, ",
                         m.reduce_ids.size(), " reduce ids and ", m.sizes.size(), " sizes"));
      }
      return m;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(name, " is not a shuffle service's reply"));
  }
}

absl::StatusOr<SaslMessage> DecodeSaslMessage(absl::string_view body) {
  WireReader r(body);
  uint8_t tag = 0;
  SaslMessage m;
  int32_t token_length = 0;
  r.U8(&tag, "SaslMessage tag");
  if (r.Finish("SaslMessage", false).ok() && tag != kSaslMessageTag) {
    return absl::InvalidArgumentError(absl::StrCat("SaslMessage: a body whose first byte is ", tag,
                                                   ", not the tag ", kSaslMessageTag));
  }
  r.String(&m.app_id, "SaslMessage appId");
  r.I32(&token_length, "SaslMessage tokenLen");
  FERRY_RETURN_IF_ERROR(r.Finish("SaslMessage", false));
  if (r.rest().size() > kMaxSaslTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("SaslMessage: a token of ", r.rest().size(),
                                                   " bytes; at most ", kMaxSaslTokenBytes,
                                                   " are taken"));
  }
  m.token = std::string(r.rest());
  return m;
}

std::string EncodeSaslMessage(const SaslMessage& m) {
  std::string out;
  WireWriter w(&out);
  w.U8(kSaslMessageTag);
  w.String(m.app_id);
  w.I32(static_cast<int32_t>(m.token.size()));
  out += m.token;
  return out;
}

absl::StatusOr<AuthMessage> DecodeAuthMessage(absl::string_view body) {
  WireReader r(body);
  uint8_t tag = 0;
  AuthMessage m;
  r.U8(&tag, "AuthMessage tag");
  if (r.Finish("AuthMessage", false).ok() && tag != kAuthMessageTag) {
    return absl::InvalidArgumentError(absl::StrCat("AuthMessage: a body whose first byte is ", tag,
                                                   ", not the tag ", kAuthMessageTag));
  }
  r.String(&m.app_id, "AuthMessage appId");
  r.String(&m.salt, "AuthMessage salt", kMaxAuthFieldBytes);
  r.String(&m.ciphertext, "AuthMessage ciphertext", kMaxAuthFieldBytes);
  FERRY_RETURN_IF_ERROR(r.Finish("AuthMessage"));
  return m;
}

std::string EncodeAuthMessage(const AuthMessage& m) {
  std::string out;
  WireWriter w(&out);
  w.U8(kAuthMessageTag);
  w.String(m.app_id);
  w.String(m.salt);
  w.String(m.ciphertext);
  return out;
}

}  // namespace ferry::spark
