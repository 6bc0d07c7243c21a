// Fiber I/O ops against real descriptors: results, errors, deadlines, cancellation.
#include "common/io/ops.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "common/pipe.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;
using ::ferry::testing::SocketPair;

TEST(OpsTest, NopCompletesWithZero) {
  RunInFiber([] { EXPECT_EQ(Nop(), 0); });
}

TEST(OpsTest, ReadAndWriteAtOffsets) {
  UniqueFd file(::memfd_create("ops_test", MFD_CLOEXEC));
  ASSERT_TRUE(file.valid());
  RunInFiber([&] {
    EXPECT_EQ(WriteAll(file.get(), "hello world", 11, 0), 11);
    char buf[5];
    EXPECT_EQ(ReadFull(file.get(), buf, 5, 6), 5);
    EXPECT_EQ(std::string(buf, 5), "world");
    // Past the end: end of input is 0 bytes.
    EXPECT_EQ(Read(file.get(), buf, 5, 11), 0);
  });
}

TEST(OpsTest, SendAndRecvOverASocketPair) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    EXPECT_EQ(SendAll(a.get(), "ping", 4), 4);
    char buf[4];
    EXPECT_EQ(Recv(b.get(), buf, 4), 4);
    EXPECT_EQ(std::string(buf, 4), "ping");
  });
}

TEST(OpsTest, AsyncOpsOverlap) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    char buf[3] = {};
    IoOp recv_op;
    IoOp send_op;
    // The recv is posted first and can only finish after the send that follows it.
    PrepRecv(recv_op, b.get(), buf, sizeof(buf), MSG_WAITALL);
    PrepSend(send_op, a.get(), "abc", 3, 0);
    EXPECT_EQ(send_op.Wait(), 3);
    EXPECT_EQ(recv_op.Wait(), 3);
    EXPECT_EQ(std::string(buf, 3), "abc");
  });
}

TEST(OpsTest, ClosedDescriptorGivesEbadf) {
  RunInFiber([] {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    ::close(fds[0]);
    ::close(fds[1]);
    char c;
    EXPECT_EQ(Read(fds[0], &c, 1), -EBADF);
  });
}

TEST(OpsTest, RefusedConnectGivesEconnrefused) {
  uint16_t port = 0;
  {
    // Bind and close a listener so the port is (very likely) unused.
    UniqueFd listener = ferry::testing::ListenLoopback(&port);
  }
  RunInFiber([port] {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr = ferry::testing::LoopbackAddress(port);
    EXPECT_EQ(Connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), -ECONNREFUSED);
  });
}

TEST(OpsTest, AcceptAndConnectOnLoopback) {
  uint16_t port = 0;
  UniqueFd listener = ferry::testing::ListenLoopback(&port);
  RunInFiber([&] {
    FiberScheduler::Current()
        ->Spawn([&] {
          UniqueFd conn(Accept(listener.get()));
          ASSERT_TRUE(conn.valid());
          EXPECT_TRUE(::fcntl(conn.get(), F_GETFD) & FD_CLOEXEC);
          EXPECT_EQ(SendAll(conn.get(), "hi", 2), 2);
        })
        .IgnoreError();
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr = ferry::testing::LoopbackAddress(port);
    ASSERT_EQ(Connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    char buf[2];
    EXPECT_EQ(Recv(fd.get(), buf, 2, MSG_WAITALL), 2);
  });
}

TEST(OpsTest, DeadlineFiresOnAnIdleRecv) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    char buf[8];
    const absl::Time start = absl::Now();
    EXPECT_EQ(Recv(a.get(), buf, sizeof(buf), 0, absl::Now() + absl::Milliseconds(20)), -ETIMEDOUT);
    const absl::Duration waited = absl::Now() - start;
    EXPECT_GE(waited, absl::Milliseconds(15));
    EXPECT_LT(waited, absl::Seconds(5));
  });
}

TEST(OpsTest, PastDeadlineTimesOutAtOnce) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    char buf[8];
    EXPECT_EQ(Recv(a.get(), buf, sizeof(buf), 0, absl::Now() - absl::Seconds(1)), -ETIMEDOUT);
  });
}

TEST(OpsTest, DeadlineDoesNotFireWhenTheOpCompletesFirst) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    ASSERT_EQ(SendAll(b.get(), "x", 1), 1);
    char buf[8];
    EXPECT_EQ(Recv(a.get(), buf, sizeof(buf), 0, absl::Now() + absl::Seconds(10)), 1);
  });
}

TEST(OpsTest, CancelWakesAParkedOp) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    char buf[8];
    IoOp op;
    PrepRecv(op, a.get(), buf, sizeof(buf), 0);
    FiberScheduler::Current()->Yield();  // let the recv reach the kernel and park
    op.Cancel();
    EXPECT_EQ(op.Wait(), -ECANCELED);
  });
}

TEST(OpsTest, CancelAfterCompletionKeepsTheResult) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    ASSERT_EQ(SendAll(b.get(), "y", 1), 1);
    char buf[8];
    IoOp op;
    PrepRecv(op, a.get(), buf, sizeof(buf), 0);
    EXPECT_EQ(op.Wait(), 1);
    op.Cancel();  // no longer in flight: nothing to do
    EXPECT_FALSE(op.in_flight());
  });
}

TEST(OpsTest, SleepWaitsAtLeastItsDuration) {
  RunInFiber([] {
    const absl::Time start = absl::Now();
    EXPECT_EQ(Sleep(absl::Milliseconds(20)), 0);
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(19));
  });
}

TEST(OpsTest, PollReportsWritable) {
  auto [a, b] = SocketPair();
  RunInFiber([&] {
    const int events = Poll(a.get(), POLLOUT, absl::Now() + absl::Seconds(5));
    ASSERT_GT(events, 0);
    EXPECT_TRUE(events & POLLOUT);
  });
}

TEST(OpsTest, SendToAClosedPeerGivesEpipe) {
  auto [a, b] = SocketPair();
  b.Reset();
  RunInFiber([&] { EXPECT_EQ(Send(a.get(), "z", 1, MSG_NOSIGNAL), -EPIPE); });
}

TEST(OpsTest, SpliceMovesFileBytesThroughAPipe) {
  UniqueFd file(::memfd_create("splice_src", MFD_CLOEXEC));
  std::string data(200 * 1024, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  ASSERT_EQ(::pwrite(file.get(), data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  auto pipe = Pipe::Create(64 * 1024);
  ASSERT_TRUE(pipe.ok());
  auto [a, b] = SocketPair();
  std::string received(data.size(), '\0');
  RunInFiber([&] {
    FiberScheduler::Current()
        ->Spawn([&] {
          EXPECT_EQ(ReadFull(b.get(), received.data(), received.size()),
                    static_cast<ssize_t>(received.size()));
        })
        .IgnoreError();
    // A 64 KiB pipe moves at most 64 KiB a pass: the loop drains it each time.
    size_t moved = 0;
    while (moved < data.size()) {
      const ssize_t in = Splice(file.get(), static_cast<int64_t>(moved), pipe->write_fd(), -1,
                                std::min(pipe->capacity_bytes(), data.size() - moved));
      ASSERT_GT(in, 0);
      EXPECT_LE(static_cast<size_t>(in), pipe->capacity_bytes());
      ASSERT_EQ(SpliceAll(pipe->read_fd(), -1, a.get(), -1, static_cast<size_t>(in)), in);
      moved += static_cast<size_t>(in);
    }
  });
  EXPECT_EQ(received, data);
}

}  // namespace
}  // namespace ferry
