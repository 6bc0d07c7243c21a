#include "common/checksum.h"

#include "gtest/gtest.h"

namespace ferry {
namespace {

// Check values for "123456789" from the CRC catalogue and RFC 1950.
TEST(ChecksumTest, KnownVectors) {
  EXPECT_EQ(Checksum::Of(ChecksumAlgorithm::kCrc32c, "123456789"), 0xE3069283u);
  EXPECT_EQ(Checksum::Of(ChecksumAlgorithm::kCrc32, "123456789"), 0xCBF43926u);
  EXPECT_EQ(Checksum::Of(ChecksumAlgorithm::kAdler32, "123456789"), 0x091E01DEu);
}

TEST(ChecksumTest, EmptyInputIsTheInitialValue) {
  EXPECT_EQ(Checksum::Of(ChecksumAlgorithm::kAdler32, ""), 1u);
  EXPECT_EQ(Checksum::Of(ChecksumAlgorithm::kCrc32, ""), 0u);
  EXPECT_EQ(Checksum::Of(ChecksumAlgorithm::kCrc32c, ""), 0u);
}

TEST(ChecksumTest, IncrementalEqualsOneShot) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 13);
  for (auto algorithm :
       {ChecksumAlgorithm::kAdler32, ChecksumAlgorithm::kCrc32, ChecksumAlgorithm::kCrc32c}) {
    Checksum c(algorithm);
    absl::string_view rest = data;
    for (size_t step = 1; !rest.empty(); step = step * 3 + 1) {
      const size_t n = std::min(step, rest.size());
      c.Update(rest.substr(0, n));
      rest.remove_prefix(n);
    }
    EXPECT_EQ(c.Value(), Checksum::Of(algorithm, data)) << ChecksumAlgorithmName(algorithm);
  }
}

TEST(ChecksumTest, NamesRoundTrip) {
  for (auto algorithm :
       {ChecksumAlgorithm::kAdler32, ChecksumAlgorithm::kCrc32, ChecksumAlgorithm::kCrc32c}) {
    EXPECT_EQ(ParseChecksumAlgorithm(ChecksumAlgorithmName(algorithm)), algorithm);
  }
  EXPECT_FALSE(ParseChecksumAlgorithm("MD5").has_value());
  EXPECT_FALSE(ParseChecksumAlgorithm("NONE").has_value());
}

}  // namespace
}  // namespace ferry
