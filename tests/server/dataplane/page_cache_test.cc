#include "server/dataplane/page_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/testing/cold_file.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

TEST(PageCacheTest, CachedRangesReadAtOnceAndAMissStopsTheRead) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/f";
  std::string content(8 << 20, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + i / 4096);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_EQ(::write(fd.get(), content.data(), content.size()),
            static_cast<ssize_t>(content.size()));
  EXPECT_TRUE(LooksCached(fd.get(), 0, content.size()));
  std::string buf(content.size(), '\0');
  CachedRead read = PreadCached(fd.get(), buf.data(), buf.size(), 0);
  EXPECT_EQ(read.bytes, static_cast<ssize_t>(content.size()));
  EXPECT_FALSE(read.missed);
  // Past the end: what is there, and no miss.
  read = PreadCached(fd.get(), buf.data(), 100, content.size() - 10);
  EXPECT_EQ(read.bytes, 10);
  EXPECT_FALSE(read.missed);

  // The second half leaves the page cache. What comes back, and when, is the kernel's
  // choice: a read that misses starts its read-ahead, which may bring in any part of
  // the rest (the whole half, with a read-ahead window of 8 MiB) while the read goes on,
  // and a read of cached folios may return a part of one. So each read is checked for
  // what PreadCached promises whatever the kernel does: it never waits for the disk, the
  // bytes it returns are the file's, and it reports a miss exactly when it stops short.
  // That it does stop at a miss is seen on a read that starts at a page just evicted:
  // on a device that completes reads asynchronously (every real one) at least one of
  // three such reads finds the page not there yet.
  int stopped = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const absl::Status evicted = testing::Evict(fd.get(), 4 << 20, 4 << 20);
    if (absl::IsFailedPrecondition(evicted)) GTEST_SKIP() << evicted;
    ASSERT_TRUE(evicted.ok()) << evicted;
    read = PreadCached(fd.get(), buf.data(), 4 << 20, 4 << 20);
    ASSERT_GE(read.bytes, 0);
    EXPECT_EQ(read.missed, read.bytes < (4 << 20)) << read.bytes;
    EXPECT_EQ(buf.compare(0, static_cast<size_t>(read.bytes), content, 4 << 20,
                          static_cast<size_t>(read.bytes)),
              0);
    if (read.missed) ++stopped;
  }
  EXPECT_GT(stopped, 0) << "three reads of just-evicted pages all found them cached";
  // A read across both halves returns at least the cached half, at once.
  ASSERT_TRUE(testing::Evict(fd.get(), 4 << 20, 4 << 20).ok());
  read = PreadCached(fd.get(), buf.data(), buf.size(), 0);
  ASSERT_GE(read.bytes, 4 << 20);
  EXPECT_EQ(read.missed, read.bytes < static_cast<ssize_t>(content.size())) << read.bytes;
  EXPECT_EQ(
      buf.compare(0, static_cast<size_t>(read.bytes), content, 0, static_cast<size_t>(read.bytes)),
      0);
  EXPECT_TRUE(LooksCached(fd.get(), 0, 4 << 20));
}

}  // namespace
}  // namespace ferry
