// Fiber coordination on one FiberScheduler: Event and WaitGroup.
//
// Both park fibers, never threads, and are not thread-safe: use them from fibers of
// one scheduler. To signal from another thread, FiberScheduler::Post() a function
// that calls Set()/Done().
#ifndef FERRY_COMMON_IO_SYNC_H_
#define FERRY_COMMON_IO_SYNC_H_

#include <cstddef>
#include <vector>

#include "absl/time/time.h"
#include "common/io/scheduler.h"

namespace ferry {

// A manual-reset event: Set() wakes every waiter and stays set until Reset().
class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  void Set();
  void Reset() { set_ = false; }
  bool is_set() const { return set_; }

  // Suspends the calling fiber until Set() or `deadline`. Returns 0 when set,
  // -ETIMEDOUT when the deadline passed first, -ECANCELED when the scheduler stops
  // first (a stopping scheduler wakes every waiter).
  [[nodiscard]] int Wait(absl::Time deadline = absl::InfiniteFuture());

 private:
  bool set_ = false;
  std::vector<Fiber*> waiters_;
};

// Counts outstanding work; Wait() returns when the count is back to zero.
class WaitGroup {
 public:
  void Add(size_t n = 1) { count_ += n; }
  // CHECKs that the count does not go below zero.
  void Done();
  size_t count() const { return count_; }
  // Suspends the calling fiber until the count is zero (returns at once if it is).
  // Unlike Event::Wait it does not give up when the scheduler stops: the fibers it
  // waits for unwind and call Done().
  void Wait();

 private:
  size_t count_ = 0;
  std::vector<Fiber*> waiters_;
};

}  // namespace ferry

#endif  // FERRY_COMMON_IO_SYNC_H_
