// Fiber coordination on one FiberScheduler: Event and WaitGroup, and AwaitCall for work
// that completes on another thread.
//
// Event and WaitGroup park fibers, never threads, and are not thread-safe: use them
// from fibers of one scheduler. To signal from another thread, FiberScheduler::Post() a
// function that calls Set()/Done(), as AwaitCall does.
#ifndef FERRY_COMMON_IO_SYNC_H_
#define FERRY_COMMON_IO_SYNC_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/notification.h"
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

// Runs a call that completes on another thread (an RPC on gRPC's callback API) from a
// fiber, parking the fiber and not its thread, so the scheduler's other fibers go on.
// `start(done)` begins the call and returns a function that cancels it; the call must
// invoke `done(result)` exactly once, from any thread, cancelled or not. Returns the
// result. If the scheduler stops first, the call is cancelled and the thread waits for
// its `done` (prompt once cancelled; bounded by the call's own deadline), so nothing
// the call touches outlives the fiber's frame. At `deadline` the call is cancelled the
// same way (and its answer to that returned).
template <typename T>
T AwaitCall(FiberScheduler& scheduler,
            absl::FunctionRef<std::function<void()>(absl::AnyInvocable<void(T)>)> start,
            absl::Time deadline = absl::InfiniteFuture()) {
  struct State {
    std::optional<T> result;
    Event arrived;  // set on the scheduler's thread
    absl::Notification finished;
  };
  auto state = std::make_shared<State>();
  std::function<void()> cancel = start([state, &scheduler](T result) {
    state->result = std::move(result);
    // The fiber is still waiting on one of the two, so the scheduler is alive here.
    scheduler.Post([state] { state->arrived.Set(); });
    state->finished.Notify();
  });
  if (state->arrived.Wait(deadline) != 0) {
    cancel();
    state->finished.WaitForNotification();
  }
  return *std::move(state->result);
}

}  // namespace ferry

#endif  // FERRY_COMMON_IO_SYNC_H_
