// Readiness-based ops on non-blocking sockets: they try the syscall, park on an
// io_uring poll when the socket is empty or full, and respect deadlines.
#include "common/io/ready_ops.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/io/ops.h"
#include "common/pipe.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;
using ::ferry::testing::SocketPair;

std::string Payload(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + (i >> 9));
  return s;
}

TEST(ReadyOpsTest, SetNonBlockingTogglesTheFlag) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  EXPECT_TRUE(::fcntl(a.get(), F_GETFL) & O_NONBLOCK);
  ASSERT_EQ(SetNonBlocking(a.get(), false), 0);
  EXPECT_FALSE(::fcntl(a.get(), F_GETFL) & O_NONBLOCK);
  EXPECT_EQ(SetNonBlocking(-1, true), -EBADF);
}

TEST(ReadyOpsTest, RecvWaitsForDataThatArrivesLater) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  RunInFiber([&, writer = b.get()] {
    FiberScheduler::Current()
        ->Spawn([writer] {
          ASSERT_EQ(Sleep(absl::Milliseconds(10)), 0);
          ASSERT_EQ(::send(writer, "later", 5, 0), 5);
        })
        .IgnoreError();
    char buf[5];
    EXPECT_EQ(RecvFullReady(a.get(), buf, 5, absl::Now() + absl::Seconds(10)), 5);
    EXPECT_EQ(std::string(buf, 5), "later");
  });
}

TEST(ReadyOpsTest, RecvTimesOutOnASilentPeer) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  RunInFiber([&] {
    char buf[4];
    EXPECT_EQ(RecvReady(a.get(), buf, 4, absl::Now() + absl::Milliseconds(20)), -ETIMEDOUT);
  });
}

TEST(ReadyOpsTest, RecvReportsEndOfInput) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  ASSERT_EQ(::send(b.get(), "ab", 2, 0), 2);
  b.Reset();
  RunInFiber([&] {
    char buf[8];
    EXPECT_EQ(RecvFullReady(a.get(), buf, 8, absl::Now() + absl::Seconds(10)), 2);
  });
}

// With the scheduler's idle poll on, a recv with nothing else to run polls its socket
// before it parks. A poll budget far past every deadline below shows that the poll
// gives way to other fibers' work and to the recv's own deadline.
SchedulerOptions LongPoll() {
  SchedulerOptions options;
  options.idle_poll = absl::Minutes(1);
  return options;
}

TEST(ReadyOpsTest, PollingRecvGivesWayToAnotherFiber) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  RunInFiber(
      [&, writer = b.get()] {
        // The writer's timer completes while the reader polls; the reader must park
        // and let it run, or it polls until its deadline and times out.
        FiberScheduler::Current()
            ->Spawn([writer] {
              ASSERT_EQ(Sleep(absl::Milliseconds(10)), 0);
              ASSERT_EQ(::send(writer, "later", 5, 0), 5);
            })
            .IgnoreError();
        // Two turns: in the first the writer parks on its timer, and the loop submits
        // it before the second; the reader then polls while the timer runs.
        FiberScheduler::Current()->Yield();
        FiberScheduler::Current()->Yield();
        char buf[5];
        EXPECT_EQ(RecvFullReady(a.get(), buf, 5, absl::Now() + absl::Seconds(5)), 5);
        EXPECT_EQ(std::string(buf, 5), "later");
      },
      LongPoll());
}

TEST(ReadyOpsTest, PollingRecvSeesDataFromAnotherThreadEndOfInputAndItsDeadline) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  std::thread peer([fd = b.get()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    (void)::send(fd, "x", 1, MSG_NOSIGNAL);
  });
  RunInFiber(
      [&] {
        char buf[4];
        EXPECT_EQ(RecvReady(a.get(), buf, 4, absl::Now() + absl::Seconds(5)), 1);
        const absl::Time start = absl::Now();
        EXPECT_EQ(RecvReady(a.get(), buf, 4, absl::Now() + absl::Milliseconds(20)), -ETIMEDOUT);
        EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // the deadline, not the poll budget
        ASSERT_EQ(::shutdown(b.get(), SHUT_WR), 0);
        EXPECT_EQ(RecvReady(a.get(), buf, 4, absl::Now() + absl::Seconds(5)), 0);
      },
      LongPoll());
  peer.join();
}

TEST(ReadyOpsTest, SendToAFullSocketWaitsUntilThePeerReads) {
  auto [a, b] = SocketPair();
  const int small = 4096;
  ASSERT_EQ(::setsockopt(a.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  const std::string payload = Payload(4 << 20);
  std::string received;
  std::thread reader([&, fd = b.get()] {
    char buf[65536];
    while (received.size() < payload.size()) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      received.append(buf, static_cast<size_t>(n));
    }
  });
  RunInFiber([&] {
    EXPECT_EQ(
        SendAllReady(a.get(), payload.data(), payload.size(), 0, absl::Now() + absl::Seconds(20)),
        static_cast<ssize_t>(payload.size()));
  });
  reader.join();
  EXPECT_TRUE(received == payload);
}

TEST(ReadyOpsTest, SendToAFullSocketTimesOutWhenNobodyReads) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  const std::string payload = Payload(16 << 20);  // far more than socket buffers hold
  RunInFiber([&] {
    EXPECT_EQ(SendAllReady(a.get(), payload.data(), payload.size(), 0,
                           absl::Now() + absl::Milliseconds(30)),
              -ETIMEDOUT);
  });
}

TEST(ReadyOpsTest, SendToAClosedPeerGivesEpipe) {
  auto [a, b] = SocketPair();
  ASSERT_EQ(SetNonBlocking(a.get(), true), 0);
  b.Reset();
  RunInFiber(
      [&] { EXPECT_EQ(SendAllReady(a.get(), "x", 1, 0, absl::Now() + absl::Seconds(5)), -EPIPE); });
}

TEST(ReadyOpsTest, SplicesAFullPipeIntoASlowTcpSocket) {
  uint16_t port = 0;
  UniqueFd listener = testing::ListenLoopback(&port);
  UniqueFd sender = testing::ConnectLoopback(port);
  UniqueFd receiver(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(receiver.valid());
  const int small = 16384;
  ASSERT_EQ(::setsockopt(sender.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  ASSERT_EQ(SetNonBlocking(sender.get(), true), 0);
  auto pipe = Pipe::Create(1 << 20);
  ASSERT_TRUE(pipe.ok());
  const std::string payload = Payload(pipe->capacity_bytes());
  ASSERT_EQ(::write(pipe->write_fd(), payload.data(), payload.size()),
            static_cast<ssize_t>(payload.size()));
  std::string received;
  std::thread reader([&] {
    char buf[4096];  // small reads keep the sender's socket full for a while
    while (received.size() < payload.size()) {
      const ssize_t n = ::recv(receiver.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      received.append(buf, static_cast<size_t>(n));
    }
  });
  RunInFiber([&] {
    EXPECT_EQ(SpliceAllToSocketReady(pipe->read_fd(), sender.get(), payload.size(), 0,
                                     absl::Now() + absl::Seconds(20)),
              static_cast<ssize_t>(payload.size()));
  });
  reader.join();
  EXPECT_TRUE(received == payload);
  EXPECT_EQ(pipe->BufferedBytes(), 0);
}

}  // namespace
}  // namespace ferry
