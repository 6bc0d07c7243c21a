#include "common/io/scheduler.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/check.h"
#include "common/io/sanitizer_switch.h"
#include "common/status_macros.h"

namespace ferry {

namespace ctx = boost::context::detail;

namespace {

thread_local FiberScheduler* current_scheduler = nullptr;

// user_data values that are not IoOp pointers (IoOps live at addresses >= 4096).
constexpr uint64_t kIgnoreTag = 0;  // cancel requests: their own result is not needed
constexpr uint64_t kWakeTag = 2;    // the cross-thread wake-up read on the eventfd
// An IoOp's linked timeout carries the op's address with the low bit set.
constexpr uint64_t kTimeoutBit = 1;

// liburing maps and unmaps ring memory with raw syscalls, which ThreadSanitizer does not
// intercept, so a new ring mapped where a destroyed one lived looks like memory another
// thread wrote without synchronisation. Each ring's teardown releases this object and
// each ring's setup acquires it, ordering the old ring's accesses before the new one's.
char ring_reuse_sync;

__kernel_timespec ToKernelTimespec(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const timespec ts = absl::ToTimespec(d);
  return __kernel_timespec{.tv_sec = ts.tv_sec, .tv_nsec = ts.tv_nsec};
}

}  // namespace

struct Fiber {
  enum class State { kReady, kRunning, kParked, kDone };

  FiberScheduler* scheduler = nullptr;
  ctx::fcontext_t context = nullptr;
  FiberStack stack;
  absl::AnyInvocable<void()> fn;
  State state = State::kReady;
  bool detached = true;
  Fiber* joiner = nullptr;
  void* asan_fake_stack = nullptr;
  void* tsan_fiber = nullptr;
};

// Lets the fcontext entry point (a plain function) reach the scheduler's privates.
struct FiberEntryAccess {
  static void Entry(ctx::transfer_t transfer) noexcept {
    auto* fiber = static_cast<Fiber*>(transfer.data);
    FiberScheduler* s = fiber->scheduler;
    s->main_context_ = transfer.fctx;
    internal::AsanFinishSwitch(fiber->asan_fake_stack, &s->main_stack_bottom_,
                               &s->main_stack_bytes_);
    fiber->fn();
    // Destroy the closure here, on the fiber's stack, so what it owns (descriptors,
    // buffers) is released before the fiber is reported finished.
    fiber->fn = nullptr;
    fiber->state = Fiber::State::kDone;
    s->SwitchToScheduler(fiber, /*finishing=*/true);
    FERRY_CHECK(false && "a finished fiber was resumed");
  }
};

// ----------------------------------------------------------------------------- IoOp

IoOp::~IoOp() { FERRY_CHECK(pending_ == 0 && "IoOp destroyed while in flight"); }

int IoOp::Result() const {
  if (has_deadline_ && res_ == -ECANCELED && timeout_res_ == -ETIME) return -ETIMEDOUT;
  return res_;
}

int IoOp::Wait() {
  if (pending_ > 0) {
    FERRY_CHECK(scheduler_ != nullptr && scheduler_ == FiberScheduler::Current());
    Fiber* self = scheduler_->current_fiber();
    FERRY_CHECK(self != nullptr && "IoOp::Wait outside a fiber");
    waiter_ = self;
    while (pending_ > 0) scheduler_->Park();
    waiter_ = nullptr;
  }
  return Result();
}

void IoOp::Cancel() {
  if (pending_ == 0) return;
  io_uring_sqe* sqe = scheduler_->GetSqe();
  io_uring_prep_cancel64(sqe, reinterpret_cast<uint64_t>(this), 0);
  io_uring_sqe_set_data64(sqe, kIgnoreTag);
}

// ------------------------------------------------------------------------ JoinHandle

JoinHandle::JoinHandle(JoinHandle&& other) noexcept
    : fiber_(std::exchange(other.fiber_, nullptr)) {}

JoinHandle& JoinHandle::operator=(JoinHandle&& other) noexcept {
  if (this != &other) {
    Detach();
    fiber_ = std::exchange(other.fiber_, nullptr);
  }
  return *this;
}

JoinHandle::~JoinHandle() { Detach(); }

bool JoinHandle::done() const { return fiber_ != nullptr && fiber_->state == Fiber::State::kDone; }

void JoinHandle::Join() {
  FERRY_CHECK(fiber_ != nullptr);
  FiberScheduler* s = fiber_->scheduler;
  if (fiber_->state != Fiber::State::kDone) {
    FERRY_CHECK(s == FiberScheduler::Current() && s->current_fiber() != nullptr);
    FERRY_CHECK(fiber_->joiner == nullptr && "a fiber can be joined once");
    fiber_->joiner = s->current_fiber();
    while (fiber_->state != Fiber::State::kDone) s->Park();
  }
  FiberScheduler::DeleteFiber(std::exchange(fiber_, nullptr));
}

void JoinHandle::Detach() {
  if (fiber_ == nullptr) return;
  if (fiber_->state == Fiber::State::kDone) {
    FiberScheduler::DeleteFiber(fiber_);
  } else {
    fiber_->detached = true;
  }
  fiber_ = nullptr;
}

// -------------------------------------------------------------------- FiberScheduler

FiberScheduler::FiberScheduler(const SchedulerOptions& options)
    : options_(options), stacks_(options.stack_bytes, options.max_cached_stacks) {}

absl::StatusOr<std::unique_ptr<FiberScheduler>> FiberScheduler::Create(
    const SchedulerOptions& options) {
  std::unique_ptr<FiberScheduler> s(new FiberScheduler(options));
  FERRY_RETURN_IF_ERROR(s->Init());
  return s;
}

absl::Status FiberScheduler::Init() {
  unsigned flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
  if (options_.idle_poll > absl::ZeroDuration()) {
    // A polling loop must see completions without sleeping in the kernel: the kernel
    // then leaves their final step (task work) for the next io_uring_enter instead of
    // interrupting this thread, and raises IORING_SQ_TASKRUN to say one is due.
    flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  }
  auto init = [&] {
    io_uring_params params{};
    params.flags = flags;
    params.cq_entries = options_.cq_entries;
    return io_uring_queue_init_params(options_.sq_entries, &ring_, &params);
  };
  int res = init();
  if (res == -EINVAL) {
    // Kernels before 5.18 lack IORING_SETUP_SUBMIT_ALL; it only makes a failed SQE
    // not stop the rest of the batch, which the loop does not rely on.
    flags &= ~IORING_SETUP_SUBMIT_ALL;
    res = init();
  }
  if (res < 0) {
    return absl::ErrnoToStatus(
        -res, absl::StrCat("io_uring_queue_init(", options_.sq_entries, " entries)"));
  }
  ring_ready_ = true;
  internal::TsanAcquire(&ring_reuse_sync);
  if (options_.max_bounded_workers > 0 || options_.max_unbounded_workers > 0) {
    unsigned workers[2] = {options_.max_bounded_workers, options_.max_unbounded_workers};
    res = io_uring_register_iowq_max_workers(&ring_, workers);
    if (res < 0) return absl::ErrnoToStatus(-res, "io_uring_register_iowq_max_workers");
  }
  // A blocking eventfd: io_uring parks the read on the eventfd's poll queue, whereas a
  // non-blocking one would make the read fail with -EAGAIN.
  wake_fd_.Reset(::eventfd(0, EFD_CLOEXEC));
  if (!wake_fd_.valid()) return absl::ErrnoToStatus(errno, "eventfd for scheduler wake-ups");
  return absl::OkStatus();
}

FiberScheduler::~FiberScheduler() {
  FERRY_CHECK(live_fibers_ == 0 && "destroying a FiberScheduler with live fibers");
  if (ring_ready_) {
    internal::TsanRelease(&ring_reuse_sync);
    io_uring_queue_exit(&ring_);
  }
}

FiberScheduler* FiberScheduler::Current() { return current_scheduler; }

bool FiberScheduler::InFiber() {
  return current_scheduler != nullptr && current_scheduler->current_fiber_ != nullptr;
}

absl::StatusOr<Fiber*> FiberScheduler::NewFiber(absl::AnyInvocable<void()> fn, bool detached) {
  FERRY_ASSIGN_OR_RETURN(FiberStack stack, stacks_.Take());
  auto* fiber = new Fiber;
  fiber->scheduler = this;
  fiber->stack = std::move(stack);
  fiber->fn = std::move(fn);
  fiber->detached = detached;
  fiber->context =
      ctx::make_fcontext(fiber->stack.top(), fiber->stack.usable_bytes(), &FiberEntryAccess::Entry);
  fiber->tsan_fiber = internal::TsanCreateFiber();
  ++live_fibers_;
  ready_.push_back(fiber);
  return fiber;
}

absl::Status FiberScheduler::Spawn(absl::AnyInvocable<void()> fn) {
  return NewFiber(std::move(fn), /*detached=*/true).status();
}

absl::StatusOr<JoinHandle> FiberScheduler::SpawnJoinable(absl::AnyInvocable<void()> fn) {
  FERRY_ASSIGN_OR_RETURN(Fiber * fiber, NewFiber(std::move(fn), /*detached=*/false));
  return JoinHandle(fiber);
}

void FiberScheduler::DeleteFiber(Fiber* fiber) {
  internal::TsanDestroyFiber(fiber->tsan_fiber);
  delete fiber;
}

void FiberScheduler::Post(absl::AnyInvocable<void()> fn) {
  {
    absl::MutexLock lock(&posted_mu_);
    posted_.push_back(std::move(fn));
  }
  posted_pending_.store(true, std::memory_order_release);
  // From the loop's own thread (a fiber handing a lock to another of its fibers) the loop
  // is awake and sees the flag before it sleeps: no eventfd write. Otherwise one write
  // per sleep is enough: the flag is cleared when the read completes.
  if (current_scheduler == this) return;
  if (!wake_pending_.exchange(true, std::memory_order_acq_rel)) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  }
}

void FiberScheduler::Stop() {
  stop_requested_.store(true, std::memory_order_release);
  Post([] {});
}

void FiberScheduler::Run() { Loop(/*until_stopped=*/false); }
void FiberScheduler::RunUntilStopped() { Loop(/*until_stopped=*/true); }

void FiberScheduler::Loop(bool until_stopped) {
  FERRY_CHECK(!running_ && current_scheduler == nullptr);
  running_ = true;
  current_scheduler = this;
  // The thread that runs the loop, not the one that created the scheduler, is where
  // fibers switch back to.
  tsan_main_fiber_ = internal::TsanCurrentFiber();
  for (;;) {
    // The stop request is read before the posted work is taken, so work posted before
    // Stop() (which posts too) runs, as a fiber that sees the scheduler stopping.
    const bool stop = stop_requested_.load(std::memory_order_acquire);
    TakePosted();
    if (!stopping_ && stop) BeginStop();
    RunReadyFibers();
    if (live_fibers_ == 0 && (stopping_ || !until_stopped)) break;
    ArmWake();
    // Work posted from this thread meanwhile wrote no eventfd: it must not be slept on.
    const bool idle =
        ready_.empty() && yielded_.empty() && !posted_pending_.load(std::memory_order_acquire);
    if (idle && options_.idle_poll > absl::ZeroDuration()) {
      Submit(/*wait=*/false);
      PollIdle();
      if (io_uring_cq_ready(&ring_) == 0) Submit(/*wait=*/true);
    } else {
      Submit(/*wait=*/idle);
    }
    Reap();
  }
  DisarmWake();
  current_scheduler = nullptr;
  running_ = false;
}

absl::Duration FiberScheduler::PollBudget() const {
  // Unsubmitted entries (other fibers of this turn parked on them) count as work: they
  // go to the kernel only when the polling fiber parks and the loop submits.
  if (options_.idle_poll <= absl::ZeroDuration() || stopping_ || !ready_.empty() ||
      !yielded_.empty() || io_uring_sq_ready(&ring_) != 0 || io_uring_cq_ready(&ring_) != 0 ||
      TaskRunDue() || posted_pending_.load(std::memory_order_relaxed)) {
    return absl::ZeroDuration();
  }
  return options_.idle_poll;
}

bool FiberScheduler::TaskRunDue() const {
  return (IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0;
}

void FiberScheduler::PollIdle() {
  const absl::Time until = absl::Now() + options_.idle_poll;
  for (int i = 0; io_uring_cq_ready(&ring_) == 0; ++i) {
    if (TaskRunDue()) io_uring_get_events(&ring_);
    // The clock is read every 64 turns; a turn without task work is a few loads.
    if ((i & 63) == 63 && absl::Now() >= until) return;
  }
}

void FiberScheduler::TakePosted() {
  // Checked every turn, so the common case (nothing posted) takes no lock.
  if (!posted_pending_.exchange(false, std::memory_order_acq_rel)) return;
  std::vector<absl::AnyInvocable<void()>> posted;
  {
    absl::MutexLock lock(&posted_mu_);
    posted.swap(posted_);
  }
  for (auto& fn : posted) {
    // Without a stack (mmap failed) the work cannot run: it is dropped, and destroying
    // the closure releases what it owns (a handed-off connection is closed, which its
    // peer sees as a reset) rather than taking the whole process down.
    (void)Spawn(std::move(fn));
  }
}

void FiberScheduler::BeginStop() {
  stopping_ = true;
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
  io_uring_sqe_set_data64(sqe, kIgnoreTag);
}

void FiberScheduler::CancelOpsOn(int fd) {
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(sqe, kIgnoreTag);
}

void FiberScheduler::RunReadyFibers() {
  // Each fiber that yielded gets one more turn; fibers woken meanwhile run before the
  // next of those turns, so a request that arrives while bulk senders take turns waits
  // for the turn running now, not for all of theirs. Bounded, so that fibers waking
  // each other cannot keep the loop from submitting.
  running_batch_.swap(yielded_);
  size_t next = 0;
  for (size_t budget = 2 * (live_fibers_ + 1); budget > 0; --budget) {
    Fiber* fiber;
    if (!ready_.empty()) {
      fiber = ready_.front();
      ready_.pop_front();
    } else if (next < running_batch_.size()) {
      fiber = running_batch_[next++];
    } else {
      break;
    }
    Resume(fiber);
  }
  // Turns the budget left over go first in the next pass.
  yielded_.insert(yielded_.begin(), running_batch_.begin() + static_cast<ptrdiff_t>(next),
                  running_batch_.end());
  running_batch_.clear();
}

void FiberScheduler::Resume(Fiber* fiber) {
  fiber->state = Fiber::State::kRunning;
  current_fiber_ = fiber;
  void* fake_stack = nullptr;
  internal::AsanStartSwitch(&fake_stack, fiber->stack.bottom(), fiber->stack.usable_bytes());
  internal::TsanSwitchToFiber(fiber->tsan_fiber);
  ctx::transfer_t t = ctx::jump_fcontext(fiber->context, fiber);
  internal::AsanFinishSwitch(fake_stack, nullptr, nullptr);
  fiber->context = t.fctx;
  current_fiber_ = nullptr;
  if (fiber->state == Fiber::State::kDone) Finish(fiber);
}

void FiberScheduler::SwitchToScheduler(Fiber* fiber, bool finishing) {
  // A finishing fiber passes no fake-stack slot, so ASan frees its fake stack.
  internal::AsanStartSwitch(finishing ? nullptr : &fiber->asan_fake_stack, main_stack_bottom_,
                            main_stack_bytes_);
  internal::TsanSwitchToFiber(tsan_main_fiber_);
  ctx::transfer_t t = ctx::jump_fcontext(main_context_, nullptr);
  main_context_ = t.fctx;
  internal::AsanFinishSwitch(fiber->asan_fake_stack, &main_stack_bottom_, &main_stack_bytes_);
}

void FiberScheduler::Finish(Fiber* fiber) {
  --live_fibers_;
  stacks_.Give(std::move(fiber->stack));
  if (fiber->detached) {
    DeleteFiber(fiber);
  } else if (fiber->joiner != nullptr) {
    Wake(fiber->joiner);
  }
}

void FiberScheduler::Park() {
  Fiber* self = current_fiber_;
  FERRY_CHECK(self != nullptr && "Park() outside a fiber");
  self->state = Fiber::State::kParked;
  SwitchToScheduler(self, /*finishing=*/false);
}

void FiberScheduler::Wake(Fiber* fiber) {
  if (fiber->state != Fiber::State::kParked) return;
  fiber->state = Fiber::State::kReady;
  ready_.push_back(fiber);
}

void FiberScheduler::Yield() {
  Fiber* self = current_fiber_;
  FERRY_CHECK(self != nullptr && "Yield() outside a fiber");
  // What the fibers of this pass prepared goes to the kernel (a receive armed now sees
  // a request that arrives during the next turn), and the completions that arrived
  // while this fiber ran wake their fibers: they run before the next turn of a fiber
  // that yielded because it has had its turn (a bulk sender), so a request that has
  // just arrived is not kept behind every bulk sender of the thread.
  if (io_uring_sq_ready(&ring_) != 0) Submit(/*wait=*/false);
  Reap();
  self->state = Fiber::State::kReady;
  yielded_.push_back(self);
  SwitchToScheduler(self, /*finishing=*/false);
}

void FiberScheduler::ArmWake() {
  if (wake_armed_) return;
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_read(sqe, wake_fd_.get(), &wake_value_, sizeof(wake_value_), 0);
  io_uring_sqe_set_data64(sqe, kWakeTag);
  wake_armed_ = true;
}

void FiberScheduler::DisarmWake() {
  if (!wake_armed_) return;
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_cancel64(sqe, kWakeTag, 0);
  io_uring_sqe_set_data64(sqe, kIgnoreTag);
  // The read owns wake_value_ until its completion arrives; wait for it (bounded: a
  // cancelled poll-armed read completes at once).
  while (wake_armed_) {
    Submit(/*wait=*/true);
    Reap();
  }
}

io_uring_sqe* FiberScheduler::GetSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    // Full submission queue: hand what is queued to the kernel and take a fresh slot.
    Submit(/*wait=*/false);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void FiberScheduler::ReserveSqes(unsigned count) {
  FERRY_CHECK(count <= options_.sq_entries);
  if (io_uring_sq_space_left(&ring_) < count) Submit(/*wait=*/false);
}

void FiberScheduler::Submit(bool wait) {
  const int res = wait ? io_uring_submit_and_wait(&ring_, 1) : io_uring_submit(&ring_);
  if (res >= 0 || res == -EINTR) return;
  if (res == -EBUSY || res == -EAGAIN) {
    // The completion queue is backed up (or the kernel is short of memory): reaping
    // makes room, and the unsubmitted entries stay queued for the next submit.
    Reap();
    return;
  }
  FERRY_CHECK(false && "io_uring_submit failed");
}

void FiberScheduler::Reap() {
  // With COOP_TASKRUN, completions whose task work is pending reach the queue only
  // when this thread enters the kernel; a loop that never waits must do so here.
  if (TaskRunDue()) io_uring_get_events(&ring_);
  unsigned head;
  unsigned count = 0;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++count;
    const uint64_t data = cqe->user_data;
    if (data == kIgnoreTag) continue;
    if (data == kWakeTag) {
      wake_armed_ = false;
      wake_pending_.store(false, std::memory_order_release);
      continue;
    }
    auto* op = reinterpret_cast<IoOp*>(data & ~kTimeoutBit);
    if ((data & kTimeoutBit) != 0) {
      op->timeout_res_ = cqe->res;
    } else {
      op->res_ = cqe->res;
    }
    if (--op->pending_ == 0 && op->waiter_ != nullptr) Wake(op->waiter_);
  }
  io_uring_cq_advance(&ring_, count);
}

io_uring_sqe* FiberScheduler::StartOp(IoOp& op, absl::Time deadline) {
  FERRY_CHECK(op.pending_ == 0 && "IoOp reused while in flight");
  op.scheduler_ = this;
  op.res_ = 0;
  op.timeout_res_ = 0;
  op.has_deadline_ = false;
  if (stopping_) {
    op.res_ = -ECANCELED;
    return nullptr;
  }
  if (deadline != absl::InfiniteFuture()) ReserveSqes(2);
  return GetSqe();
}

void FiberScheduler::CommitOp(IoOp& op, io_uring_sqe* sqe, unsigned sqe_flags,
                              absl::Time deadline) {
  io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(&op));
  op.pending_ = 1;
  if (deadline == absl::InfiniteFuture()) {
    io_uring_sqe_set_flags(sqe, sqe_flags);
    return;
  }
  // The linked timeout follows its op in the same chain; if the op itself links on to
  // a next op, the chain continues after the timeout.
  io_uring_sqe_set_flags(sqe, sqe_flags | IOSQE_IO_LINK);
  op.has_deadline_ = true;
  op.timeout_ = ToKernelTimespec(deadline - absl::Now());
  io_uring_sqe* timeout_sqe = GetSqe();
  io_uring_prep_link_timeout(timeout_sqe, &op.timeout_, 0);
  io_uring_sqe_set_data64(timeout_sqe, reinterpret_cast<uint64_t>(&op) | kTimeoutBit);
  io_uring_sqe_set_flags(timeout_sqe, sqe_flags & IOSQE_IO_LINK);
  op.pending_ = 2;
}

}  // namespace ferry
