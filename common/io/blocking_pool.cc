#include "common/io/blocking_pool.h"

#include "common/option_check.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/io/ops.h"
#include "common/unique_fd.h"

namespace ferry {

struct BlockingPool::Job {
  absl::AnyInvocable<void()> fn;
  // kRan once the job has run, kDropped when it never will; published (release) before
  // the eventfd is written and read (acquire) after it is, which orders the job's
  // writes before the waiter's reads in a way ThreadSanitizer sees too (it cannot see
  // through the kernel's eventfd).
  static constexpr int kRan = 1;
  static constexpr int kDropped = 2;
  std::atomic<int> outcome{0};
  // Set when the waiter has left (deadline, stop): a job not started yet never runs, so
  // work no one waits for does not hold a worker.
  std::atomic<bool> abandoned{false};
  uint64_t tenant = 0;
  UniqueFd done;

  void Signal(int result) {
    outcome.store(result, std::memory_order_release);
    const uint64_t one = 1;
    // An eventfd write of a counter far below its maximum cannot fail or block.
    (void)!::write(done.get(), &one, sizeof(one));
  }
};

namespace {
// The job this worker runs, while it runs.
thread_local const std::atomic<bool>* current_abandoned = nullptr;
}  // namespace

absl::Status BlockingPool::Options::Validate() const {
  if (max_queued < 1) return absl::InvalidArgumentError("a blocking pool must queue a job");
  return CheckRange("blocking-threads", threads, 1, 1024);
}

bool BlockingPool::Abandoned() {
  return current_abandoned != nullptr && current_abandoned->load(std::memory_order_relaxed);
}

BlockingPool::Order BlockingPool::TenantOrder(absl::string_view name) {
  return {.stream = 0, .offset = 0, .tenant = absl::HashOf(name) | 1};
}

size_t BlockingPool::TenantShare() const {
  if (options_.max_per_tenant > 0) return options_.max_per_tenant;
  return std::max<size_t>(options_.threads, 2) - 1;
}

BlockingPool::BlockingPool(const Options& options) : options_(options) {
  for (size_t i = 0; i < std::max<size_t>(options_.threads, 1); ++i) {
    threads_.emplace_back([this] { Work(); });
  }
}

BlockingPool::~BlockingPool() {
  std::map<Key, std::shared_ptr<Job>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
    for (auto& [id, tenant] : tenants_) {
      for (auto& [key, job] : tenant.parked) dropped.emplace(key, std::move(job));
    }
    tenants_.clear();
  }
  for (std::thread& t : threads_) t.join();
  for (const auto& [key, job] : dropped) job->Signal(Job::kDropped);
}

absl::Status BlockingPool::Run(absl::AnyInvocable<void()> fn, absl::Time deadline) {
  return Run(std::move(fn), deadline, Order());
}

absl::Status BlockingPool::Run(absl::AnyInvocable<void()> fn, absl::Time deadline, Order order) {
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  job->tenant = order.tenant;
  job->done = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!job->done.valid()) return absl::ErrnoToStatus(errno, "eventfd for a blocking job");
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("the blocking-work pool is stopping");
    if (queue_.size() + parked_ >= options_.max_queued) {
      return absl::ResourceExhaustedError(absl::StrCat("server busy: ", options_.max_queued,
                                                       " blocking jobs are waiting; retry later"));
    }
    const Key key{order.stream, order.offset, arrivals_++};
    if (order.tenant == 0) {
      queue_.emplace(key, job);
    } else if (Tenant& tenant = tenants_[order.tenant]; tenant.in_flight < TenantShare()) {
      ++tenant.in_flight;
      queue_.emplace(key, job);
    } else {
      tenant.parked.emplace_back(key, job);
      ++parked_;
    }
  }
  uint64_t value = 0;
  // The job holds its own reference to the eventfd, so a worker signalling after this
  // wait has ended writes to a live descriptor.
  const ssize_t n = Read(job->done.get(), &value, sizeof(value), -1, deadline);
  if (n != sizeof(value)) job->abandoned.store(true, std::memory_order_relaxed);
  if (n == -ETIMEDOUT) {
    return absl::DeadlineExceededError("a blocking job (file I/O) did not finish in time");
  }
  if (n == -ECANCELED) return absl::CancelledError("the server is stopping");
  if (n != sizeof(value)) {
    return absl::ErrnoToStatus(n < 0 ? static_cast<int>(-n) : EIO, "waiting for a blocking job");
  }
  if (job->outcome.load(std::memory_order_acquire) != Job::kRan) {
    return absl::CancelledError("the blocking-work pool stopped first");
  }
  return absl::OkStatus();
}

size_t BlockingPool::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size() + parked_;
}

void BlockingPool::TenantDoneLocked(uint64_t tenant_id) {
  if (tenant_id == 0) return;
  auto it = tenants_.find(tenant_id);
  if (it == tenants_.end()) return;
  Tenant& tenant = it->second;
  --tenant.in_flight;
  if (!tenant.parked.empty()) {
    // Queued as if it came now: the sweep has passed where it stood.
    auto& [key, job] = tenant.parked.front();
    queue_.emplace(Key{std::get<0>(key), std::get<1>(key), arrivals_++}, std::move(job));
    tenant.parked.pop_front();
    --parked_;
    ++tenant.in_flight;
  }
  if (tenant.in_flight == 0) tenants_.erase(it);
}

void BlockingPool::Work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BlockingPool::HasWorkOrStops));
      if (stopping_) return;
      auto next = queue_.upper_bound(sweep_);
      if (next == queue_.end()) next = queue_.begin();
      sweep_ = next->first;
      job = std::move(next->second);
      queue_.erase(next);
    }
    const bool abandoned = job->abandoned.load(std::memory_order_relaxed);
    if (!abandoned) {
      current_abandoned = &job->abandoned;
      job->fn();
      current_abandoned = nullptr;
    }
    // What the job captured goes before the waiter hears, so that nothing it held
    // outlives the wait.
    job->fn = nullptr;
    {
      absl::MutexLock lock(&mu_);
      TenantDoneLocked(job->tenant);
    }
    job->Signal(abandoned ? Job::kDropped : Job::kRan);
  }
}

}  // namespace ferry
