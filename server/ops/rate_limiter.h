// RateLimiter: how often peers may do one costly thing (a registration that writes the
// state file), in all and per client address: each a rate with a burst (GCRA, the
// token bucket as one timestamp per key). A request over its rate is admitted later,
// in turn, when that is within max_wait of now: Admit() says how long to wait first;
// past max_wait it is refused as busy, and costs nothing.
//
// Memory is bounded: at most max_clients addresses are tracked; the idle ones (whose
// bucket is full again) are let go first, and past that, a new address is bounded by
// the total alone.
//
// Thread-safe.
#ifndef FERRY_SERVER_OPS_RATE_LIMITER_H_
#define FERRY_SERVER_OPS_RATE_LIMITER_H_

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ferry {

class RateLimiter {
 public:
  struct Rate {
    double per_second = 1;
    double burst = 1;  // admitted at once after a quiet spell
  };
  struct Options {
    Rate total;
    Rate per_client;
    absl::Duration max_wait = absl::Seconds(1);
    size_t max_clients = 4096;
  };
  // `what` names the requests in errors ("registrations that write the state file").
  RateLimiter(const Options& options, std::string what);

  // How long `client`'s request at `now` waits before it goes ahead (zero: at once), its
  // turn taken; RESOURCE_EXHAUSTED ("busy", retryable) when that would pass max_wait.
  absl::StatusOr<absl::Duration> Admit(const std::string& client, absl::Time now);

  size_t tracked_clients() const;

 private:
  // The time at which a request of `rate` whose bucket's "theoretical arrival time" is
  // `tat` may go (GCRA).
  static absl::Time AllowedAt(const Rate& rate, absl::Time tat);
  static absl::Duration Interval(const Rate& rate);

  const Options options_;
  const std::string what_;
  mutable absl::Mutex mu_;
  absl::Time total_tat_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::flat_hash_map<std::string, absl::Time> client_tat_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_SERVER_OPS_RATE_LIMITER_H_
