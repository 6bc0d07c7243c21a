#include "common/pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(PipeTest, GrantsTheAskedCapacity) {
  auto pipe = Pipe::Create(256 * 1024);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  EXPECT_EQ(pipe->capacity_bytes(), 256u * 1024);
  EXPECT_EQ(::fcntl(pipe->write_fd(), F_GETPIPE_SZ), 256 * 1024);
}

TEST(PipeTest, RoundsCapacityUpToPowerOfTwoPages) {
  auto pipe = Pipe::Create(100 * 1024);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  EXPECT_EQ(pipe->capacity_bytes(), 128u * 1024);
}

TEST(PipeTest, EndsAreCloseOnExec) {
  auto pipe = Pipe::Create(64 * 1024);
  ASSERT_TRUE(pipe.ok());
  EXPECT_TRUE(::fcntl(pipe->read_fd(), F_GETFD) & FD_CLOEXEC);
  EXPECT_TRUE(::fcntl(pipe->write_fd(), F_GETFD) & FD_CLOEXEC);
}

TEST(PipeTest, CountsBufferedBytes) {
  auto pipe = Pipe::Create(64 * 1024);
  ASSERT_TRUE(pipe.ok());
  EXPECT_EQ(pipe->BufferedBytes(), 0);
  ASSERT_EQ(::write(pipe->write_fd(), "abcde", 5), 5);
  EXPECT_EQ(pipe->BufferedBytes(), 5);
}

TEST(PipeTest, ExtraFlagsApply) {
  auto pipe = Pipe::Create(64 * 1024, O_NONBLOCK);
  ASSERT_TRUE(pipe.ok());
  char c;
  EXPECT_EQ(::read(pipe->read_fd(), &c, 1), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST(PipeTest, MaxCapacityMatchesProc) { EXPECT_GE(Pipe::MaxCapacityBytes(), 4096u); }

}  // namespace
}  // namespace ferry
