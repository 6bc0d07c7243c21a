// libFuzzer target: the data plane's frame decoders on arbitrary bytes. A decoder must
// never crash, and whatever it accepts must survive an encode/decode round trip with
// the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/frame_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto request = ferry::DecodeFetchRequest(bytes); request.ok()) {
    char again[ferry::kRequestBytes];
    ferry::EncodeFetchRequest(*request, again);
    auto decoded = ferry::DecodeFetchRequest(absl::string_view(again, sizeof(again)));
    if (!decoded.ok() || decoded->ticket != request->ticket ||
        decoded->first_block != request->first_block ||
        decoded->block_count != request->block_count ||
        decoded->first_block_offset != request->first_block_offset || request->block_count == 0) {
      std::abort();
    }
  }
  if (auto header = ferry::DecodeResponseHeader(bytes); header.ok()) {
    if (header->kind == ferry::FrameKind::kError &&
        (header->message_bytes > ferry::kMaxErrorMessageBytes || header->status == 0)) {
      std::abort();
    }
    char again[ferry::kResponseHeaderBytes];
    ferry::EncodeResponseHeader(*header, again);
    if (std::memcmp(again, data, ferry::kResponseHeaderBytes) != 0) std::abort();
  }
  return 0;
}
