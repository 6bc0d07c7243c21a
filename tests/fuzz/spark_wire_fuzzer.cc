// libFuzzer target: Spark's frame, shuffle-RPC, reply, bitmap and SaslMessage decoders
// on arbitrary bytes. A decoder must never crash or read past its input, and a message it accepts
// must encode back to the very bytes it came from (Spark's encoding has one form per
// message; a SaslMessage, whose tokenLen is not read, back to the same fields).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "common/spark/wire.h"

namespace {

using namespace ferry::spark;  // NOLINT: a fuzz target's only namespace

std::string Reencode(const ShuffleRpc& rpc) {
  if (auto* m = std::get_if<RegisterExecutor>(&rpc)) return EncodeRegisterExecutor(*m);
  if (auto* m = std::get_if<OpenBlocks>(&rpc)) return EncodeOpenBlocks(*m);
  if (auto* m = std::get_if<FetchShuffleBlocks>(&rpc)) return EncodeFetchShuffleBlocks(*m);
  if (auto* m = std::get_if<RemoveBlocks>(&rpc)) return EncodeRemoveBlocks(*m);
  if (auto* m = std::get_if<GetLocalDirsForExecutors>(&rpc)) {
    return EncodeGetLocalDirsForExecutors(*m);
  }
  if (auto* m = std::get_if<DiagnoseCorruption>(&rpc)) return EncodeDiagnoseCorruption(*m);
  if (auto* m = std::get_if<FinalizeShuffleMerge>(&rpc)) return EncodeFinalizeShuffleMerge(*m);
  if (auto* m = std::get_if<RemoveShuffleMerge>(&rpc)) return EncodeRemoveShuffleMerge(*m);
  if (auto* m = std::get_if<FetchShuffleBlockChunks>(&rpc)) {
    return EncodeFetchShuffleBlockChunks(*m);
  }
  return "";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  if (auto rpc = DecodeShuffleRpc(bytes);
      rpc.ok() && !std::holds_alternative<UnsupportedRpc>(*rpc)) {
    if (Reencode(*rpc) != bytes) std::abort();
  }
  // A SaslMessage's tokenLen is not read (the token is the rest of the body, as in Spark),
  // so only what was decoded must survive a round trip.
  if (auto sasl = DecodeSaslMessage(bytes); sasl.ok()) {
    auto again = DecodeSaslMessage(EncodeSaslMessage(*sasl));
    if (!again.ok() || again->app_id != sasl->app_id || again->token != sasl->token) std::abort();
  }
  if (auto auth = DecodeAuthMessage(bytes); auth.ok()) {
    if (EncodeAuthMessage(*auth) != bytes) std::abort();
  }
  if (auto push = DecodePushBlockStream(bytes); push.ok()) {
    if (EncodePushBlockStream(*push) != bytes) std::abort();
  }
  // Replies and bitmaps a client reads: accepted or refused, never a crash or an
  // over-read; a bitmap accepted holds no more than its bound.
  (void)DecodeShuffleReply(bytes);
  (void)DecodeServerFrame(bytes);
  absl::string_view rest = bytes;
  if (auto bitmap = Bitmap::Read(&rest, 1 << 16); bitmap.ok()) {
    if (bitmap->Cardinality() > (1 << 16) || rest.size() >= bytes.size()) std::abort();
  }
  if (size >= kFrameLengthBytes) (void)DecodeFrameLength(bytes.substr(0, kFrameLengthBytes));
  if (auto frame = DecodeClientFrame(bytes); frame.ok()) {
    if (auto* m = std::get_if<ChunkFetchRequest>(&*frame)) {
      if (EncodeChunkFetchRequest(*m).substr(kFrameLengthBytes) != bytes) std::abort();
    }
    if (auto* m = std::get_if<StreamRequest>(&*frame)) {
      if (EncodeStreamRequest(m->stream_id).substr(kFrameLengthBytes) != bytes) std::abort();
    }
    if (auto* m = std::get_if<UploadStream>(&*frame)) {
      if (EncodeUploadStreamHeader(m->request_id, m->meta, m->body_bytes)
              .substr(kFrameLengthBytes) != bytes) {
        std::abort();
      }
    }
    if (auto* m = std::get_if<MergedBlockMetaRequest>(&*frame)) {
      if (EncodeMergedBlockMetaRequest(*m).substr(kFrameLengthBytes) != bytes) std::abort();
    }
  }
  return 0;
}
