#include "common/io/fiber_queue_lock.h"

#include <atomic>
#include <thread>
#include <vector>

#include "common/io/ops.h"
#include "common/io/sync.h"
#include "gtest/gtest.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;

TEST(FiberQueueLockTest, WaitersGetTheLockInTheOrderTheyAsked) {
  std::vector<int> order;
  RunInFiber([&] {
    FiberQueueLock lock;
    ASSERT_TRUE(lock.TryLock());
    EXPECT_FALSE(lock.TryLock());
    WaitGroup done;
    for (int i = 1; i <= 3; ++i) {
      done.Add(1);
      FiberScheduler::Current()
          ->Spawn([&, i] {
            ASSERT_TRUE(lock.Lock(absl::Now() + absl::Seconds(10)));
            order.push_back(i);
            lock.Unlock();
            done.Done();
          })
          .IgnoreError();
      FiberScheduler::Current()->Yield();  // it queues before the next one asks
    }
    EXPECT_EQ(lock.waiters(), 3u);
    lock.Unlock();
    done.Wait();
    EXPECT_TRUE(lock.TryLock());  // free again
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(FiberQueueLockTest, AWaitEndsAtItsDeadlineAndLeavesTheQueue) {
  RunInFiber([] {
    FiberQueueLock lock;
    ASSERT_TRUE(lock.TryLock());
    const absl::Time start = absl::Now();
    EXPECT_FALSE(lock.Lock(absl::Now() + absl::Milliseconds(20)));
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(15));
    EXPECT_EQ(lock.waiters(), 0u);
    lock.Unlock();
    EXPECT_TRUE(lock.TryLock());  // no one was handed it
  });
}

// Fibers of two schedulers on two threads, each section yielding halfway: the lock
// keeps every section whole, and no thread blocks while its fibers wait.
TEST(FiberQueueLockTest, FibersOfTwoThreadsTakeTurns) {
  FiberQueueLock lock;
  int inside = 0;
  int64_t total = 0;
  std::atomic<int> overlaps{0};
  constexpr int kFibers = 8;
  constexpr int kRounds = 50;
  auto run = [&] {
    RunInFiber([&] {
      WaitGroup done;
      for (int f = 0; f < kFibers; ++f) {
        done.Add(1);
        FiberScheduler::Current()
            ->Spawn([&] {
              for (int r = 0; r < kRounds; ++r) {
                ASSERT_TRUE(lock.Lock(absl::Now() + absl::Seconds(30)));
                if (++inside != 1) overlaps.fetch_add(1);
                FiberScheduler::Current()->Yield();
                ++total;
                --inside;
                lock.Unlock();
              }
              done.Done();
            })
            .IgnoreError();
      }
      done.Wait();
    });
  };
  std::thread other(run);
  run();
  other.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(total, 2 * kFibers * kRounds);
}

}  // namespace
}  // namespace ferry
