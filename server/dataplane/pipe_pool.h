// PipePool: one data-plane thread's splice pipes, bounded by the pipe budget of the
// user the server runs as.
//
// The kernel charges every pipe's capacity to its user: past fs.pipe-user-pages-soft
// (16,384 pages, 64 MiB) a user without CAP_SYS_RESOURCE gets pipes of 8 KiB, which
// F_SETPIPE_SZ cannot grow, and splicing through those takes 128x the calls per byte of
// a 1 MiB pipe. So the pipes are a pool sized from that budget (PipeBudget), split
// between the threads: a segment's transfer takes one and gives it back empty; a pipe an
// error left holding bytes is closed instead (Discard), never reused. A sender that finds
// every pipe out waits for one, first come first served, and the wait is counted (and so
// is a sender that gave up waiting and copied instead: CountFallback). A pipe
// the kernel grants smaller than asked (another process of the same user spent the
// budget) is not used: the pool lowers its bound to the pipes it holds, and says so.
//
// Used from the fibers of one scheduler; the counters are read from any thread.
#ifndef FERRY_SERVER_DATAPLANE_PIPE_POOL_H_
#define FERRY_SERVER_DATAPLANE_PIPE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/pipe.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"

namespace ferry {

// How many pipes of `pipe_bytes` this process may hold before its user's pipe budget
// runs out: three quarters of fs.pipe-user-pages-soft (the rest is left to the user's
// other processes, such as a second server during a restart), or `unlimited` for a
// process with CAP_SYS_RESOURCE or CAP_SYS_ADMIN (which the budget does not bind) or
// where there is none. Never below 1.
size_t PipeBudget(size_t pipe_bytes, size_t unlimited);

// The pipe metric families (docs/operations.md), of every thread's pool summed.
#define FERRY_PIPE_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                              \
  GAUGE(max_pipes, "ferry_pipes_max",                                                            \
        "Splice pipes the data-plane threads may hold (--max-pipes, or the user's pipe "         \
        "budget).")                                                                              \
  GAUGE(open, "ferry_pipes_open", "Splice pipes open, in use or idle in the threads' pools.")    \
  GAUGE(out, "ferry_pipes_in_use", "Splice pipes a segment's transfer holds now.")               \
  COUNTER(waits, "ferry_pipe_waits_total",                                                       \
          "Segments that waited for a pipe: every one was in "                                   \
          "use.")                                                                                \
  COUNTER(fallbacks, "ferry_pipe_fallbacks_total",                                               \
          "Segments copied instead of spliced: no pipe came free within 2 ms.")                  \
  COUNTER(stalls, "ferry_pipe_stalls_total",                                                     \
          "Spliced chunks the socket did not take within 20 ms though its room said it would: "  \
          "the pipe was closed and the rest sent again from the file once the socket had room.") \
  COUNTER(undersized, "ferry_pipes_undersized_total",                                            \
          "Pipes the kernel granted smaller than --pipe-size (the user's pipe budget was "       \
          "spent); the pool then stops growing.")

class PipePool {
 public:
  PipePool(size_t max_pipes, size_t pipe_bytes) : pipe_bytes_(pipe_bytes) {
    stats_.max_pipes.Set(static_cast<int64_t>(max_pipes));
  }
  PipePool(const PipePool&) = delete;
  PipePool& operator=(const PipePool&) = delete;
  ~PipePool();

  // A pipe Take() gave, held until the lease ends: given back empty (Return()), or
  // closed (Close(), or the lease's end), since it may hold bytes. Move-only; a default
  // lease holds none.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), pipe_(std::move(other.pipe_)) {
      other.pipe_.reset();
    }
    Lease& operator=(Lease&& other) noexcept {
      if (this != &other) {
        Close();
        pool_ = std::exchange(other.pool_, nullptr);
        pipe_ = std::move(other.pipe_);
        other.pipe_.reset();
      }
      return *this;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Close(); }

    explicit operator bool() const { return pipe_.has_value(); }
    Pipe& operator*() { return *pipe_; }
    Pipe* operator->() { return &*pipe_; }
    // The pipe back to the pool, for another sender: it must be empty.
    void Return();
    // The pipe closed, its slot freed (it may hold bytes, which no one must read).
    void Close();

   private:
    friend class PipePool;
    Lease(PipePool* pool, Pipe pipe) : pool_(pool), pipe_(std::move(pipe)) {}
    PipePool* pool_ = nullptr;
    std::optional<Pipe> pipe_;
  };

  // An empty pipe of pipe_bytes, waiting until `deadline` while every pipe is out:
  // DEADLINE_EXCEEDED then, CANCELLED when the scheduler stops, or the error creating
  // one. Call from a fiber.
  absl::StatusOr<Lease> Take(absl::Time deadline);
  // Whether a sender is waiting for a pipe: one that holds an empty pipe gives it back.
  bool contended() const { return !waiters_.empty(); }
  // Counts a segment sent without a pipe, its wait for one having run out.
  void CountFallback() { stats_.fallbacks.Add(); }
  // Counts a pipe closed with bytes the socket did not take when its room said it would.
  void CountStall() { stats_.stalls.Add(); }

  size_t max_pipes() const { return static_cast<size_t>(stats_.max_pipes.value()); }
  size_t pipe_bytes() const { return pipe_bytes_; }
  // Pipes given out now, and open (given out or idle in the pool).
  size_t out() const { return static_cast<size_t>(stats_.out.value()); }
  size_t open() const { return static_cast<size_t>(stats_.open.value()); }
  // Takes that had to wait, and pipes refused as smaller than pipe_bytes, so far.
  uint64_t waits() const { return stats_.waits.value(); }
  uint64_t undersized() const { return stats_.undersized.value(); }
  uint64_t fallbacks() const { return stats_.fallbacks.value(); }
  uint64_t stalls() const { return stats_.stalls.value(); }

  // The pipe metric families (docs/operations.md) of a data plane's pools, summed.
  static void AppendMetrics(const std::vector<const PipePool*>& pools,
                            std::vector<MetricFamilySamples>* out);

 private:
  struct Waiter;
  absl::StatusOr<Pipe> TakePipe(absl::Time deadline);
  // A leased pipe back, empty; or closed (it may have held bytes).
  void Give(Pipe pipe);
  void Discard();
  // A pipe for a Take that found one free or room for one: nullopt when neither.
  std::optional<absl::StatusOr<Pipe>> TryTake();
  // Hands a freed slot (and `pipe`, when there is one) to the first waiter.
  void Handoff(std::optional<Pipe> pipe);

  const size_t pipe_bytes_;
  std::vector<Pipe> idle_;
  std::deque<Waiter*> waiters_;
  struct Stats {
    FERRY_STATS_FIELDS(FERRY_PIPE_STATS)
  };
  Stats stats_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_PIPE_POOL_H_
