// RunInFiber: runs `fn` as the one fiber of a fresh FiberScheduler on this thread and
// returns once every fiber it spawned has finished.
#ifndef FERRY_TESTS_TESTING_RUN_FIBER_H_
#define FERRY_TESTS_TESTING_RUN_FIBER_H_

#include <utility>

#include "absl/functional/any_invocable.h"
#include "common/check.h"
#include "common/io/scheduler.h"

namespace ferry::testing {

inline void RunInFiber(absl::AnyInvocable<void()> fn, const SchedulerOptions& options = {}) {
  auto scheduler = FiberScheduler::Create(options);
  FERRY_CHECK(scheduler.ok());
  FERRY_CHECK((*scheduler)->Spawn(std::move(fn)).ok());
  (*scheduler)->Run();
}

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_RUN_FIBER_H_
