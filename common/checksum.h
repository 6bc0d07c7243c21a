// Block checksums as shuffle writers store them: ADLER32 and CRC32 as Spark computes
// them (java.util.zip, here through zlib), and CRC32C (Castagnoli, through ISA-L),
// which Ferry's own writer uses.
//
// Each algorithm is a running 32-bit value, extended chunk by chunk, so a receiver
// verifies a block as its bytes arrive. Stored checksum files hold the value widened
// to a big-endian int64, as Spark writes them.
#ifndef FERRY_COMMON_CHECKSUM_H_
#define FERRY_COMMON_CHECKSUM_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace ferry {

enum class ChecksumAlgorithm : uint8_t {
  kNone = 0,
  kAdler32 = 1,
  kCrc32 = 2,
  kCrc32c = 3,
};

// "ADLER32", "CRC32", "CRC32C" (Spark's file suffixes); "NONE" for kNone.
absl::string_view ChecksumAlgorithmName(ChecksumAlgorithm algorithm);
// The inverse of ChecksumAlgorithmName for the three real algorithms.
std::optional<ChecksumAlgorithm> ParseChecksumAlgorithm(absl::string_view name);

// A running checksum. Value() of an empty input is the algorithm's initial value
// (1 for ADLER32, 0 for CRC32 and CRC32C), as Spark stores it for an empty partition.
class Checksum {
 public:
  explicit Checksum(ChecksumAlgorithm algorithm);
  void Update(absl::string_view data);
  uint32_t Value() const { return value_; }
  ChecksumAlgorithm algorithm() const { return algorithm_; }

  // The checksum of `data` in one call.
  static uint32_t Of(ChecksumAlgorithm algorithm, absl::string_view data);

 private:
  ChecksumAlgorithm algorithm_;
  uint32_t value_;
};

}  // namespace ferry

#endif  // FERRY_COMMON_CHECKSUM_H_
