#include "server/storage/segment.h"

#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

class SegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = dir_.path() + "/data";
    content_.resize(3 << 20);
    for (size_t i = 0; i < content_.size(); ++i) content_[i] = static_cast<char>(i * 31);
    UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_EQ(::write(out.get(), content_.data(), content_.size()),
              static_cast<ssize_t>(content_.size()));
    auto file = std::make_shared<DataFile>();
    file->path = "app/data";
    file->fd.Reset(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    block_.file = file;
    block_.offset = 5;
    block_.length = content_.size() - 10;
  }

  testing::TempDir dir_;
  std::string content_;
  StreamBlock block_;
  std::function<std::string()> name_ = [] { return std::string("block b"); };
};

TEST_F(SegmentTest, AShrunkFileNoLongerHoldsItsSegment) {
  EXPECT_TRUE(CheckSegmentHeld(block_, name_).ok());
  ASSERT_EQ(::ftruncate(block_.file->fd.get(), static_cast<off_t>(block_.offset + block_.length - 1)),
            0);
  const absl::Status shrunk = CheckSegmentHeld(block_, name_);
  EXPECT_TRUE(absl::IsDataLoss(shrunk)) << shrunk;
  EXPECT_NE(shrunk.message().find("block b: data file app/data is now"), absl::string_view::npos)
      << shrunk;
}

TEST_F(SegmentTest, TheChecksumOnDiskIsOfTheSegmentsBytes) {
  Checksum expected(ChecksumAlgorithm::kCrc32c);
  expected.Update(absl::string_view(content_).substr(block_.offset, block_.length));
  absl::StatusOr<uint32_t> got = ChecksumOnDisk(block_, "block b", ChecksumAlgorithm::kCrc32c);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, expected.Value());
  // A deadline already past stops the read before it starts.
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      ChecksumOnDisk(block_, "block b", ChecksumAlgorithm::kCrc32c, absl::Now() - absl::Seconds(1))
          .status()));
  ASSERT_EQ(::ftruncate(block_.file->fd.get(), 1 << 20), 0);
  EXPECT_TRUE(
      absl::IsDataLoss(ChecksumOnDisk(block_, "block b", ChecksumAlgorithm::kCrc32c).status()));
}

}  // namespace
}  // namespace ferry
