#include "server/base/clock.h"

#include "absl/time/clock.h"

namespace ferry {

namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

const Clock& Clock::Real() {
  static const RealClock clock;
  return clock;
}

}  // namespace ferry
