// DiskReader against real files evicted from the page cache: what its workers move
// into a pipe or a buffer is the file's bytes, counted per disk; failing reads name the
// file and the disk and move its health.
#include "server/storage/disk_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/pipe.h"
#include "gtest/gtest.h"
#include "tests/testing/cold_file.h"
#include "tests/testing/run_fiber.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

std::shared_ptr<DataFile> Open(const std::string& path, const std::string& name, int flags) {
  auto file = std::make_shared<DataFile>();
  file->path = name;
  file->fd.Reset(::open(path.c_str(), flags | O_CLOEXEC));
  struct stat st;
  if (::fstat(file->fd.get(), &st) == 0) file->identity = {st.st_dev, st.st_ino};
  return file;
}

class DiskReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < (size_t{4} << 20); ++i) content_.push_back(static_cast<char>(i * 13));
    path_ = dir_.path() + "/data";
    UniqueFd out(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_EQ(::write(out.get(), content_.data(), content_.size()),
              static_cast<ssize_t>(content_.size()));
    file_ = Open(path_, "app/data", O_RDONLY);
    const absl::Status evicted = testing::Evict(file_->fd.get());
    if (absl::IsFailedPrecondition(evicted)) GTEST_SKIP() << evicted;
    ASSERT_TRUE(evicted.ok()) << evicted;
  }

  testing::TempDir dir_;
  std::string path_;
  std::string content_;
  std::shared_ptr<DataFile> file_;
};

TEST_F(DiskReaderTest, WorkersMoveEvictedBytesIntoAPipeAndABuffer) {
  DiskReader reader(DiskReader::Options{});
  absl::StatusOr<Pipe> pipe = Pipe::Create(1 << 20);
  ASSERT_TRUE(pipe.ok());
  std::string spliced(1 << 20, '\0');
  auto buffer = std::shared_ptr<char[]>(new char[1 << 20]);
  RunInFiber([&] {
    absl::StatusOr<size_t> moved =
        reader.SpliceToPipe(file_, 4096, 1 << 20, pipe->write_fd(), 2 << 20, Soon());
    ASSERT_TRUE(moved.ok()) << moved.status();
    ASSERT_EQ(*moved, size_t{1} << 20);
    absl::StatusOr<size_t> read = reader.Read(file_, 3 << 20, buffer, 1 << 20, 0, Soon());
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(*read, size_t{1} << 20);
    // At the end of the file: what is there.
    absl::StatusOr<size_t> tail = reader.Read(file_, content_.size() - 10, buffer, 100, 0, Soon());
    ASSERT_TRUE(tail.ok());
    EXPECT_EQ(*tail, 10u);
  });
  ASSERT_EQ(::read(pipe->read_fd(), spliced.data(), spliced.size()),
            static_cast<ssize_t>(spliced.size()));
  EXPECT_EQ(spliced, content_.substr(4096, 1 << 20));
  const auto stats = reader.Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_FALSE(stats[0].name.empty());
  EXPECT_EQ(stats[0].reads, 3u);
  EXPECT_EQ(stats[0].bytes, (uint64_t{2} << 20) + 10);
  EXPECT_EQ(stats[0].errors, 0u);
  EXPECT_TRUE(stats[0].healthy);
}

// Reads that fail (here: of a directory, on the same disk) name the file and the disk;
// enough of them in a row mark the disk unhealthy, and one success marks it healthy.
TEST_F(DiskReaderTest, FailingReadsMarkTheDiskUnhealthyUntilOneSucceeds) {
  DiskReader::Options options;
  options.unhealthy_after = 3;
  DiskReader reader(options);
  auto broken = Open(dir_.path(), "app/broken", O_RDONLY | O_DIRECTORY);
  ASSERT_EQ(broken->identity.device, file_->identity.device);
  auto buffer = std::shared_ptr<char[]>(new char[4096]);
  RunInFiber([&] {
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<size_t> read = reader.Read(broken, 0, buffer, 4096, 0, Soon());
      ASSERT_FALSE(read.ok());
      EXPECT_NE(read.status().message().find("app/broken"), std::string::npos) << read.status();
      EXPECT_NE(read.status().message().find("on disk"), std::string::npos) << read.status();
      EXPECT_EQ(reader.Stats()[0].healthy, i < 2) << i;
    }
    // The last failure, for the health answer: the file and the errno (EISDIR).
    const std::string last = reader.Stats()[0].last_error;
    EXPECT_NE(last.find("app/broken"), std::string::npos) << last;
    EXPECT_NE(last.find(std::strerror(EISDIR)), std::string::npos) << last;
    absl::StatusOr<size_t> good = reader.Read(file_, 0, buffer, 4096, 0, Soon());
    ASSERT_TRUE(good.ok()) << good.status();
  });
  const auto stats = reader.Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].errors, 3u);
  EXPECT_TRUE(stats[0].healthy);
}

// What a failing or vanished device answers is worth another attempt (or replica);
// other errors keep the code their errno maps to.
TEST(FileReadErrorTest, DeviceFailuresAreUnavailableAndNameWhatFailed) {
  for (int error : {EIO, ENXIO, ENODEV, ESTALE, ENOTCONN}) {
    const absl::Status s = FileReadError(error, "read app/x.data on disk loop0 (7:0)");
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("app/x.data on disk loop0"), std::string::npos) << s;
    EXPECT_NE(s.message().find(std::strerror(error)), std::string::npos) << s;
  }
  EXPECT_EQ(FileReadError(EISDIR, "read app/broken").code(),
            absl::ErrnoToStatus(EISDIR, "").code());
  EXPECT_EQ(FileReadError(EACCES, "read app/x.data").code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace ferry
