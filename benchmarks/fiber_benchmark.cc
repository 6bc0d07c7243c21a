// What do the fiber runtime's basic steps cost? A fiber switch round trip (fiber ->
// scheduler -> fiber), a raw Boost.Context jump round trip as its floor, spawn + join,
// and an io_uring no-op through the scheduler (prepare, submit, park, reap, resume),
// single and batched.
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "common/io/fiber_stack.h"
#include "common/io/ops.h"
#include "common/io/scheduler.h"

namespace ferry {
namespace {

namespace ctx = boost::context::detail;

// Runs `body` inside one fiber of a fresh scheduler (benchmark loops live there).
template <typename Body>
void InFiber(Body body) {
  auto s = FiberScheduler::Create();
  FERRY_CHECK(s.ok());
  FERRY_CHECK((*s)->Spawn(std::move(body)).ok());
  (*s)->Run();
}

void BM_RawContextJumpRoundTrip(benchmark::State& state) {
  auto stack = FiberStack::Allocate(64 * 1024);
  FERRY_CHECK(stack.ok());
  // The callee jumps straight back every time it is entered.
  auto bounce = [](ctx::transfer_t t) {
    for (;;) t = ctx::jump_fcontext(t.fctx, nullptr);
  };
  ctx::fcontext_t callee = ctx::make_fcontext(stack->top(), stack->usable_bytes(), bounce);
  for (auto _ : state) {
    callee = ctx::jump_fcontext(callee, nullptr).fctx;
  }
}
BENCHMARK(BM_RawContextJumpRoundTrip);

void BM_FiberYieldRoundTrip(benchmark::State& state) {
  InFiber([&state] {
    FiberScheduler* s = FiberScheduler::Current();
    for (auto _ : state) s->Yield();
  });
}
BENCHMARK(BM_FiberYieldRoundTrip);

void BM_FiberSpawnJoin(benchmark::State& state) {
  InFiber([&state] {
    FiberScheduler* s = FiberScheduler::Current();
    for (auto _ : state) {
      auto handle = s->SpawnJoinable([] {});
      handle->Join();
    }
  });
}
BENCHMARK(BM_FiberSpawnJoin);

// The machine's floor for anything that enters the kernel: one trivial syscall.
void BM_GetppidSyscall(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(::syscall(SYS_getppid));
}
BENCHMARK(BM_GetppidSyscall);

// The floor under BM_NopRoundTrip: one no-op through a bare ring, no fibers.
void BM_RawUringNop(benchmark::State& state) {
  io_uring ring;
  FERRY_CHECK(io_uring_queue_init(64, &ring, 0) == 0);
  for (auto _ : state) {
    io_uring_prep_nop(io_uring_get_sqe(&ring));
    io_uring_submit_and_wait(&ring, 1);
    io_uring_cqe* cqe;
    FERRY_CHECK(io_uring_peek_cqe(&ring, &cqe) == 0);
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_queue_exit(&ring);
}
BENCHMARK(BM_RawUringNop);

void BM_NopRoundTrip(benchmark::State& state) {
  InFiber([&state] {
    for (auto _ : state) {
      benchmark::DoNotOptimize(Nop());
    }
  });
}
BENCHMARK(BM_NopRoundTrip);

// `batch` no-ops prepared back to back go to the kernel in one submission.
void BM_NopBatched(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  InFiber([&state, batch] {
    std::vector<IoOp> ops(static_cast<size_t>(batch));
    for (auto _ : state) {
      for (auto& op : ops) PrepNop(op);
      for (auto& op : ops) benchmark::DoNotOptimize(op.Wait());
    }
    state.SetItemsProcessed(state.iterations() * batch);
  });
}
BENCHMARK(BM_NopBatched)->Arg(8)->Arg(32)->Arg(128);

}  // namespace
}  // namespace ferry
