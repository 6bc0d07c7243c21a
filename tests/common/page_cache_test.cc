#include "common/page_cache.h"

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
  // Large enough that its halves are separate folios: the kernel drops whole ones only.
  const std::string content(8 << 20, 'z');
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

  // The second half leaves the page cache.
  const absl::Status evicted = testing::Evict(fd.get(), 4 << 20, 4 << 20);
  if (absl::IsFailedPrecondition(evicted)) GTEST_SKIP() << evicted;
  ASSERT_TRUE(evicted.ok()) << evicted;
  // The read stops at the first page missing (and, like any read that misses, starts
  // the kernel's read-ahead there).
  read = PreadCached(fd.get(), buf.data(), buf.size(), 0);
  EXPECT_EQ(read.bytes, 4 << 20);
  EXPECT_TRUE(read.missed);
  EXPECT_TRUE(LooksCached(fd.get(), 0, 4 << 20));
  EXPECT_FALSE(LooksCached(fd.get(), 0, content.size()));
}

}  // namespace
}  // namespace ferry
