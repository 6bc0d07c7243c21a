// FiberQueueLock: a lock that fibers of any scheduler (any data-plane thread) take in
// the order they asked, waiting without blocking their thread: a waiter is parked as
// AwaitCall parks it, and Unlock() hands the lock to the first waiter directly. Held
// across I/O (an append to a merged partition), never under another lock.
#ifndef FERRY_COMMON_IO_FIBER_QUEUE_LOCK_H_
#define FERRY_COMMON_IO_FIBER_QUEUE_LOCK_H_

#include <cstdint>
#include <deque>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ferry {

class FiberQueueLock {
 public:
  FiberQueueLock() = default;
  FiberQueueLock(const FiberQueueLock&) = delete;
  FiberQueueLock& operator=(const FiberQueueLock&) = delete;

  // Takes the lock if no one holds it or waits for it.
  bool TryLock();
  // Takes the lock, waiting behind those who asked first, until `deadline`: false when
  // the deadline passes or the fiber's scheduler stops first. Call from a fiber.
  bool Lock(absl::Time deadline);
  // Gives the lock to the first waiter, or frees it.
  void Unlock();
  // Fibers waiting now.
  size_t waiters() const;

 private:
  struct Waiter {
    uint64_t id;
    absl::AnyInvocable<void(bool)> done;
  };
  mutable absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_COMMON_IO_FIBER_QUEUE_LOCK_H_
