#include "common/io/sync.h"

#include <algorithm>
#include <cerrno>

#include "common/check.h"
#include "common/io/ops.h"

namespace ferry {

namespace {

void WakeAll(std::vector<Fiber*>& waiters) {
  if (waiters.empty()) return;
  FiberScheduler* s = FiberScheduler::Current();
  FERRY_CHECK(s != nullptr);
  for (Fiber* f : waiters) s->Wake(f);
  waiters.clear();
}

void Remove(std::vector<Fiber*>& waiters, Fiber* fiber) {
  waiters.erase(std::remove(waiters.begin(), waiters.end(), fiber), waiters.end());
}

}  // namespace

Event::~Event() { FERRY_CHECK(waiters_.empty() && "Event destroyed with waiters"); }

void Event::Set() {
  set_ = true;
  WakeAll(waiters_);
}

int Event::Wait(absl::Time deadline) {
  if (set_) return 0;
  FiberScheduler* s = FiberScheduler::Current();
  FERRY_CHECK(s != nullptr && s->current_fiber() != nullptr && "Event::Wait outside a fiber");
  Fiber* self = s->current_fiber();
  // Every wait carries a timer, even an unbounded one: it is what a stopping
  // scheduler cancels to wake this fiber.
  IoOp timer;
  PrepSleep(timer,
            deadline == absl::InfiniteFuture() ? absl::Hours(24 * 365) : deadline - absl::Now());
  waiters_.push_back(self);
  // Woken by Set() or by the timer's completion, whichever comes first.
  timer.NotifyOnCompletion(self);
  while (!set_ && timer.in_flight()) s->Park();
  Remove(waiters_, self);
  if (timer.in_flight()) timer.Cancel();
  const int timer_res = timer.Wait();
  if (set_) return 0;
  return timer_res == -ETIME ? -ETIMEDOUT : -ECANCELED;
}

void WaitGroup::Done() {
  FERRY_CHECK(count_ > 0 && "WaitGroup::Done below zero");
  if (--count_ == 0) WakeAll(waiters_);
}

void WaitGroup::Wait() {
  if (count_ == 0) return;
  FiberScheduler* s = FiberScheduler::Current();
  FERRY_CHECK(s != nullptr && s->current_fiber() != nullptr && "WaitGroup::Wait outside a fiber");
  Fiber* self = s->current_fiber();
  waiters_.push_back(self);
  while (count_ > 0) s->Park();
  Remove(waiters_, self);
}

}  // namespace ferry
