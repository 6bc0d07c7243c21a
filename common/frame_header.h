// The data plane's wire format (docs/protocol.md is the byte-for-byte spec).
//
// Client -> server: 40-byte FETCH requests, any number, pipelined on one connection.
// Server -> client: for each requested block a 40-byte BLOCK header followed by exactly
// `length` payload bytes; on failure one ERROR header followed by `message_bytes` of
// UTF-8 text, after which the server closes the connection.
//
// All integers are little-endian. Decoders validate every field before a caller can
// use it; nothing here allocates or does I/O.
#ifndef FERRY_COMMON_FRAME_HEADER_H_
#define FERRY_COMMON_FRAME_HEADER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry {

inline constexpr uint32_t kRequestMagic = 0x51595246;   // "FRYQ" on the wire
inline constexpr uint32_t kResponseMagic = 0x52595246;  // "FRYR" on the wire
inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kRequestBytes = 40;
inline constexpr size_t kResponseHeaderBytes = 40;
inline constexpr size_t kTicketBytes = 16;
// Longest ERROR message a server sends and a client accepts.
inline constexpr uint32_t kMaxErrorMessageBytes = 4096;

using Ticket = std::array<uint8_t, kTicketBytes>;

inline constexpr uint8_t kRequestFetch = 1;

// Asks for blocks [first_block, first_block + block_count) of the ticket's stream, the
// first one starting `first_block_offset` bytes in (so a retry can resume).
struct FetchRequest {
  Ticket ticket{};
  uint32_t first_block = 0;
  uint32_t block_count = 0;
  uint64_t first_block_offset = 0;
};

enum class FrameKind : uint8_t { kBlock = 1, kError = 2 };

inline constexpr uint8_t kFlagHasChecksum = 1;

struct ResponseHeader {
  FrameKind kind = FrameKind::kBlock;
  // kError: an absl::StatusCode (never OK). kBlock: 0.
  uint16_t status = 0;
  uint32_t block_index = 0;
  // kError: bytes of message that follow.
  uint32_t message_bytes = 0;
  // kBlock: where in the block the payload starts, and how many bytes follow.
  uint64_t offset = 0;
  uint64_t length = 0;
  // kBlock with kFlagHasChecksum: the stored checksum of the whole block (a block of
  // one partition); the algorithm is a ferry::ChecksumAlgorithm value.
  uint32_t checksum = 0;
  uint8_t checksum_algorithm = 0;
  uint8_t flags = 0;
};

void EncodeFetchRequest(const FetchRequest& request, char (&out)[kRequestBytes]);
// INVALID_ARGUMENT for a wrong size, magic, version, type, reserved bits or a zero
// block count; the message says which.
absl::StatusOr<FetchRequest> DecodeFetchRequest(absl::string_view bytes);

void EncodeResponseHeader(const ResponseHeader& header, char (&out)[kResponseHeaderBytes]);
// INVALID_ARGUMENT (a protocol violation by the server) for a wrong size, magic,
// version, kind, status or reserved bits, or an error message over the limit.
absl::StatusOr<ResponseHeader> DecodeResponseHeader(absl::string_view bytes);

// An ERROR header for `status` (not OK) about `block_index`, followed by its message
// (truncated to kMaxErrorMessageBytes): ready to send.
std::string EncodeErrorFrame(const absl::Status& status, uint32_t block_index);

}  // namespace ferry

#endif  // FERRY_COMMON_FRAME_HEADER_H_
