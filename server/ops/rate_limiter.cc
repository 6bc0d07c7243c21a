#include "server/ops/rate_limiter.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace ferry {

RateLimiter::RateLimiter(const Options& options, std::string what)
    : options_(options), what_(std::move(what)) {}

absl::Duration RateLimiter::Interval(const Rate& rate) {
  return absl::Seconds(1) / rate.per_second;
}

absl::Time RateLimiter::AllowedAt(const Rate& rate, absl::Time tat) {
  // A bucket of `burst` tokens: the request may go `burst - 1` intervals before its
  // theoretical arrival time.
  return tat - (rate.burst - 1) * Interval(rate);
}

absl::StatusOr<absl::Duration> RateLimiter::Admit(const std::string& client, absl::Time now) {
  absl::MutexLock lock(&mu_);
  const absl::Time total_tat = std::max(total_tat_, now);
  auto it = client_tat_.find(client);
  if (it == client_tat_.end() && client_tat_.size() >= options_.max_clients) {
    // Forget the clients whose buckets have filled up again: they start afresh anyway.
    absl::erase_if(client_tat_, [now](const auto& entry) { return entry.second <= now; });
  }
  const bool tracked = it != client_tat_.end() || client_tat_.size() < options_.max_clients;
  const absl::Time client_tat = it != client_tat_.end() ? std::max(it->second, now) : now;
  absl::Time go = AllowedAt(options_.total, total_tat);
  if (tracked) go = std::max(go, AllowedAt(options_.per_client, client_tat));
  if (go - now > options_.max_wait) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server busy: ", what_, " are over their rate (", options_.per_client.per_second,
        " a second per client, ", options_.total.per_second, " in all); try again later"));
  }
  total_tat_ = total_tat + Interval(options_.total);
  if (tracked) client_tat_[client] = client_tat + Interval(options_.per_client);
  return std::max(go - now, absl::ZeroDuration());
}

size_t RateLimiter::tracked_clients() const {
  absl::MutexLock lock(&mu_);
  return client_tat_.size();
}

}  // namespace ferry
