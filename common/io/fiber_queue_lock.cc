#include "common/io/fiber_queue_lock.h"

#include <functional>
#include <utility>

#include "common/io/scheduler.h"
#include "common/io/sync.h"

namespace ferry {

bool FiberQueueLock::TryLock() {
  absl::MutexLock lock(&mu_);
  if (held_) return false;
  held_ = true;
  return true;
}

bool FiberQueueLock::Lock(absl::Time deadline) {
  if (TryLock()) return true;
  FiberScheduler* scheduler = FiberScheduler::Current();
  return AwaitCall<bool>(
      *scheduler,
      [this](absl::AnyInvocable<void(bool)> done) -> std::function<void()> {
        uint64_t id = 0;
        {
          absl::MutexLock lock(&mu_);
          if (!held_) {
            // Freed meanwhile.
            held_ = true;
            id = 0;
          } else {
            id = ++next_id_;
            waiters_.push_back(Waiter{id, std::move(done)});
          }
        }
        if (id == 0) {
          done(true);
          return [] {};
        }
        // Cancelled (the deadline, or a stopping scheduler): out of the queue with
        // false, unless Unlock() handed it the lock first (then it holds it).
        return [this, id] {
          absl::AnyInvocable<void(bool)> cancelled;
          {
            absl::MutexLock lock(&mu_);
            for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
              if (it->id == id) {
                cancelled = std::move(it->done);
                waiters_.erase(it);
                break;
              }
            }
          }
          if (cancelled) cancelled(false);
        };
      },
      deadline);
}

void FiberQueueLock::Unlock() {
  absl::AnyInvocable<void(bool)> next;
  {
    absl::MutexLock lock(&mu_);
    if (waiters_.empty()) {
      held_ = false;
      return;
    }
    next = std::move(waiters_.front().done);
    waiters_.pop_front();
  }
  next(true);  // it holds the lock now
}

size_t FiberQueueLock::waiters() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

}  // namespace ferry
