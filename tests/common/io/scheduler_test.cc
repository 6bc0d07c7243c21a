#include "common/io/scheduler.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/io/ops.h"
#include "common/io/sync.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;

std::unique_ptr<FiberScheduler> NewScheduler() {
  auto s = FiberScheduler::Create();
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(SchedulerTest, RunReturnsWhenEveryFiberFinished) {
  auto s = NewScheduler();
  int ran = 0;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s->Spawn([&] { ++ran; }).ok());
  s->Run();
  EXPECT_EQ(ran, 10);
  EXPECT_EQ(s->live_fibers(), 0u);
}

TEST(SchedulerTest, RunWithNoFibersReturnsAtOnce) {
  auto s = NewScheduler();
  s->Run();
  EXPECT_EQ(s->live_fibers(), 0u);
}

TEST(SchedulerTest, YieldInterleavesFibers) {
  auto s = NewScheduler();
  std::vector<int> order;
  for (int id = 0; id < 2; ++id) {
    ASSERT_TRUE(s->Spawn([&, id] {
                   for (int i = 0; i < 3; ++i) {
                     order.push_back(id);
                     FiberScheduler::Current()->Yield();
                   }
                 }).ok());
  }
  s->Run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 0, 1, 0, 1}));
}

// Three fibers that take turns (bulk senders) and one waiting to receive: once its
// bytes arrive during a turn, it runs right after that turn, before the other two take
// theirs again.
TEST(SchedulerTest, AFiberWokenDuringATurnRunsBeforeTheOtherTurns) {
  auto s = NewScheduler();
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  UniqueFd receiver(fds[0]);
  UniqueFd sender(fds[1]);
  std::vector<std::string> order;
  ASSERT_TRUE(s->Spawn([&] {
                 char byte;
                 ASSERT_EQ(Recv(receiver.get(), &byte, 1), 1);
                 order.push_back("woken");
               }).ok());
  for (int id = 0; id < 3; ++id) {
    ASSERT_TRUE(s->Spawn([&, id] {
                   for (int turn = 0; turn < 3; ++turn) {
                     order.push_back(absl::StrCat(id, ".", turn));
                     // The second fiber's second turn: the receiver's byte arrives.
                     if (id == 1 && turn == 1) {
                       ASSERT_EQ(::write(sender.get(), "x", 1), 1);
                     }
                     FiberScheduler::Current()->Yield();
                   }
                 }).ok());
  }
  s->Run();
  EXPECT_EQ(order, (std::vector<std::string>{"0.0", "1.0", "2.0", "0.1", "1.1", "woken", "2.1",
                                             "0.2", "1.2", "2.2"}));
}

TEST(SchedulerTest, JoinWaitsForTheFiber) {
  std::vector<std::string> events;
  RunInFiber([&] {
    FiberScheduler* s = FiberScheduler::Current();
    auto child = s->SpawnJoinable([&] {
      ASSERT_EQ(Sleep(absl::Milliseconds(5)), 0);
      events.push_back("child done");
    });
    ASSERT_TRUE(child.ok());
    EXPECT_FALSE(child->done());
    child->Join();
    events.push_back("joined");
  });
  EXPECT_EQ(events, (std::vector<std::string>{"child done", "joined"}));
}

TEST(SchedulerTest, JoinAfterFinishReturnsAtOnce) {
  RunInFiber([] {
    FiberScheduler* s = FiberScheduler::Current();
    auto child = s->SpawnJoinable([] {});
    ASSERT_TRUE(child.ok());
    s->Yield();  // the child runs and finishes
    EXPECT_TRUE(child->done());
    child->Join();
    EXPECT_FALSE(child->joinable());
  });
}

TEST(SchedulerTest, DroppedJoinHandleDetaches) {
  int ran = 0;
  RunInFiber([&] {
    auto child = FiberScheduler::Current()->SpawnJoinable([&] { ++ran; });
    ASSERT_TRUE(child.ok());
  });
  EXPECT_EQ(ran, 1);
}

TEST(SchedulerTest, FiberClosureIsDestroyedWhenItFinishes) {
  auto token = std::make_shared<int>(7);
  std::weak_ptr<int> weak = token;
  auto s = NewScheduler();
  ASSERT_TRUE(s->Spawn([t = std::move(token)] { EXPECT_EQ(*t, 7); }).ok());
  s->Run();
  EXPECT_TRUE(weak.expired());
}

TEST(SchedulerTest, PostFromAnotherThreadWakesASleepingScheduler) {
  auto s = NewScheduler();
  std::atomic<int> ran{0};
  std::thread poster([&] {
    for (int i = 0; i < 100; ++i) {
      s->Post([&] { ran.fetch_add(1); });
    }
    s->Post([&] { FiberScheduler::Current()->Stop(); });
  });
  s->RunUntilStopped();
  poster.join();
  EXPECT_EQ(ran.load(), 100);
}

// A Post from the scheduler's own thread writes no eventfd: the loop must see it before
// it sleeps, or the fiber waiting for the posted work would wait forever.
TEST(SchedulerTest, PostFromItsOwnThreadRunsWithoutAWake) {
  auto s = NewScheduler();
  int rounds = 0;
  ASSERT_TRUE(s->Spawn([&] {
                 for (int i = 0; i < 100; ++i) {
                   Event done;
                   FiberScheduler::Current()->Post([&] { done.Set(); });
                   ASSERT_EQ(done.Wait(absl::Now() + absl::Seconds(10)), 0);
                   ++rounds;
                 }
                 FiberScheduler::Current()->Stop();
               }).ok());
  s->RunUntilStopped();
  EXPECT_EQ(rounds, 100);
}

TEST(SchedulerTest, StopFromAnotherThreadEndsRunUntilStopped) {
  auto s = NewScheduler();
  absl::Notification started;
  s->Post([&] { started.Notify(); });
  std::thread stopper([&] {
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
    s->Stop();
  });
  s->RunUntilStopped();
  stopper.join();
  EXPECT_TRUE(s->stopping());
}

TEST(SchedulerTest, StopCancelsParkedFibersAndTheyUnwind) {
  auto s = NewScheduler();
  int results_seen = 0;
  int cancelled = 0;
  auto [a, b] = ferry::testing::SocketPair();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(s->Spawn([&, fd = a.get()] {
                   char buf[16];
                   // Nobody writes: this recv parks until the scheduler stops.
                   const ssize_t n = Recv(fd, buf, sizeof(buf));
                   ++results_seen;
                   if (n == -ECANCELED) ++cancelled;
                 }).ok());
  }
  ASSERT_TRUE(s->Spawn([&] {
                 ASSERT_EQ(Sleep(absl::Milliseconds(10)), 0);
                 FiberScheduler::Current()->Stop();
               }).ok());
  s->Run();
  EXPECT_EQ(results_seen, 8);
  EXPECT_EQ(cancelled, 8);
}

TEST(SchedulerTest, OpsAfterStopFailWithCanceled) {
  RunInFiber([] {
    FiberScheduler::Current()->Stop();
    FiberScheduler::Current()->Yield();  // the next turn begins the stop
    EXPECT_EQ(Nop(), -ECANCELED);
    EXPECT_EQ(Sleep(absl::Seconds(100)), -ECANCELED);
  });
}

TEST(SchedulerTest, StoppingWithParkedFibersLeaksNoDescriptor) {
  const int before = ferry::testing::OpenFdCount();
  {
    auto s = NewScheduler();
    uint16_t port = 0;
    auto listener = std::make_shared<UniqueFd>(ferry::testing::ListenLoopback(&port));
    // Fibers own connections and park in recv/accept; stopping must close them all.
    for (int i = 0; i < 16; ++i) {
      ASSERT_TRUE(s->Spawn([port] {
                     UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
                     sockaddr_in addr = ferry::testing::LoopbackAddress(port);
                     if (Connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
                       return;
                     }
                     char buf[8];
                     (void)Recv(fd.get(), buf, sizeof(buf));
                   }).ok());
    }
    ASSERT_TRUE(s->Spawn([listener] {
                   for (;;) {
                     UniqueFd conn(Accept(listener->get()));
                     if (!conn.valid()) return;
                     FiberScheduler::Current()
                         ->Spawn([c = std::move(conn)] {
                           char buf[8];
                           (void)Recv(c.get(), buf, sizeof(buf));
                         })
                         .IgnoreError();
                   }
                 }).ok());
    ASSERT_TRUE(s->Spawn([] {
                   ASSERT_EQ(Sleep(absl::Milliseconds(50)), 0);
                   FiberScheduler::Current()->Stop();
                 }).ok());
    s->Run();
    EXPECT_EQ(s->live_fibers(), 0u);
  }
  EXPECT_EQ(ferry::testing::OpenFdCount(), before);
}

TEST(SchedulerTest, SchedulersOnSeveralThreadsRunSideBySide) {
  constexpr int kThreads = 4;
  constexpr int kFibers = 200;
  std::atomic<int> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      RunInFiber([&] {
        for (int i = 0; i < kFibers; ++i) {
          FiberScheduler::Current()
              ->Spawn([&] {
                if (Nop() == 0 && Sleep(absl::Microseconds(100)) == 0) total.fetch_add(1);
              })
              .IgnoreError();
        }
      });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(total.load(), kThreads * kFibers);
}

TEST(SchedulerTest, ManyFibersReuseStacks) {
  auto s = NewScheduler();
  int done = 0;
  ASSERT_TRUE(s->Spawn([&] {
                 for (int round = 0; round < 20; ++round) {
                   std::vector<JoinHandle> handles;
                   for (int i = 0; i < 100; ++i) {
                     auto h = FiberScheduler::Current()->SpawnJoinable([&] {
                       (void)Nop();
                       ++done;
                     });
                     ASSERT_TRUE(h.ok());
                     handles.push_back(*std::move(h));
                   }
                   for (auto& h : handles) h.Join();
                 }
               }).ok());
  s->Run();
  EXPECT_EQ(done, 2000);
}

// A scheduler that polls before it sleeps (SchedulerOptions::idle_poll) must see every
// completion, whether it arrives while the loop polls, after it fell asleep, or while
// other fibers keep the loop from ever going idle.
SchedulerOptions PollingOptions() {
  SchedulerOptions options;
  options.idle_poll = absl::Milliseconds(1);
  return options;
}

TEST(SchedulerTest, PollingSchedulerSeesCompletionsBeforeAndAfterItSleeps) {
  auto [mine, theirs] = ::ferry::testing::SocketPair();
  constexpr int kRounds = 200;
  // The peer answers every ping at once, or after 3 ms (past the 1 ms poll) every
  // tenth time, so both the polling and the sleeping path carry completions.
  std::thread peer([fd = theirs.get()] {
    char byte;
    for (int i = 0; i < kRounds; ++i) {
      if (::recv(fd, &byte, 1, 0) != 1) return;
      if (i % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      byte = static_cast<char>(byte + 1);
      if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) return;
    }
  });
  int answered = 0;
  RunInFiber(
      [&, fd = mine.get()] {
        for (int i = 0; i < kRounds; ++i) {
          char byte = static_cast<char>(i);
          ASSERT_EQ(SendAll(fd, &byte, 1), 1);
          ASSERT_EQ(Recv(fd, &byte, 1, 0, absl::Now() + absl::Seconds(10)), 1);
          ASSERT_EQ(byte, static_cast<char>(i + 1));
          ++answered;
        }
      },
      PollingOptions());
  peer.join();
  EXPECT_EQ(answered, kRounds);
}

TEST(SchedulerTest, PollingSchedulerThatNeverIdlesStillReapsCompletions) {
  auto [mine, theirs] = ::ferry::testing::SocketPair();
  bool received = false;
  int spins = 0;
  std::thread peer([fd = theirs.get()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    (void)::send(fd, "x", 1, MSG_NOSIGNAL);
  });
  auto s = FiberScheduler::Create(PollingOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Spawn([&, fd = mine.get()] {
                    char byte;
                    EXPECT_EQ(Recv(fd, &byte, 1, 0, absl::Now() + absl::Seconds(10)), 1);
                    received = true;
                  })
                  .ok());
  // Always ready: the loop never polls or sleeps, and the recv's completion must
  // still reach its fiber. Bounded by time.
  ASSERT_TRUE((*s)->Spawn([&] {
                    const absl::Time give_up = absl::Now() + absl::Seconds(10);
                    while (!received && absl::Now() < give_up) {
                      ++spins;
                      FiberScheduler::Current()->Yield();
                    }
                  })
                  .ok());
  (*s)->Run();
  peer.join();
  EXPECT_TRUE(received);
  EXPECT_GT(spins, 0);
}

TEST(SchedulerTest, PollingSchedulerWakesForPostsAndStops) {
  auto s = FiberScheduler::Create(PollingOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  std::atomic<int> ran{0};
  std::thread poster([&] {
    for (int i = 0; i < 100; ++i) {
      (*s)->Post([&] { ran.fetch_add(1); });
      // Some posts find the loop polling, some asleep.
      if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    (*s)->Stop();
  });
  (*s)->RunUntilStopped();
  poster.join();
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace ferry
