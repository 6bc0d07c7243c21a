#include "common/io/sync.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/io/ops.h"
#include "gtest/gtest.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;

TEST(EventTest, SetWakesEveryWaiter) {
  int woken = 0;
  RunInFiber([&] {
    Event event;
    WaitGroup done;
    done.Add(3);
    for (int i = 0; i < 3; ++i) {
      FiberScheduler::Current()
          ->Spawn([&] {
            if (event.Wait(absl::Now() + absl::Seconds(10)) == 0) ++woken;
            done.Done();
          })
          .IgnoreError();
    }
    FiberScheduler::Current()->Yield();  // the waiters park
    event.Set();
    done.Wait();
  });
  EXPECT_EQ(woken, 3);
}

TEST(EventTest, WaitOnASetEventReturnsAtOnce) {
  RunInFiber([] {
    Event event;
    event.Set();
    EXPECT_EQ(event.Wait(), 0);
    event.Reset();
    EXPECT_FALSE(event.is_set());
  });
}

TEST(EventTest, WaitTimesOut) {
  RunInFiber([] {
    Event event;
    const absl::Time start = absl::Now();
    EXPECT_EQ(event.Wait(absl::Now() + absl::Milliseconds(20)), -ETIMEDOUT);
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(15));
  });
}

TEST(EventTest, StoppingTheSchedulerWakesAnUnboundedWait) {
  int result = 0;
  auto s = FiberScheduler::Create();
  ASSERT_TRUE(s.ok());
  Event event;
  ASSERT_TRUE((*s)->Spawn([&] { result = event.Wait(); }).ok());
  ASSERT_TRUE((*s)->Spawn([&] {
                    ASSERT_EQ(Sleep(absl::Milliseconds(5)), 0);
                    FiberScheduler::Current()->Stop();
                  })
                  .ok());
  (*s)->Run();
  EXPECT_EQ(result, -ECANCELED);
}

TEST(EventTest, SetFromAnotherThreadThroughPost) {
  auto s = FiberScheduler::Create();
  ASSERT_TRUE(s.ok());
  FiberScheduler* scheduler = s->get();
  Event event;
  int result = -1;
  ASSERT_TRUE(scheduler->Spawn([&] { result = event.Wait(absl::Now() + absl::Seconds(10)); }).ok());
  std::thread other([&] { scheduler->Post([&] { event.Set(); }); });
  scheduler->Run();
  other.join();
  EXPECT_EQ(result, 0);
}

TEST(WaitGroupTest, WaitReturnsWhenCountReachesZero) {
  std::vector<std::string> log;
  RunInFiber([&] {
    WaitGroup wg;
    for (int i = 0; i < 5; ++i) {
      wg.Add();
      FiberScheduler::Current()
          ->Spawn([&, i] {
            ASSERT_EQ(Sleep(absl::Milliseconds(i)), 0);
            log.push_back("worker");
            wg.Done();
          })
          .IgnoreError();
    }
    wg.Wait();
    log.push_back("waited");
    EXPECT_EQ(wg.count(), 0u);
  });
  ASSERT_EQ(log.size(), 6u);
  EXPECT_EQ(log.back(), "waited");
}

TEST(WaitGroupTest, WaitWithZeroCountReturnsAtOnce) {
  RunInFiber([] {
    WaitGroup wg;
    wg.Wait();
  });
}

// A call finishing on another thread after a delay, as an RPC does.
std::function<void()> FinishLater(absl::AnyInvocable<void(int)> done, absl::Duration delay,
                                  std::vector<std::thread>& threads, std::atomic<bool>* cancelled) {
  auto shared = std::make_shared<absl::AnyInvocable<void(int)>>(std::move(done));
  auto cancel_now = std::make_shared<absl::Notification>();
  threads.emplace_back([shared, cancel_now, delay] {
    const bool was_cancelled = cancel_now->WaitForNotificationWithTimeout(delay);
    (*shared)(was_cancelled ? -1 : 42);
  });
  return [cancel_now, cancelled] {
    cancelled->store(true);
    if (!cancel_now->HasBeenNotified()) cancel_now->Notify();
  };
}

TEST(AwaitCallTest, OtherFibersRunWhileOneAwaitsACallOfAnotherThread) {
  std::vector<std::thread> threads;
  std::atomic<bool> cancelled{false};
  int result = 0;
  int ticks = 0;
  RunInFiber([&] {
    WaitGroup done;
    done.Add(1);
    FiberScheduler::Current()
        ->Spawn([&] {
          result = AwaitCall<int>(*FiberScheduler::Current(), [&](absl::AnyInvocable<void(int)> d) {
            return FinishLater(std::move(d), absl::Milliseconds(100), threads, &cancelled);
          });
          done.Done();
        })
        .IgnoreError();
    // This fiber keeps its thread busy while the other awaits.
    while (result == 0 && ticks < 10000) {
      ++ticks;
      (void)Sleep(absl::Milliseconds(1));
    }
    done.Wait();
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(result, 42);
  EXPECT_FALSE(cancelled.load());
  EXPECT_GT(ticks, 20);
}

TEST(AwaitCallTest, StoppingTheSchedulerCancelsTheCallAndWaitsForIt) {
  std::vector<std::thread> threads;
  std::atomic<bool> cancelled{false};
  int result = 0;
  auto s = FiberScheduler::Create();
  ASSERT_TRUE(s.ok());
  FiberScheduler* scheduler = s->get();
  absl::Notification started;
  ASSERT_TRUE(scheduler
                  ->Spawn([&] {
                    result = AwaitCall<int>(*scheduler, [&](absl::AnyInvocable<void(int)> d) {
                      std::function<void()> cancel =
                          FinishLater(std::move(d), absl::Seconds(60), threads, &cancelled);
                      started.Notify();
                      return cancel;
                    });
                  })
                  .ok());
  // Stopped while the call is in flight (before or after the fiber parks on it).
  std::thread stopper([&] {
    started.WaitForNotification();
    scheduler->Stop();
  });
  const absl::Time start = absl::Now();
  scheduler->Run();
  stopper.join();
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(cancelled.load());
  EXPECT_EQ(result, -1);  // the call's own answer to its cancellation
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace ferry
