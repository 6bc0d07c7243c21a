#include "common/frame_header.h"

#include <endian.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry {

namespace {

void Put8(char* p, uint8_t v) { std::memcpy(p, &v, 1); }
void Put16(char* p, uint16_t v) {
  v = htole16(v);
  std::memcpy(p, &v, 2);
}
void Put32(char* p, uint32_t v) {
  v = htole32(v);
  std::memcpy(p, &v, 4);
}
void Put64(char* p, uint64_t v) {
  v = htole64(v);
  std::memcpy(p, &v, 8);
}
uint8_t Get8(const char* p) { return static_cast<uint8_t>(*p); }
uint16_t Get16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return le16toh(v);
}
uint32_t Get32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}
uint64_t Get64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return le64toh(v);
}

}  // namespace

void EncodeFetchRequest(const FetchRequest& request, char (&out)[kRequestBytes]) {
  char* p = out;
  Put32(p + 0, kRequestMagic);
  Put8(p + 4, kProtocolVersion);
  Put8(p + 5, kRequestFetch);
  Put16(p + 6, 0);
  std::memcpy(p + 8, request.ticket.data(), kTicketBytes);
  Put32(p + 24, request.first_block);
  Put32(p + 28, request.block_count);
  Put64(p + 32, request.first_block_offset);
}

absl::StatusOr<FetchRequest> DecodeFetchRequest(absl::string_view bytes) {
  if (bytes.size() != kRequestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request frame is ", bytes.size(), " bytes, not ", kRequestBytes));
  }
  const char* p = bytes.data();
  if (Get32(p) != kRequestMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad request magic 0x%08x (expected 0x%08x)", Get32(p), kRequestMagic));
  }
  if (Get8(p + 4) != kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported protocol version ", Get8(p + 4),
                                                   " (this server speaks ", kProtocolVersion, ")"));
  }
  if (Get8(p + 5) != kRequestFetch) {
    return absl::InvalidArgumentError(absl::StrCat("unknown request type ", Get8(p + 5)));
  }
  if (Get16(p + 6) != 0) return absl::InvalidArgumentError("reserved request bits are set");
  FetchRequest request;
  std::memcpy(request.ticket.data(), p + 8, kTicketBytes);
  request.first_block = Get32(p + 24);
  request.block_count = Get32(p + 28);
  request.first_block_offset = Get64(p + 32);
  if (request.block_count == 0) {
    return absl::InvalidArgumentError("request for zero blocks");
  }
  return request;
}

void EncodeResponseHeader(const ResponseHeader& header, char (&out)[kResponseHeaderBytes]) {
  char* p = out;
  Put32(p + 0, kResponseMagic);
  Put8(p + 4, kProtocolVersion);
  Put8(p + 5, static_cast<uint8_t>(header.kind));
  Put16(p + 6, header.status);
  Put32(p + 8, header.block_index);
  Put32(p + 12, header.message_bytes);
  Put64(p + 16, header.offset);
  Put64(p + 24, header.length);
  Put32(p + 32, header.checksum);
  Put8(p + 36, header.checksum_algorithm);
  Put8(p + 37, header.flags);
  Put16(p + 38, 0);
}

absl::StatusOr<ResponseHeader> DecodeResponseHeader(absl::string_view bytes) {
  if (bytes.size() != kResponseHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("response header is ", bytes.size(), " bytes, not ", kResponseHeaderBytes));
  }
  const char* p = bytes.data();
  if (Get32(p) != kResponseMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad response magic 0x%08x (expected 0x%08x)", Get32(p), kResponseMagic));
  }
  if (Get8(p + 4) != kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported response version ", Get8(p + 4)));
  }
  ResponseHeader h;
  const uint8_t kind = Get8(p + 5);
  if (kind != static_cast<uint8_t>(FrameKind::kBlock) &&
      kind != static_cast<uint8_t>(FrameKind::kError)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown response kind ", kind));
  }
  h.kind = static_cast<FrameKind>(kind);
  h.status = Get16(p + 6);
  h.block_index = Get32(p + 8);
  h.message_bytes = Get32(p + 12);
  h.offset = Get64(p + 16);
  h.length = Get64(p + 24);
  h.checksum = Get32(p + 32);
  h.checksum_algorithm = Get8(p + 36);
  h.flags = Get8(p + 37);
  if (Get16(p + 38) != 0 || (h.flags & ~kFlagHasChecksum) != 0) {
    return absl::InvalidArgumentError("reserved response bits are set");
  }
  if (h.kind == FrameKind::kError) {
    if (h.status == 0 || h.status > static_cast<uint16_t>(absl::StatusCode::kUnauthenticated)) {
      return absl::InvalidArgumentError(absl::StrCat("error frame with status ", h.status));
    }
    if (h.message_bytes > kMaxErrorMessageBytes) {
      return absl::InvalidArgumentError(absl::StrCat("error message of ", h.message_bytes,
                                                     " bytes exceeds ", kMaxErrorMessageBytes));
    }
  } else if (h.status != 0 || h.message_bytes != 0) {
    return absl::InvalidArgumentError("block frame with a status or message");
  }
  return h;
}

std::string EncodeErrorFrame(const absl::Status& status, uint32_t block_index) {
  absl::string_view message = status.message();
  if (message.size() > kMaxErrorMessageBytes) message = message.substr(0, kMaxErrorMessageBytes);
  ResponseHeader h;
  h.kind = FrameKind::kError;
  h.status = static_cast<uint16_t>(status.ok() ? absl::StatusCode::kInternal : status.code());
  h.block_index = block_index;
  h.message_bytes = static_cast<uint32_t>(message.size());
  char header[kResponseHeaderBytes];
  EncodeResponseHeader(h, header);
  std::string frame(header, kResponseHeaderBytes);
  frame.append(message.data(), message.size());
  return frame;
}

}  // namespace ferry
