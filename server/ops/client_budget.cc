#include "server/ops/client_budget.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {

struct ClientBudget::Lease::State {
  uint64_t total = 0;
  uint64_t per_client = 0;
  std::string what;
  std::mutex mu;
  uint64_t used = 0;                                     // guarded by mu
  absl::flat_hash_map<std::string, uint64_t> by_client;  // guarded by mu; no zeros
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
    std::lock_guard<std::mutex> lock(state_->mu);
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
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->by_client.find(client);
  const uint64_t mine = it == state_->by_client.end() ? 0 : it->second;
  if (mine + units > state_->per_client) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server busy: client ", client, " holds ", mine, " ", state_->what, " and asks for ",
        units, " more; the limit per client is ", state_->per_client, "; retry later"));
  }
  if (state_->used + units > state_->total) {
    return absl::ResourceExhaustedError(absl::StrCat("server busy: ", state_->total, " ",
                                                     state_->what, " are held; retry later"));
  }
  if (units == 0) return Lease();
  state_->used += units;
  state_->by_client[client] = mine + units;
  return Lease(state_, client, units);
}

uint64_t ClientBudget::used() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->used;
}

uint64_t ClientBudget::used_by(const std::string& client) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->by_client.find(client);
  return it == state_->by_client.end() ? 0 : it->second;
}

}  // namespace ferry
