// An echo server on fibers holding 1,000 concurrent connections, on one scheduler and
// on several schedulers sharing one port through SO_REUSEPORT.
#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/io/ops.h"
#include "common/io/sync.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::LoopbackAddress;

constexpr int kConnections = 1000;
const absl::Duration kTimeout = absl::Seconds(20);

// Echoes until the peer closes.
void EchoConnection(UniqueFd conn) {
  char buf[4096];
  for (int i = 0; i < 1000; ++i) {
    const ssize_t n = Recv(conn.get(), buf, sizeof(buf), 0, absl::Now() + kTimeout);
    if (n <= 0) return;
    if (SendAll(conn.get(), buf, static_cast<size_t>(n), MSG_NOSIGNAL, absl::Now() + kTimeout) <
        0) {
      return;
    }
  }
}

// Accepts `count` connections, each served by its own fiber, then returns.
void AcceptLoop(int listener, int count) {
  for (int i = 0; i < count; ++i) {
    UniqueFd conn(Accept(listener, nullptr, nullptr, SOCK_CLOEXEC, absl::Now() + kTimeout));
    if (!conn.valid()) return;
    FiberScheduler::Current()
        ->Spawn([c = std::move(conn)]() mutable { EchoConnection(std::move(c)); })
        .IgnoreError();
  }
}

// Opens `count` client fibers that all connect first (so every connection is open at
// once), then each sends a message and reads its echo. Returns the number verified.
int RunClients(uint16_t port, int count, int* peak_open) {
  int verified = 0;
  int connected = 0;
  WaitGroup all_connected;
  all_connected.Add(static_cast<size_t>(count));
  WaitGroup finished;
  finished.Add(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    FiberScheduler::Current()
        ->Spawn([&, i] {
          UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
          sockaddr_in addr = LoopbackAddress(port);
          const bool ok = Connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr),
                                  absl::Now() + kTimeout) == 0;
          if (ok) ++connected;
          all_connected.Done();
          all_connected.Wait();
          *peak_open = std::max(*peak_open, connected);
          if (ok) {
            const std::string msg = "hello from client " + std::to_string(i);
            std::string back(msg.size(), '\0');
            if (SendAll(fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL, absl::Now() + kTimeout) ==
                    static_cast<ssize_t>(msg.size()) &&
                Recv(fd.get(), back.data(), back.size(), MSG_WAITALL, absl::Now() + kTimeout) ==
                    static_cast<ssize_t>(back.size()) &&
                back == msg) {
              ++verified;
            }
          }
          finished.Done();
        })
        .IgnoreError();
  }
  finished.Wait();
  return verified;
}

TEST(EchoTest, OneSchedulerHoldsAThousandConnections) {
  ASSERT_GE(ferry::testing::RaiseFdLimit(4 * kConnections), 2 * kConnections + 64);
  uint16_t port = 0;
  UniqueFd listener = ferry::testing::ListenLoopback(&port, 4096);
  int verified = 0;
  int peak_open = 0;
  SchedulerOptions options;
  options.stack_bytes = 64 * 1024;
  ferry::testing::RunInFiber(
      [&] {
        FiberScheduler::Current()
            ->Spawn([&] { AcceptLoop(listener.get(), kConnections); })
            .IgnoreError();
        verified = RunClients(port, kConnections, &peak_open);
      },
      options);
  EXPECT_EQ(peak_open, kConnections);
  EXPECT_EQ(verified, kConnections);
}

UniqueFd ReusePortListener(uint16_t* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  EXPECT_EQ(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
  sockaddr_in addr = LoopbackAddress(*port);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(fd.get(), 4096), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(EchoTest, SchedulersOnTwoThreadsShareAPortAndAThousandConnections) {
  ASSERT_GE(ferry::testing::RaiseFdLimit(4 * kConnections), 2 * kConnections + 64);
  constexpr int kServerThreads = 2;
  uint16_t port = 0;
  std::vector<UniqueFd> listeners;
  listeners.push_back(ReusePortListener(&port));
  for (int t = 1; t < kServerThreads; ++t) listeners.push_back(ReusePortListener(&port));

  // Each server scheduler runs until stopped; the kernel spreads connections.
  std::vector<std::unique_ptr<FiberScheduler>> servers;
  std::atomic<int> accepted{0};
  for (int t = 0; t < kServerThreads; ++t) {
    auto s = FiberScheduler::Create();
    ASSERT_TRUE(s.ok());
    servers.push_back(*std::move(s));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kServerThreads; ++t) {
    FiberScheduler* s = servers[t].get();
    const int listener = listeners[t].get();
    ASSERT_TRUE(s->Spawn([&accepted, listener] {
                   for (;;) {
                     UniqueFd conn(Accept(listener));
                     if (!conn.valid()) return;  // -ECANCELED once stopped
                     accepted.fetch_add(1);
                     FiberScheduler::Current()
                         ->Spawn([c = std::move(conn)]() mutable { EchoConnection(std::move(c)); })
                         .IgnoreError();
                   }
                 }).ok());
    threads.emplace_back([s] { s->RunUntilStopped(); });
  }

  int verified = 0;
  int peak_open = 0;
  ferry::testing::RunInFiber([&] { verified = RunClients(port, kConnections, &peak_open); });
  for (auto& s : servers) s->Stop();
  for (auto& t : threads) t.join();
  EXPECT_EQ(peak_open, kConnections);
  EXPECT_EQ(verified, kConnections);
  EXPECT_EQ(accepted.load(), kConnections);
}

}  // namespace
}  // namespace ferry
