// FakeClock: a Clock that stands still until the test moves it. Thread-safe.
#ifndef FERRY_TESTS_TESTING_FAKE_CLOCK_H_
#define FERRY_TESTS_TESTING_FAKE_CLOCK_H_

#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/clock.h"

namespace ferry::testing {

class FakeClock final : public Clock {
 public:
  // Starts at the wall clock's now, so that times it gives compare with real ones.
  FakeClock() : now_(absl::Now()) {}

  absl::Time Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_FAKE_CLOCK_H_
