#include "server/storage/dirty_memory.h"

#include "gtest/gtest.h"

namespace ferry {
namespace {

// 10 GiB available: with a 10% background threshold (1 GiB), writes are inline while
// dirty and writeback pages stay under 512 MiB.
constexpr char kMeminfo[] =
    "MemTotal:       25165824 kB\n"
    "MemAvailable:   10485760 kB\n"
    "Dirty:            %DIRTY% kB\n"
    "Writeback:        %WB% kB\n";

std::string Meminfo(int dirty_kib, int writeback_kib) {
  std::string text = kMeminfo;
  text.replace(text.find("%DIRTY%"), 7, std::to_string(dirty_kib));
  text.replace(text.find("%WB%"), 4, std::to_string(writeback_kib));
  return text;
}

TEST(DirtyMemoryTest, LowBelowHalfTheBackgroundThreshold) {
  EXPECT_TRUE(*DirtyMemoryLow(Meminfo(1024, 0), 0, 10));
  EXPECT_TRUE(*DirtyMemoryLow(Meminfo(400 << 10, 100 << 10), 0, 10));
  // Dirty and writeback pages count together.
  EXPECT_FALSE(*DirtyMemoryLow(Meminfo(400 << 10, 200 << 10), 0, 10));
  EXPECT_FALSE(*DirtyMemoryLow(Meminfo(600 << 10, 0), 0, 10));
}

TEST(DirtyMemoryTest, BackgroundBytesWinOverTheRatio) {
  // 64 MiB set: inline under 32 MiB, whatever the ratio says.
  EXPECT_TRUE(*DirtyMemoryLow(Meminfo(16 << 10, 0), 64 << 20, 10));
  EXPECT_FALSE(*DirtyMemoryLow(Meminfo(40 << 10, 0), 64 << 20, 10));
  // No threshold at all: never inline.
  EXPECT_FALSE(*DirtyMemoryLow(Meminfo(0, 0), 0, 0));
}

TEST(DirtyMemoryTest, AMissingOrBadLineIsAnError) {
  EXPECT_FALSE(DirtyMemoryLow("MemAvailable: 1 kB\nDirty: 1 kB\n", 0, 10).ok());
  EXPECT_FALSE(DirtyMemoryLow("MemAvailable: 1 kB\nDirty: x kB\nWriteback: 0 kB\n", 0, 10).ok());
  EXPECT_FALSE(DirtyMemoryLow("", 0, 10).ok());
}

TEST(DirtyMemoryTest, ThisMachineAnswers) {
  // Whichever way: /proc is read and understood.
  EXPECT_TRUE(DirtyMemoryLow().ok()) << DirtyMemoryLow().status();
}

}  // namespace
}  // namespace ferry
