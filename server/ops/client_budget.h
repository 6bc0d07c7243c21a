// ClientBudget: units of one resource that peers hold (chunks of open Spark streams,
// diagnoses running, request-buffer bytes), bounded in all and per client address, so
// that one client cannot take everything.
// A grant is a Lease that gives its units back when destroyed.
//
// Thread-safe. Leases may outlive the budget's owner: they share its state.
#ifndef FERRY_SERVER_OPS_CLIENT_BUDGET_H_
#define FERRY_SERVER_OPS_CLIENT_BUDGET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ferry {

class ClientBudget {
 public:
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }
    uint64_t units() const { return units_; }

   private:
    friend class ClientBudget;
    struct State;
    Lease(std::shared_ptr<State> state, std::string client, uint64_t units)
        : state_(std::move(state)), client_(std::move(client)), units_(units) {}
    void Release();
    std::shared_ptr<State> state_;
    std::string client_;
    uint64_t units_ = 0;
  };

  // `what` names the units in errors ("chunks of open streams").
  ClientBudget(uint64_t total, uint64_t per_client, std::string what);

  // `units` for `client`, or RESOURCE_EXHAUSTED ("server busy", retryable) naming the
  // bound that would be passed.
  absl::StatusOr<Lease> Acquire(const std::string& client, uint64_t units);
  // Makes *lease (empty, or one of this budget's for `client`) hold `units`: shrinking
  // always succeeds; growing is RESOURCE_EXHAUSTED as Acquire(), the lease unchanged.
  absl::Status Resize(Lease* lease, const std::string& client, uint64_t units);

  uint64_t used() const;
  uint64_t used_by(const std::string& client) const;

 private:
  std::shared_ptr<Lease::State> state_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_OPS_CLIENT_BUDGET_H_
