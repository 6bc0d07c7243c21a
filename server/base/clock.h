// Clock: where a unit that keeps time reads it. Units take one (Clock::Real() in
// production) so that tests drive time with tests/testing/fake_clock.h instead of
// sleeping through it.
#ifndef FERRY_SERVER_BASE_CLOCK_H_
#define FERRY_SERVER_BASE_CLOCK_H_

#include "absl/time/time.h"

namespace ferry {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // absl::Now(). Thread-safe; lives for the whole process.
  static const Clock& Real();
};

}  // namespace ferry

#endif  // FERRY_SERVER_BASE_CLOCK_H_
