#include "server/dataplane/pipe_pool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/io/scheduler.h"
#include "common/io/sync.h"
#include "gtest/gtest.h"
#include "tests/testing/run_fiber.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

TEST(PipePoolTest, AGivenPipeIsTakenAgainWithoutANewOne) {
  PipePool pool(4, 1 << 20);
  RunInFiber([&] {
    absl::StatusOr<PipePool::Lease> pipe = pool.Take(Soon());
    ASSERT_TRUE(pipe.ok()) << pipe.status();
    EXPECT_EQ((**pipe).capacity_bytes(), size_t{1} << 20);
    const int read_fd = (**pipe).read_fd();
    EXPECT_EQ(pool.out(), 1u);
    pipe->Return();
    EXPECT_EQ(pool.out(), 0u);
    absl::StatusOr<PipePool::Lease> again = pool.Take(Soon());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ((**again).read_fd(), read_fd);
    EXPECT_EQ(pool.open(), 1u);
    again->Return();
  });
  EXPECT_EQ(pool.waits(), 0u);
}

// With every pipe out, takers wait and get them in the order they came.
TEST(PipePoolTest, WaitersGetPipesInTheOrderTheyCame) {
  PipePool pool(1, 1 << 16);
  std::vector<std::string> order;
  RunInFiber([&] {
    absl::StatusOr<PipePool::Lease> held = pool.Take(Soon());
    ASSERT_TRUE(held.ok());
    WaitGroup done;
    for (const char* name : {"first", "second"}) {
      done.Add(1);
      ASSERT_TRUE(FiberScheduler::Current()
                      ->Spawn([&, name] {
                        absl::StatusOr<PipePool::Lease> pipe = pool.Take(Soon());
                        ASSERT_TRUE(pipe.ok()) << pipe.status();
                        order.push_back(name);
                        FiberScheduler::Current()->Yield();
                        pipe->Return();
                        done.Done();
                      })
                      .ok());
    }
    FiberScheduler::Current()->Yield();  // both are waiting now
    EXPECT_TRUE(pool.contended());
    // A newcomer does not pass them: it waits behind them.
    done.Add(1);
    ASSERT_TRUE(FiberScheduler::Current()
                    ->Spawn([&] {
                      absl::StatusOr<PipePool::Lease> pipe = pool.Take(Soon());
                      ASSERT_TRUE(pipe.ok());
                      order.push_back("third");
                      pipe->Return();
                      done.Done();
                    })
                    .ok());
    FiberScheduler::Current()->Yield();
    held->Return();
    done.Wait();
  });
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second", "third"}));
  EXPECT_EQ(pool.waits(), 3u);
  EXPECT_EQ(pool.open(), 1u);
}

TEST(PipePoolTest, AWaitEndsAtItsDeadline) {
  PipePool pool(1, 1 << 16);
  RunInFiber([&] {
    absl::StatusOr<PipePool::Lease> held = pool.Take(Soon());
    ASSERT_TRUE(held.ok());
    absl::StatusOr<PipePool::Lease> late = pool.Take(absl::Now() + absl::Milliseconds(20));
    EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
    EXPECT_FALSE(pool.contended());
    held->Return();
  });
}

// A pipe closed dirty frees its slot: the waiter gets a new pipe.
TEST(PipePoolTest, ADiscardedPipeMakesRoomForANewOne) {
  PipePool pool(1, 1 << 16);
  bool got = false;
  RunInFiber([&] {
    absl::StatusOr<PipePool::Lease> held = pool.Take(Soon());
    ASSERT_TRUE(held.ok());
    const int old_fd = (**held).write_fd();
    WaitGroup done;
    done.Add(1);
    ASSERT_TRUE(FiberScheduler::Current()
                    ->Spawn([&] {
                      absl::StatusOr<PipePool::Lease> pipe = pool.Take(Soon());
                      ASSERT_TRUE(pipe.ok()) << pipe.status();
                      got = true;
                      pipe->Return();
                      done.Done();
                    })
                    .ok());
    FiberScheduler::Current()->Yield();
    ASSERT_EQ(::write(old_fd, "x", 1), 1);  // it holds a byte: never to be reused
    held->Close();
    done.Wait();
  });
  EXPECT_TRUE(got);
  EXPECT_EQ(pool.open(), 1u);
  EXPECT_EQ(pool.out(), 0u);
}

// A lease that ends without a word closes its pipe (it may hold bytes) and frees the
// slot; one moved from holds nothing.
TEST(PipePoolTest, ALeaseThatEndsClosesItsPipe) {
  PipePool pool(2, 1 << 16);
  RunInFiber([&] {
    {
      absl::StatusOr<PipePool::Lease> held = pool.Take(Soon());
      ASSERT_TRUE(held.ok());
      PipePool::Lease moved = *std::move(held);
      EXPECT_FALSE(*held);
      EXPECT_TRUE(moved);
      EXPECT_EQ(pool.out(), 1u);
    }
    EXPECT_EQ(pool.out(), 0u);
    EXPECT_EQ(pool.open(), 0u);
  });
}

// The budget binds users without CAP_SYS_RESOURCE: three quarters of
// fs.pipe-user-pages-soft, in pipes of the size asked for.
TEST(PipePoolTest, TheBudgetOfAnUnprivilegedUserIsFromItsPipePages) {
  EXPECT_EQ(PipeBudget(1 << 20, 777), ::geteuid() == 0 ? 777u : PipeBudget(1 << 20, 777));
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become an unprivileged user";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    const size_t budget = PipeBudget(1 << 20, 100000);
    ::_exit(::write(fds[1], &budget, sizeof(budget)) == sizeof(budget) ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  size_t budget = 0;
  ASSERT_EQ(::read(fds[0], &budget, sizeof(budget)), static_cast<ssize_t>(sizeof(budget)));
  ::close(fds[0]);
  ::close(fds[1]);
  FILE* f = std::fopen("/proc/sys/fs/pipe-user-pages-soft", "r");
  ASSERT_NE(f, nullptr);
  unsigned long pages = 0;
  ASSERT_EQ(std::fscanf(f, "%lu", &pages), 1);
  std::fclose(f);
  if (pages == 0) {
    EXPECT_EQ(budget, 100000u);
  } else {
    EXPECT_EQ(budget, std::max<size_t>(1, pages * 4096 / 4 * 3 / (1 << 20)));
  }
}

}  // namespace
}  // namespace ferry
