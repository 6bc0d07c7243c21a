// FiberScheduler: stackful fibers over one io_uring, on one thread.
//
// Threading model: a scheduler belongs to the thread that calls Run(); its fibers
// never migrate and nothing inside it takes a lock. Several schedulers on several
// threads run side by side, each with its own ring. The only members another thread
// may call are Post() and Stop().
//
// A turn of the loop: spawn what other threads posted, run every fiber that is ready
// (each runs until it parks on I/O, yields or finishes), then one io_uring_submit for
// everything those fibers prepared, waiting in the kernel only when no fiber is ready,
// and finally reap the completions in one batch and make their fibers ready. Woken
// fibers run before fibers that yielded: a fiber that yields (a bulk sender whose turn
// is up) submits and reaps first, and what that woke runs before the next yielded
// fiber's turn. An idle
// scheduler sleeps in io_uring_enter; with SchedulerOptions::idle_poll it first polls
// for up to that long, and never otherwise spins.
//
// Fibers are stackful: each runs on an mmap'd stack with a guard page (see
// fiber_stack.h) and is switched with Boost.Context's fcontext (a few ns, no syscall).
// Fiber functions must not throw: an exception escaping one terminates the process.
//
// Stopping: Stop() makes the scheduler cancel every operation in flight
// (IORING_ASYNC_CANCEL_ANY) and fail every later one with -ECANCELED, so parked fibers
// wake, unwind and run their destructors (closing their descriptors). Run() returns
// once every fiber has finished; fibers are never abandoned mid-stack.
#ifndef FERRY_COMMON_IO_SCHEDULER_H_
#define FERRY_COMMON_IO_SCHEDULER_H_

#include <liburing.h>
#include <linux/time_types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/io/fiber_stack.h"
#include "common/unique_fd.h"

namespace ferry {

class FiberScheduler;
struct Fiber;

// One io_uring operation, owned by the caller, waited on by one fiber.
//
// An IoOp must outlive its completions: a fiber that prepared one must Wait() for it
// before the IoOp is destroyed, even after Cancel() (the kernel may still write the
// buffers it was given until the completion arrives). The blocking ops in ops.h keep
// their IoOp on the fiber's stack, which is safe because the fiber cannot return
// before the completion arrives.
class IoOp {
 public:
  IoOp() = default;
  IoOp(const IoOp&) = delete;
  IoOp& operator=(const IoOp&) = delete;
  ~IoOp();

  // Suspends the calling fiber until every completion of this op has arrived. Returns
  // the kernel's result: >= 0 on success, -errno on failure; -ETIMEDOUT when the
  // op's deadline fired; -ECANCELED when it was cancelled or the scheduler is
  // stopping. Returns at once if the op already completed. Call from a fiber of the
  // scheduler that prepared the op.
  [[nodiscard]] int Wait();

  // True while the kernel still owes a completion.
  bool in_flight() const { return pending_ > 0; }

  // Asks the kernel to cancel the op. It completes anyway (with -ECANCELED, or with
  // its real result if it finished first); Wait() for it. No-op when not in flight.
  void Cancel();

  // For the io layer: storage for a timespec the kernel reads at submission (a
  // timer's duration). Not for applications.
  __kernel_timespec& timeout_storage() { return timeout_; }
  // For the io layer: wake `fiber` when the op completes, without waiting on it now
  // (a fiber that waits for "this op or something else").
  void NotifyOnCompletion(Fiber* fiber) { waiter_ = fiber; }

 private:
  friend class FiberScheduler;

  int Result() const;

  FiberScheduler* scheduler_ = nullptr;
  Fiber* waiter_ = nullptr;
  int32_t res_ = 0;
  int32_t timeout_res_ = 0;
  uint8_t pending_ = 0;
  bool has_deadline_ = false;
  // The linked timeout's duration; the kernel reads it at submission.
  __kernel_timespec timeout_{};
};

// A handle to a fiber spawned with SpawnJoinable(). Move-only. Destroying it without
// Join() detaches the fiber. Use on the scheduler's own thread only.
class JoinHandle {
 public:
  JoinHandle() = default;
  JoinHandle(JoinHandle&& other) noexcept;
  JoinHandle& operator=(JoinHandle&& other) noexcept;
  JoinHandle(const JoinHandle&) = delete;
  JoinHandle& operator=(const JoinHandle&) = delete;
  ~JoinHandle();

  // Suspends the calling fiber until the joined fiber has finished. Joining a fiber
  // that already finished returns at once. The handle is empty afterwards.
  void Join();
  // True once the fiber has finished.
  bool done() const;
  bool joinable() const { return fiber_ != nullptr; }

 private:
  friend class FiberScheduler;
  explicit JoinHandle(Fiber* fiber) : fiber_(fiber) {}
  void Detach();

  Fiber* fiber_ = nullptr;
};

struct SchedulerOptions {
  // Submission queue entries; completion queue entries (room for many parked
  // fibers' completions at once).
  unsigned sq_entries = 256;
  unsigned cq_entries = 4096;
  // Usable bytes per fiber stack (plus one guard page), and how many freed stacks to
  // keep mapped for reuse.
  size_t stack_bytes = 128 * 1024;
  size_t max_cached_stacks = 256;
  // Caps on the ring's io-wq workers (bounded: regular files; unbounded: sockets,
  // splice). 0 keeps the kernel's default.
  unsigned max_bounded_workers = 0;
  unsigned max_unbounded_workers = 0;
  // How long a loop with no runnable fiber polls its completion queue before it
  // sleeps in the kernel (0: sleep at once). Polling saves the sleep and wakeup per
  // request on a request/response connection, at up to this much CPU each time the
  // thread runs dry.
  absl::Duration idle_poll = absl::ZeroDuration();
};

class FiberScheduler {
 public:
  static absl::StatusOr<std::unique_ptr<FiberScheduler>> Create(
      const SchedulerOptions& options = {});
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;
  // CHECKs that no fiber is alive (Run() until they have finished first).
  ~FiberScheduler();

  // Creates a fiber that runs `fn` from the next turn on. Call on the scheduler's
  // thread (from a fiber, or before Run()). Fails only when no stack can be mapped.
  absl::Status Spawn(absl::AnyInvocable<void()> fn);
  absl::StatusOr<JoinHandle> SpawnJoinable(absl::AnyInvocable<void()> fn);

  // Runs fibers on the calling thread until none is left (or, after Stop(), until
  // every fiber has unwound).
  void Run();
  // Like Run(), but keeps waiting for Post()ed work while no fiber is alive; returns
  // only after Stop() once every fiber has unwound.
  void RunUntilStopped();

  // Thread-safe. Runs `fn` in a new fiber on this scheduler's thread, waking the
  // scheduler if it sleeps (from that thread itself, without a syscall). Work posted
  // after Run() returned waits for the next Run() (or is destroyed with the scheduler);
  // work that gets no fiber stack is destroyed unrun.
  void Post(absl::AnyInvocable<void()> fn);
  // Thread-safe. Begins stopping (see the header comment) and wakes the scheduler.
  // Work Post()ed before Stop() still runs, in a fiber whose ops fail with -ECANCELED.
  void Stop();

  // The scheduler running on this thread, or nullptr outside Run().
  static FiberScheduler* Current();
  // True inside a fiber of this thread's running scheduler.
  static bool InFiber();

  // Submits what is prepared, makes the fibers whose I/O has completed ready, and lets
  // them and the other fibers that yielded run before the calling fiber runs again.
  void Yield();

  bool stopping() const { return stopping_; }
  // Cancels every op waiting on `fd` (they complete with -ECANCELED, or their own result
  // if it came first), leaving the descriptor as it is: a server wakes a connection
  // that waits for its peer without ending it. Call on this scheduler's thread.
  void CancelOpsOn(int fd);
  // How long the calling fiber may poll a descriptor itself instead of parking: the
  // scheduler's idle_poll when no other fiber is ready, no completion or posted work
  // waits, and the scheduler is not stopping; zero otherwise. (Parking would only
  // make the loop poll its queue for that long; a fiber that polls its own socket
  // sees data without the completion's round through the kernel's task work.)
  absl::Duration PollBudget() const;
  size_t live_fibers() const { return live_fibers_; }
  io_uring* ring() { return &ring_; }
  const SchedulerOptions& options() const { return options_; }

  // --- For the io layer (ops.h, sync.h); not for applications. ---

  // Begins an op: returns an SQE for it (reserving a second one for the linked
  // timeout when `deadline` is finite), or nullptr when the scheduler is stopping, in
  // which case `op` is already complete with -ECANCELED.
  io_uring_sqe* StartOp(IoOp& op, absl::Time deadline);
  // Finishes what StartOp began, after the caller's io_uring_prep_*(sqe, ...).
  void CommitOp(IoOp& op, io_uring_sqe* sqe, unsigned sqe_flags, absl::Time deadline);
  // Makes room for `count` SQEs that must go in one submission (a linked chain).
  void ReserveSqes(unsigned count);
  // Suspends the calling fiber until Wake(it).
  void Park();
  // Makes a parked fiber ready; a fiber that is not parked is left alone.
  void Wake(Fiber* fiber);
  // The fiber running now, or nullptr on the scheduler's own stack.
  Fiber* current_fiber() const { return current_fiber_; }

 private:
  friend struct FiberEntryAccess;
  friend class IoOp;
  friend class JoinHandle;
  FiberScheduler(const SchedulerOptions& options);

  absl::Status Init();
  absl::StatusOr<Fiber*> NewFiber(absl::AnyInvocable<void()> fn, bool detached);
  void Loop(bool until_stopped);
  // Polls the completion queue for up to options_.idle_poll before the loop sleeps.
  void PollIdle();
  // True when the kernel holds completions (COOP_TASKRUN task work) for this thread.
  bool TaskRunDue() const;
  void TakePosted();
  void BeginStop();
  void RunReadyFibers();
  void Resume(Fiber* fiber);
  void SwitchToScheduler(Fiber* fiber, bool finishing);
  void Finish(Fiber* fiber);
  void ArmWake();
  void DisarmWake();
  void Submit(bool wait);
  void Reap();
  io_uring_sqe* GetSqe();
  static void DeleteFiber(Fiber* fiber);

  SchedulerOptions options_;
  io_uring ring_{};
  bool ring_ready_ = false;
  StackPool stacks_;

  std::deque<Fiber*> ready_;     // woken or new: they run first
  std::vector<Fiber*> yielded_;  // yielded: one more turn each per pass
  std::vector<Fiber*> running_batch_;
  Fiber* current_fiber_ = nullptr;
  size_t live_fibers_ = 0;
  bool running_ = false;
  bool stopping_ = false;

  // The scheduler's own context while a fiber runs, and (under ASan) its stack.
  void* main_context_ = nullptr;
  const void* main_stack_bottom_ = nullptr;
  size_t main_stack_bytes_ = 0;
  void* tsan_main_fiber_ = nullptr;

  // Cross-thread wake-up: an eventfd with one read always in flight.
  UniqueFd wake_fd_;
  uint64_t wake_value_ = 0;
  bool wake_armed_ = false;
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> posted_pending_{false};
  absl::Mutex posted_mu_;
  std::vector<absl::AnyInvocable<void()>> posted_ ABSL_GUARDED_BY(posted_mu_);
};

}  // namespace ferry

#endif  // FERRY_COMMON_IO_SCHEDULER_H_
