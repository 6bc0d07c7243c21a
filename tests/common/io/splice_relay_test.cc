// The relay from the FiberScheduler::splice change: bytes go socket -> pipe -> socket
// with no user-space copy, the first leg over the blocking splice and the second over
// the async one, and a source whose peer has shut down reports end of input as zero.
#include <sys/socket.h>

#include <string>
#include <thread>

#include "common/io/ops.h"
#include "common/pipe.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::ConnectLoopback;
using ::ferry::testing::ListenLoopback;
using ::ferry::testing::RunInFiber;

std::string Payload(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (auto& c : s) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

// Relays `from` -> pipe -> `to` until `from` reports end of input. Returns bytes
// relayed, or -errno.
ssize_t Relay(int from, int to, Pipe& pipe, int* zero_reads) {
  ssize_t total = 0;
  for (int pass = 0; pass < 100000; ++pass) {
    // Leg one, blocking form: socket -> pipe.
    const ssize_t in = Splice(from, -1, pipe.write_fd(), -1, pipe.capacity_bytes(), 0,
                              absl::Now() + absl::Seconds(10));
    if (in < 0) return in;
    if (in == 0) {
      ++*zero_reads;
      return total;
    }
    // Leg two, async form: pipe -> socket; drain everything leg one moved.
    ssize_t left = in;
    while (left > 0) {
      IoOp out;
      PrepSplice(out, pipe.read_fd(), -1, to, -1, static_cast<size_t>(left), 0, 0,
                 absl::Now() + absl::Seconds(10));
      const int n = out.Wait();
      if (n <= 0) return n < 0 ? n : -EIO;
      left -= n;
    }
    total += in;
  }
  return -E2BIG;
}

TEST(SpliceRelayTest, RelaysSocketToSocketThroughAPipe) {
  const std::string payload = Payload(8 * 1024 * 1024 + 123);
  uint16_t in_port = 0;
  uint16_t out_port = 0;
  UniqueFd in_listener = ListenLoopback(&in_port);
  UniqueFd out_listener = ListenLoopback(&out_port);

  // The writer and the reader are plain threads with plain sockets; only the relay
  // runs on fibers.
  std::thread writer([&] {
    UniqueFd fd = ConnectLoopback(in_port);
    size_t sent = 0;
    while (sent < payload.size()) {
      const ssize_t n =
          ::send(fd.get(), payload.data() + sent, payload.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      ASSERT_GT(n, 0);
      sent += static_cast<size_t>(n);
    }
    ::shutdown(fd.get(), SHUT_WR);
  });
  std::string received;
  std::thread reader([&] {
    UniqueFd fd = ConnectLoopback(out_port);
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      ASSERT_GE(n, 0);
      if (n == 0) break;
      received.append(buf, static_cast<size_t>(n));
    }
  });

  ssize_t relayed = -1;
  int zero_reads = 0;
  RunInFiber([&] {
    UniqueFd from(
        Accept(in_listener.get(), nullptr, nullptr, SOCK_CLOEXEC, absl::Now() + absl::Seconds(10)));
    UniqueFd to(Accept(out_listener.get(), nullptr, nullptr, SOCK_CLOEXEC,
                       absl::Now() + absl::Seconds(10)));
    ASSERT_TRUE(from.valid() && to.valid());
    auto pipe = Pipe::Create(64 * 1024);
    ASSERT_TRUE(pipe.ok());
    relayed = Relay(from.get(), to.get(), *pipe, &zero_reads);
    // Closing `to` ends the reader.
  });
  writer.join();
  reader.join();
  EXPECT_EQ(relayed, static_cast<ssize_t>(payload.size()));
  EXPECT_EQ(zero_reads, 1);
  EXPECT_EQ(received.size(), payload.size());
  EXPECT_TRUE(received == payload);
}

TEST(SpliceRelayTest, ShutDownPeerReportsEndOfInputAsZeroBytes) {
  auto [a, b] = ferry::testing::SocketPair();
  ::shutdown(b.get(), SHUT_WR);
  RunInFiber([&] {
    auto pipe = Pipe::Create(64 * 1024);
    ASSERT_TRUE(pipe.ok());
    EXPECT_EQ(Splice(a.get(), -1, pipe->write_fd(), -1, 4096), 0);
    IoOp op;
    PrepSplice(op, a.get(), -1, pipe->write_fd(), -1, 4096, 0);
    EXPECT_EQ(op.Wait(), 0);
  });
}

TEST(SpliceRelayTest, ShortPipeMovesPartialBlock) {
  auto [a, b] = ferry::testing::SocketPair();
  const std::string payload = Payload(64 * 1024);
  ASSERT_EQ(::send(b.get(), payload.data(), payload.size(), 0),
            static_cast<ssize_t>(payload.size()));
  RunInFiber([&] {
    auto pipe = Pipe::Create(4096);
    ASSERT_TRUE(pipe.ok());
    const ssize_t n = Splice(a.get(), -1, pipe->write_fd(), -1, payload.size());
    EXPECT_GT(n, 0);
    EXPECT_LE(static_cast<size_t>(n), pipe->capacity_bytes());
  });
}

}  // namespace
}  // namespace ferry
