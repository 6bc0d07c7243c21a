#include "common/checksum.h"

#include <isa-l/crc.h>
#include <zlib.h>

#include <algorithm>
#include <climits>

#include "common/check.h"

namespace ferry {

absl::string_view ChecksumAlgorithmName(ChecksumAlgorithm algorithm) {
  switch (algorithm) {
    case ChecksumAlgorithm::kNone:
      return "NONE";
    case ChecksumAlgorithm::kAdler32:
      return "ADLER32";
    case ChecksumAlgorithm::kCrc32:
      return "CRC32";
    case ChecksumAlgorithm::kCrc32c:
      return "CRC32C";
  }
  return "UNKNOWN";
}

std::optional<ChecksumAlgorithm> ParseChecksumAlgorithm(absl::string_view name) {
  for (ChecksumAlgorithm a :
       {ChecksumAlgorithm::kAdler32, ChecksumAlgorithm::kCrc32, ChecksumAlgorithm::kCrc32c}) {
    if (name == ChecksumAlgorithmName(a)) return a;
  }
  return std::nullopt;
}

Checksum::Checksum(ChecksumAlgorithm algorithm)
    : algorithm_(algorithm), value_(algorithm == ChecksumAlgorithm::kAdler32 ? 1 : 0) {}

void Checksum::Update(absl::string_view data) {
  // zlib and ISA-L take lengths as uInt / int: feed large inputs in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  while (!data.empty()) {
    const size_t n = std::min(data.size(), kPiece);
    const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
    switch (algorithm_) {
      case ChecksumAlgorithm::kNone:
        break;
      case ChecksumAlgorithm::kAdler32:
        value_ = static_cast<uint32_t>(::adler32(value_, bytes, static_cast<uInt>(n)));
        break;
      case ChecksumAlgorithm::kCrc32:
        value_ = static_cast<uint32_t>(::crc32(value_, bytes, static_cast<uInt>(n)));
        break;
      case ChecksumAlgorithm::kCrc32c:
        // ISA-L's crc32_iscsi runs the register without the final inversion, so the
        // standard CRC32C is ~crc32_iscsi(data, ~previous).
        value_ = ~::crc32_iscsi(const_cast<unsigned char*>(bytes), static_cast<int>(n), ~value_);
        break;
    }
    data.remove_prefix(n);
  }
}

uint32_t Checksum::Of(ChecksumAlgorithm algorithm, absl::string_view data) {
  Checksum c(algorithm);
  c.Update(data);
  return c.Value();
}

}  // namespace ferry
