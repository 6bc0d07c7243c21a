#include "common/io/sync.h"

#include <string>
#include <thread>
#include <vector>

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
                 }).ok());
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

}  // namespace
}  // namespace ferry
