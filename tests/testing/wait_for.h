// WaitFor: waits, bounded, for a condition that only polling can observe (another
// process's descriptors or log, a server's counters read from outside its threads).
// Checks every 10 ms until `timeout`; returns whether `done` held.
#ifndef FERRY_TESTS_TESTING_WAIT_FOR_H_
#define FERRY_TESTS_TESTING_WAIT_FOR_H_

#include "absl/functional/function_ref.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ferry::testing {

inline bool WaitFor(absl::FunctionRef<bool()> done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_WAIT_FOR_H_
