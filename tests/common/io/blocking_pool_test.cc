#include "common/io/blocking_pool.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "common/io/ops.h"
#include "common/io/scheduler.h"
#include "common/io/sync.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;

const absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

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
  BlockingPool pool({.threads = 1});
  std::atomic<bool> release{false};
  int ticks_while_blocked = 0;
  RunInFiber([&] {
    WaitGroup done;
    done.Add(1);
    bool job_done = false;
    FiberScheduler::Current()
        ->Spawn([&] {
          absl::Status s = pool.Run(
              [&release] {
                for (int i = 0; i < 2000 && !release.load(); ++i) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
              },
              Soon());
          EXPECT_TRUE(s.ok()) << s;
          job_done = true;
          done.Done();
        })
        .IgnoreError();
    for (int i = 0; i < 20 && !job_done; ++i) {
      ASSERT_EQ(Sleep(absl::Milliseconds(1)), 0);
      ++ticks_while_blocked;
    }
    release.store(true);
    done.Wait();
  });
  EXPECT_EQ(ticks_while_blocked, 20);
}

TEST(BlockingPoolTest, RefusesPastTheQueueBound) {
  BlockingPool pool({.threads = 1, .max_queued = 1});
  std::atomic<bool> release{false};
  std::atomic<int> started{0};
  RunInFiber([&] {
    WaitGroup done;
    auto blocker = [&] {
      started.fetch_add(1);
      for (int i = 0; i < 5000 && !release.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
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
      for (int j = 0; j < 1000 && i == 0 && started.load() == 0; ++j) {
        ASSERT_EQ(Sleep(absl::Milliseconds(1)), 0);
      }
    }
    EXPECT_EQ(pool.Run([] {}, Soon()).code(), absl::StatusCode::kResourceExhausted);
    release.store(true);
    done.Wait();
  });
}

TEST(BlockingPoolTest, ADeadlineEndsTheWaitAndTheJobStillFinishesSafely) {
  BlockingPool pool({.threads = 1});
  auto finished = std::make_shared<std::atomic<bool>>(false);
  RunInFiber([&] {
    absl::Status s = pool.Run(
        [finished] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          finished->store(true);
        },
        absl::Now() + absl::Milliseconds(10));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  });
  for (int i = 0; i < 2000 && !finished->load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(finished->load());
}

// Issue 18.5: jobs whose callers had left (their deadline passed) still ran, for minutes
// of CPU. A job still queued when its waiter leaves never runs.
TEST(BlockingPoolTest, AQueuedJobWhoseWaiterLeftNeverRuns) {
  BlockingPool pool({.threads = 1});
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  auto ran = std::make_shared<std::atomic<bool>>(false);
  RunInFiber([&] {
    WaitGroup done;
    done.Add(1);
    FiberScheduler::Current()
        ->Spawn([&] {
          EXPECT_TRUE(pool.Run(
                              [&] {
                                started.store(true);
                                for (int i = 0; i < 5000 && !release.load(); ++i) {
                                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                }
                              },
                              Soon())
                          .ok());
          done.Done();
        })
        .IgnoreError();
    for (int j = 0; j < 1000 && !started.load(); ++j) {
      ASSERT_EQ(Sleep(absl::Milliseconds(1)), 0);
    }
    absl::Status late = pool.Run([ran] { ran->store(true); }, absl::Now() + absl::Milliseconds(20));
    EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
    release.store(true);
    done.Wait();
    // A job queued after the dropped one runs, so the dropped one has been passed.
    EXPECT_TRUE(pool.Run([] {}, Soon()).ok());
  });
  EXPECT_FALSE(ran->load());
}

TEST(BlockingPoolTest, AStoppingSchedulerCancelsTheWait) {
  BlockingPool pool({.threads = 1});
  std::atomic<bool> release{false};
  auto scheduler = FiberScheduler::Create({});
  ASSERT_TRUE(scheduler.ok());
  absl::Status waited;
  ASSERT_TRUE((*scheduler)
                  ->Spawn([&] {
                    waited = pool.Run(
                        [&release] {
                          for (int i = 0; i < 5000 && !release.load(); ++i) {
                            std::this_thread::sleep_for(std::chrono::milliseconds(1));
                          }
                        },
                        Soon());
                  })
                  .ok());
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    (*scheduler)->Stop();
  });
  (*scheduler)->Run();
  stopper.join();
  release.store(true);
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
  EXPECT_EQ(testing::OpenFdCount(), fds_before);
}

}  // namespace
}  // namespace ferry

