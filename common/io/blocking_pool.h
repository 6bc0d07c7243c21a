// BlockingPool: a few threads for the blocking work a fiber must not do on its own
// thread: loading an index from a cold disk, opening files, fsyncing a state file,
// deleting directories. One such call on a fiber would stall every other connection of
// its thread for as long as the disk takes.
//
// A fiber hands a job over with Run() and waits for it on an io_uring read of an
// eventfd that the worker signals when the job is done, so its thread serves its other
// fibers meanwhile, and a deadline or a stopping scheduler ends the wait like any other
// I/O. The job owns what it touches (capture by value): a fiber whose wait ended early
// has left, and the job finishes unobserved if it had started; one still queued then
// never runs.
//
// A job may name its tenant (an application): a tenant's jobs queued and running
// together are at most max_per_tenant (fewer than the workers), and the rest of its jobs
// wait parked, in order, until one of its own is done; so no tenant's jobs can hold
// every worker, nor fill the queue ahead of another's. A running job can ask whether
// its waiter has left (Abandoned()) and stop early.
//
// Jobs waiting for a worker are bounded; past the bound Run() refuses at once. Workers
// take queued jobs in the order of their Order keys, sweeping upward from the last one
// taken and wrapping around (C-SCAN, the elevator a disk queue uses): a pool whose jobs
// read files, keyed by file and offset, reads each file front to back however its
// requests arrived, and jobs without a key run in the order they came.
// Thread-safe.
#ifndef FERRY_COMMON_IO_BLOCKING_POOL_H_
#define FERRY_COMMON_IO_BLOCKING_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ferry {

class BlockingPool {
 public:
  struct Options {
    size_t threads = 4;
    // Jobs waiting for a worker.
    size_t max_queued = 4096;
    // A tenant's jobs queued or running at once; 0: one fewer than the threads (at
    // least 1).
    size_t max_per_tenant = 0;

    // INVALID_ARGUMENT naming the flag of a field out of range.
    absl::Status Validate() const;
  };

  explicit BlockingPool(const Options& options);
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;
  // Lets the running jobs finish; queued ones do not run, and their waiters are told
  // so (CANCELLED).
  ~BlockingPool();

  // Where a job sits in the workers' sweep: a file and an offset in it, for jobs that
  // read one.
  struct Order {
    uint64_t stream;
    uint64_t offset;
    // Whose job it is (a hash of an application's id, say); 0: no one's, unbounded.
    uint64_t tenant = 0;
  };
  // A job of the tenant `name` (an application's id), in no particular order.
  static Order TenantOrder(absl::string_view name);

  // Runs `job` on a worker; the calling fiber waits until it has run. OK once it ran;
  // RESOURCE_EXHAUSTED when max_queued jobs are waiting already; DEADLINE_EXCEEDED
  // when `deadline` passes first and CANCELLED when the scheduler stops first (a job
  // already running finishes unobserved; a queued one is dropped). Call from a fiber.
  absl::Status Run(absl::AnyInvocable<void()> job, absl::Time deadline, Order order);
  absl::Status Run(absl::AnyInvocable<void()> job, absl::Time deadline);

  // Run() for a job with a result.
  template <typename T>
  absl::StatusOr<T> Call(absl::AnyInvocable<absl::StatusOr<T>()> fn, absl::Time deadline) {
    return Call<T>(std::move(fn), deadline, Order());
  }
  template <typename T>
  absl::StatusOr<T> Call(absl::AnyInvocable<absl::StatusOr<T>()> fn, absl::Time deadline,
                         Order order) {
    auto out = std::make_shared<absl::StatusOr<T>>(absl::UnknownError("not run"));
    absl::Status ran = Run([out, fn = std::move(fn)]() mutable { *out = fn(); }, deadline, order);
    if (!ran.ok()) return ran;
    return std::move(*out);
  }

  // Jobs waiting for a worker now (parked ones included).
  size_t queued() const;

  // On a worker, in a running job: whether the fiber that waits for it has left (its
  // deadline passed, or its scheduler stopped), so that a long job can stop early.
  static bool Abandoned();

 private:
  struct Job;
  // Order, then arrival: equal keys run first come, first served.
  using Key = std::tuple<uint64_t, uint64_t, uint64_t>;
  void Work();
  // A tenant's job is done (or dropped): the next of its parked jobs is queued.
  void TenantDoneLocked(uint64_t tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t TenantShare() const;

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  Key sweep_ ABSL_GUARDED_BY(mu_){};  // the last key taken
  uint64_t arrivals_ ABSL_GUARDED_BY(mu_) = 0;
  // Each tenant's jobs queued or running, and those parked behind them.
  struct Tenant {
    size_t in_flight = 0;
    std::deque<std::pair<Key, std::shared_ptr<Job>>> parked;
  };
  absl::flat_hash_map<uint64_t, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  size_t parked_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool HasWorkOrStops() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }
  std::vector<std::thread> threads_;
};

}  // namespace ferry

#endif  // FERRY_COMMON_IO_BLOCKING_POOL_H_
