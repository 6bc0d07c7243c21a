// A fiber that overflows its stack faults on the guard page instead of corrupting the
// memory below it.
#include <cstring>

#include "common/io/fiber_stack.h"
#include "common/io/scheduler.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

// Not a tail call and not foldable: every level keeps a live 1 KiB frame.
__attribute__((noinline)) int Recurse(int depth) {
  volatile char frame[1024];
  std::memset(const_cast<char*>(frame), depth & 0xff, sizeof(frame));
  if (depth == 0) return frame[0];
  return Recurse(depth - 1) + frame[depth % sizeof(frame)];
}

TEST(FiberStackTest, GuardPageIsBelowTheUsableStack) {
  auto stack = FiberStack::Allocate(64 * 1024);
  ASSERT_TRUE(stack.ok());
  EXPECT_EQ(static_cast<const char*>(stack->guard_begin()) + stack->guard_bytes(),
            static_cast<const char*>(stack->bottom()));
  EXPECT_EQ(static_cast<char*>(stack->bottom()) + stack->usable_bytes(),
            static_cast<char*>(stack->top()));
  // The whole usable range is writable.
  std::memset(stack->bottom(), 0xab, stack->usable_bytes());
}

TEST(FiberStackDeathTest, OverflowLandsOnTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SchedulerOptions options;
        options.stack_bytes = 64 * 1024;
        auto s = FiberScheduler::Create(options);
        if (!s.ok()) std::abort();
        // 1 KiB frames, 1,000 deep: far past a 64 KiB stack.
        (void)(*s)->Spawn([] { (void)Recurse(1000); });
        (*s)->Run();
        // Reaching here means the overflow went unnoticed.
        std::fprintf(stderr, "no fault\n");
        std::exit(0);
      },
      "");
}

TEST(FiberStackTest, DeepButFittingRecursionRuns) {
  SchedulerOptions options;
  options.stack_bytes = 256 * 1024;
  auto s = FiberScheduler::Create(options);
  ASSERT_TRUE(s.ok());
  int result = -1;
  ASSERT_TRUE((*s)->Spawn([&] { result = Recurse(100); }).ok());
  (*s)->Run();
  EXPECT_GE(result, 0);
}

}  // namespace
}  // namespace ferry
