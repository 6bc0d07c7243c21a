#include "common/io/blocking_pool.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/io/ops.h"
#include "common/io/scheduler.h"
#include "common/io/sync.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;

const absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// How long a job or the test waits for the other at most: far longer than it takes.
constexpr absl::Duration kPatience = absl::Seconds(10);

TEST(BlockingPoolTest, CallReturnsTheJobsResult) {
  BlockingPool pool({.threads = 2});
  RunInFiber([&] {
    absl::StatusOr<int> got = pool.Call<int>([] { return absl::StatusOr<int>(42); }, Soon());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, 42);
    absl::StatusOr<int> failed =
        pool.Call<int>([] { return absl::StatusOr<int>(absl::NotFoundError("x")); }, Soon());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kNotFound);
  });
}

// The point of the pool: while one fiber's job blocks a worker, the other fibers of
// its thread keep running.
TEST(BlockingPoolTest, AWaitingFiberLeavesItsThreadToTheOthers) {
  absl::Notification release;  // outlives the pool, whose worker waits on it
  BlockingPool pool({.threads = 1});
  int ticks_while_blocked = 0;
  RunInFiber([&] {
    WaitGroup done;
    done.Add(1);
    bool job_done = false;
    FiberScheduler::Current()
        ->Spawn([&] {
          absl::Status s =
              pool.Run([&release] { release.WaitForNotificationWithTimeout(kPatience); }, Soon());
          EXPECT_TRUE(s.ok()) << s;
          job_done = true;
          done.Done();
        })
        .IgnoreError();
    for (int i = 0; i < 20 && !job_done; ++i) {
      ASSERT_EQ(Sleep(absl::Milliseconds(1)), 0);
      ++ticks_while_blocked;
    }
    release.Notify();
    done.Wait();
  });
  EXPECT_EQ(ticks_while_blocked, 20);
}

TEST(BlockingPoolTest, RefusesPastTheQueueBound) {
  absl::Notification release;
  absl::Notification started;
  BlockingPool pool({.threads = 1, .max_queued = 1});
  RunInFiber([&] {
    WaitGroup done;
    std::atomic<int> runs{0};
    auto blocker = [&] {
      if (runs.fetch_add(1) == 0) started.Notify();
      release.WaitForNotificationWithTimeout(kPatience);
    };
    // One job runs, one waits in the queue: the third is refused.
    for (int i = 0; i < 2; ++i) {
      done.Add(1);
      FiberScheduler::Current()
          ->Spawn([&] {
            EXPECT_TRUE(pool.Run(blocker, Soon()).ok());
            done.Done();
          })
          .IgnoreError();
      FiberScheduler::Current()->Yield();
      // The first job is on the worker before the second is queued. (Blocking this
      // thread is safe: the submitting fiber is parked, and the worker is another thread.)
      if (i == 0) {
        ASSERT_TRUE(started.WaitForNotificationWithTimeout(kPatience));
      }
    }
    EXPECT_EQ(pool.Run([] {}, Soon()).code(), absl::StatusCode::kResourceExhausted);
    release.Notify();
    done.Wait();
  });
}

TEST(BlockingPoolTest, ADeadlineEndsTheWaitAndTheJobStillFinishesSafely) {
  // The job goes on past its caller's deadline until the test lets it finish. The
  // deadline leaves a busy machine time to start the job (one not started by then is
  // dropped: the next test).
  auto release = std::make_shared<absl::Notification>();
  auto finished = std::make_shared<absl::Notification>();
  BlockingPool pool({.threads = 1});
  RunInFiber([&] {
    absl::Status s = pool.Run(
        [release, finished] {
          release->WaitForNotificationWithTimeout(kPatience);
          finished->Notify();
        },
        absl::Now() + absl::Milliseconds(500));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  });
  release->Notify();
  EXPECT_TRUE(finished->WaitForNotificationWithTimeout(kPatience));
}

// Jobs whose callers had left (their deadline passed) still ran, for minutes
// of CPU. A job still queued when its waiter leaves never runs.
TEST(BlockingPoolTest, AQueuedJobWhoseWaiterLeftNeverRuns) {
  absl::Notification release;
  absl::Notification started;
  BlockingPool pool({.threads = 1});
  auto ran = std::make_shared<std::atomic<bool>>(false);
  RunInFiber([&] {
    WaitGroup done;
    done.Add(1);
    FiberScheduler::Current()
        ->Spawn([&] {
          EXPECT_TRUE(pool.Run(
                              [&] {
                                started.Notify();
                                release.WaitForNotificationWithTimeout(kPatience);
                              },
                              Soon())
                          .ok());
          done.Done();
        })
        .IgnoreError();
    // The fiber submits its job; then this thread waits (the fiber is parked on the
    // job, the worker another thread) until the job runs.
    FiberScheduler::Current()->Yield();
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(kPatience));
    absl::Status late = pool.Run([ran] { ran->store(true); }, absl::Now() + absl::Milliseconds(20));
    EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
    release.Notify();
    done.Wait();
    // A job queued after the dropped one runs, so the dropped one has been passed.
    EXPECT_TRUE(pool.Run([] {}, Soon()).ok());
  });
  EXPECT_FALSE(ran->load());
}

TEST(BlockingPoolTest, AStoppingSchedulerCancelsTheWait) {
  absl::Notification release;
  absl::Notification started;
  BlockingPool pool({.threads = 1});
  auto scheduler = FiberScheduler::Create({});
  ASSERT_TRUE(scheduler.ok());
  absl::Status waited;
  ASSERT_TRUE((*scheduler)
                  ->Spawn([&] {
                    waited = pool.Run(
                        [&] {
                          started.Notify();
                          release.WaitForNotificationWithTimeout(kPatience);
                        },
                        Soon());
                  })
                  .ok());
  // Stopped while the job is running, so the fiber is waiting for it.
  std::thread stopper([&] {
    EXPECT_TRUE(started.WaitForNotificationWithTimeout(kPatience));
    (*scheduler)->Stop();
  });
  (*scheduler)->Run();
  stopper.join();
  release.Notify();
  EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled) << waited;
}

// Each job's eventfd is fresh: thousands in a row leave nothing behind and none is lost.
TEST(BlockingPoolTest, ThousandsOfJobsInARowAllRun) {
  BlockingPool pool({.threads = 2});
  int ran = 0;
  const int fds_before = testing::OpenFdCount();
  RunInFiber([&] {
    for (int i = 0; i < 3000; ++i) {
      if (pool.Run([] {}, Soon()).ok()) ++ran;
    }
  });
  EXPECT_EQ(ran, 3000);
  // The last job's worker lets go of its eventfd just after it has signalled it.
  EXPECT_TRUE(testing::WaitFor([&] { return testing::OpenFdCount() == fds_before; }))
      << testing::OpenFdCount() << " descriptors open, " << fds_before << " before";
}

// Queued jobs run by their order keys, sweeping up from the last one taken and then
// wrapping around, whatever order they came in; equal keys run in arrival order.
TEST(BlockingPoolTest, WorkersSweepQueuedJobsByTheirOrder) {
  absl::Notification release;
  absl::Notification started;
  BlockingPool pool({.threads = 1});
  std::vector<int> ran;  // written by the one worker, read after the pool is done
  RunInFiber([&] {
    WaitGroup done;
    auto run = [&](BlockingPool::Order order, int tag, bool blocker) {
      done.Add(1);
      ASSERT_TRUE(FiberScheduler::Current()
                      ->Spawn([&, order, tag, blocker] {
                        absl::Status s = pool.Run(
                            [&, tag, blocker] {
                              ran.push_back(tag);
                              if (blocker) {
                                started.Notify();
                                release.WaitForNotificationWithTimeout(kPatience);
                              }
                            },
                            Soon(), order);
                        EXPECT_TRUE(s.ok()) << s;
                        done.Done();
                      })
                      .ok());
    };
    run({1, 150}, 0, true);
    while (!started.HasBeenNotified()) ASSERT_EQ(Sleep(absl::Milliseconds(1)), 0);
    run({1, 300}, 3, false);
    run({1, 100}, 5, false);
    run({2, 0}, 4, false);
    run({1, 200}, 1, false);
    run({1, 200}, 2, false);
    for (int i = 0; i < 1000 && pool.queued() < 5; ++i) {
      ASSERT_EQ(Sleep(absl::Milliseconds(1)), 0);
    }
    ASSERT_EQ(pool.queued(), 5u);
    release.Notify();
    done.Wait();
  });
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

// One tenant's jobs take at most its share of the workers, however many it sends: the
// others' jobs run beside them, and its own parked jobs all run once workers are free.
TEST(BlockingPoolTest, ATenantsJobsNeverHoldEveryWorker) {
  absl::Notification release;
  BlockingPool pool({.threads = 2});  // a tenant's share: 1
  std::atomic<int> greedy_running{0};
  std::atomic<int> greedy_most{0};
  std::atomic<int> greedy_ran{0};
  RunInFiber([&] {
    WaitGroup done;
    for (int i = 0; i < 6; ++i) {
      done.Add(1);
      FiberScheduler::Current()
          ->Spawn([&] {
            absl::Status s = pool.Run(
                [&] {
                  const int now = greedy_running.fetch_add(1) + 1;
                  int most = greedy_most.load();
                  while (now > most && !greedy_most.compare_exchange_weak(most, now)) {
                  }
                  release.WaitForNotificationWithTimeout(kPatience);
                  greedy_running.fetch_sub(1);
                  greedy_ran.fetch_add(1);
                },
                Soon(), {.stream = 0, .offset = 0, .tenant = 7});
            EXPECT_TRUE(s.ok()) << s;
            done.Done();
          })
          .IgnoreError();
    }
    FiberScheduler::Current()->Yield();
    // Tenant 7 holds one worker (its others are parked): another tenant's job runs now.
    absl::Status other = pool.Run([] {}, Soon(), {.stream = 0, .offset = 0, .tenant = 8});
    EXPECT_TRUE(other.ok()) << other;
    // (Blocking this thread is safe: its fibers are parked, the workers other threads.)
    EXPECT_TRUE(testing::WaitFor([&] { return greedy_running.load() == 1; }, kPatience));
    EXPECT_EQ(pool.queued(), 5u);
    release.Notify();
    done.Wait();
  });
  EXPECT_EQ(greedy_most.load(), 1);
  EXPECT_EQ(greedy_ran.load(), 6);
  EXPECT_EQ(pool.queued(), 0u);
}

// A running job whose waiter has left can see it and stop early.
TEST(BlockingPoolTest, ARunningJobSeesItsWaiterLeave) {
  BlockingPool pool({.threads = 1});
  auto stopped_early = std::make_shared<absl::Notification>();
  EXPECT_FALSE(BlockingPool::Abandoned());  // not on a worker
  RunInFiber([&] {
    absl::Status s = pool.Run(
        [stopped_early] {
          if (testing::WaitFor([] { return BlockingPool::Abandoned(); }, kPatience)) {
            stopped_early->Notify();
          }
        },
        absl::Now() + absl::Milliseconds(100));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  });
  EXPECT_TRUE(stopped_early->WaitForNotificationWithTimeout(kPatience));
}

}  // namespace
}  // namespace ferry
