#include "server/ops/client_budget.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace ferry {

struct ClientBudget::Lease::State {
  uint64_t total = 0;
  uint64_t per_client = 0;
  std::string what;
  absl::Mutex mu;
  uint64_t used ABSL_GUARDED_BY(mu) = 0;
  absl::flat_hash_map<std::string, uint64_t> by_client ABSL_GUARDED_BY(mu);  // no zeros

  // Takes `units` more for `client`, or says which bound they would pass.
  absl::Status Take(const std::string& client, uint64_t units) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = by_client.find(client);
    const uint64_t mine = it == by_client.end() ? 0 : it->second;
    if (mine + units > per_client) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server busy: client ", client, " holds ", mine, " ", what, " and asks for ",
                       units, " more; the limit per client is ", per_client, "; retry later"));
    }
    if (used + units > total) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server busy: ", total, " ", what, " are held; retry later"));
    }
    if (units == 0) return absl::OkStatus();
    used += units;
    by_client[client] = mine + units;
    return absl::OkStatus();
  }
};

ClientBudget::Lease& ClientBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::move(other.state_);
    client_ = std::move(other.client_);
    units_ = other.units_;
    other.units_ = 0;
  }
  return *this;
}

void ClientBudget::Lease::Release() {
  if (state_ == nullptr) return;
  {
    absl::MutexLock lock(&state_->mu);
    state_->used -= units_;
    auto it = state_->by_client.find(client_);
    it->second -= units_;
    if (it->second == 0) state_->by_client.erase(it);
  }
  state_ = nullptr;
  units_ = 0;
}

ClientBudget::ClientBudget(uint64_t total, uint64_t per_client, std::string what)
    : state_(std::make_shared<Lease::State>()) {
  state_->total = total;
  state_->per_client = per_client;
  state_->what = std::move(what);
}

absl::StatusOr<ClientBudget::Lease> ClientBudget::Acquire(const std::string& client,
                                                          uint64_t units) {
  absl::MutexLock lock(&state_->mu);
  FERRY_RETURN_IF_ERROR(state_->Take(client, units));
  if (units == 0) return Lease();
  return Lease(state_, client, units);
}

absl::Status ClientBudget::Resize(Lease* lease, const std::string& client, uint64_t units) {
  if (lease->units_ == units) return absl::OkStatus();
  if (units < lease->units_) {
    if (units == 0) {
      lease->Release();
      return absl::OkStatus();
    }
    absl::MutexLock lock(&state_->mu);
    const uint64_t freed = lease->units_ - units;
    state_->used -= freed;
    state_->by_client[lease->client_] -= freed;
    lease->units_ = units;
    return absl::OkStatus();
  }
  absl::MutexLock lock(&state_->mu);
  FERRY_RETURN_IF_ERROR(state_->Take(client, units - lease->units_));
  if (lease->state_ == nullptr) {
    lease->state_ = state_;
    lease->client_ = client;
  }
  lease->units_ = units;
  return absl::OkStatus();
}

uint64_t ClientBudget::used() const {
  absl::MutexLock lock(&state_->mu);
  return state_->used;
}

uint64_t ClientBudget::used_by(const std::string& client) const {
  absl::MutexLock lock(&state_->mu);
  auto it = state_->by_client.find(client);
  return it == state_->by_client.end() ? 0 : it->second;
}

}  // namespace ferry
