// ShuffleWriter on a full disk: a tiny tmpfs mounted in this test's own mount namespace.
// Wherever space runs out (a data write, the index, the checksum file), the writer
// returns a clear error naming the file and leaves nothing that a reader could take for
// a whole map output; whatever it did publish is whole.
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shuffle_files.h"
#include "common/shuffle_writer.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

constexpr size_t kFilesystemBytes = 64 << 10;
constexpr int kPartitions = 4;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
  }
  return names;
}

class ShuffleWriterEnospcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A private mount namespace: the tmpfs is seen by this process only and goes away
    // with it. Needs CAP_SYS_ADMIN (root, as on the CI machines).
    if (::unshare(CLONE_NEWNS) != 0) {
      GTEST_SKIP() << "no mount namespace for a tiny tmpfs: " << std::strerror(errno);
    }
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0)
        << std::strerror(errno);
    dir_ = root_.path() + "/tiny";
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
    const std::string options = absl::StrCat("size=", kFilesystemBytes);
    ASSERT_EQ(::mount("ferry-enospc", dir_.c_str(), "tmpfs", 0, options.c_str()), 0)
        << std::strerror(errno);
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }

  testing::TempDir root_;
  std::string dir_;
  bool mounted_ = false;
};

// The bytes of partition r of an output of `total` bytes.
std::string Partition(int r, size_t total) {
  return std::string(total / kPartitions, static_cast<char>('a' + r));
}

TEST_F(ShuffleWriterEnospcTest, EveryPointOfRunningOutIsAnErrorOrAWholeOutput) {
  int published = 0;
  int failed_writing = 0;
  int failed_committing = 0;
  // From outputs that fit with room to spare to ones that cannot: space runs out in a
  // data write, or at commit while the index or the checksum file is written.
  for (size_t total = 40 << 10; total <= (72 << 10); total += 2 << 10) {
    SCOPED_TRACE(absl::StrCat(total, " data bytes"));
    absl::Status status;
    bool wrote_all = false;
    {
      auto w = ShuffleWriter::Create(dir_, 0, 1);
      ASSERT_TRUE(w.ok()) << w.status();
      for (int r = 0; r < kPartitions && status.ok(); ++r)
        status = w->Write(r, Partition(r, total));
      wrote_all = status.ok();
      if (status.ok()) status = w->Commit(kPartitions);
    }
    auto index = MapOutputIndex::Load(dir_, 0, 1);
    if (status.ok()) {
      ++published;
      ASSERT_TRUE(index.ok()) << index.status();
      EXPECT_EQ(index->data_bytes(), total);
      EXPECT_EQ(index->RangeLength(3, 4), total / kPartitions);
      EXPECT_EQ(index->checksums()[2],
                Checksum::Of(ChecksumAlgorithm::kCrc32c, Partition(2, total)));
    } else {
      (wrote_all ? failed_committing : failed_writing)++;
      EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      EXPECT_NE(status.message().find(dir_ + "/"), std::string::npos)
          << "the error names the file: " << status;
      EXPECT_EQ(index.status().code(), absl::StatusCode::kNotFound) << index.status();
      EXPECT_EQ(ListDir(dir_), std::vector<std::string>{}) << "temporaries left behind";
    }
    // The next size starts from an empty file system.
    for (const std::string& name : ListDir(dir_)) {
      ASSERT_EQ(::unlink((dir_ + "/" + name).c_str()), 0) << name;
    }
  }
  EXPECT_GT(published, 0);
  EXPECT_GT(failed_writing, 0);
  EXPECT_GT(failed_committing, 0) << "no size ran out of space in the index or checksum";
}

}  // namespace
}  // namespace ferry
