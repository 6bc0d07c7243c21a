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
  ASSERT_EQ(
      ::ftruncate(block_.file->fd.get(), static_cast<off_t>(block_.offset + block_.length - 1)), 0);
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

TEST_F(SegmentTest, ADiagnosisBlamesTheDiskTheTransferOrNothing) {
  Checksum on_disk(ChecksumAlgorithm::kCrc32c);
  on_disk.Update(absl::string_view(content_).substr(block_.offset, block_.length));
  block_.has_checksum = true;
  block_.checksum_algorithm = ChecksumAlgorithm::kCrc32c;
  block_.checksum = on_disk.Value();
  const absl::Time later = absl::InfiniteFuture();
  absl::StatusOr<Diagnosis> none = DiagnoseSegment(block_, block_.checksum, "b", later);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->cause, CorruptionCause::kNone);
  EXPECT_EQ(none->disk_checksum, block_.checksum);
  absl::StatusOr<Diagnosis> transfer = DiagnoseSegment(block_, ~block_.checksum, "b", later);
  ASSERT_TRUE(transfer.ok());
  EXPECT_EQ(transfer->cause, CorruptionCause::kTransfer);
  // What was stored at write time no longer matches the bytes: the disk.
  StreamBlock changed = block_;
  changed.checksum = ~block_.checksum;
  absl::StatusOr<Diagnosis> disk = DiagnoseSegment(changed, changed.checksum, "b", later);
  ASSERT_TRUE(disk.ok());
  EXPECT_EQ(disk->cause, CorruptionCause::kDisk);
  EXPECT_EQ(disk->disk_checksum, block_.checksum);
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      DiagnoseSegment(block_, block_.checksum, "b", absl::Now() - absl::Seconds(1)).status()));
  // A file that ends before the block does: the disk, with no checksum to show.
  ASSERT_EQ(::ftruncate(block_.file->fd.get(), 1 << 20), 0);
  absl::StatusOr<Diagnosis> short_file = DiagnoseSegment(block_, block_.checksum, "b", later);
  ASSERT_TRUE(short_file.ok());
  EXPECT_EQ(short_file->cause, CorruptionCause::kDisk);
  EXPECT_FALSE(short_file->disk_checksum.has_value());
  EXPECT_NE(short_file->disk_error.find("ends before b"), std::string::npos)
      << short_file->disk_error;
}

}  // namespace
}  // namespace ferry
