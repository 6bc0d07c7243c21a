#include "server/dataplane/pipe_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <string>

#include <glog/logging.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/io/sync.h"

namespace ferry {

namespace {

constexpr int kCapSysAdmin = 21;
constexpr int kCapSysResource = 24;

// Whether the process's effective capabilities include `cap`.
bool HasCapability(int cap) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "CapEff:")) continue;
    uint64_t caps = 0;
    return absl::SimpleHexAtoi(absl::StripAsciiWhitespace(rest), &caps) && (caps >> cap & 1) != 0;
  }
  return false;
}

uint64_t ReadSysctl(const char* path) {
  std::ifstream in(path);
  uint64_t value = 0;
  return in >> value ? value : 0;
}

}  // namespace

size_t PipeBudget(size_t pipe_bytes, size_t unlimited) {
  if (HasCapability(kCapSysResource) || HasCapability(kCapSysAdmin)) return unlimited;
  uint64_t pages = ReadSysctl("/proc/sys/fs/pipe-user-pages-soft");
  const uint64_t hard = ReadSysctl("/proc/sys/fs/pipe-user-pages-hard");
  if (hard > 0) pages = pages == 0 ? hard : std::min(pages, hard);
  if (pages == 0) return unlimited;
  const uint64_t page_bytes = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t pipe = std::max<uint64_t>(pipe_bytes, page_bytes);
  const uint64_t pipes = pages * page_bytes / 4 * 3 / pipe;
  return static_cast<size_t>(std::clamp<uint64_t>(pipes, 1, unlimited));
}

struct PipePool::Waiter {
  Event ready;
  // Set by Handoff: a slot is this waiter's (counted in out_), with `pipe` or with room
  // to create one.
  bool granted = false;
  std::optional<Pipe> pipe;
};

PipePool::~PipePool() { FERRY_CHECK(waiters_.empty() && "PipePool destroyed with waiters"); }

std::optional<absl::StatusOr<Pipe>> PipePool::TryTake() {
  if (!idle_.empty()) {
    Pipe pipe = std::move(idle_.back());
    idle_.pop_back();
    out_.fetch_add(1, std::memory_order_relaxed);
    return std::optional<absl::StatusOr<Pipe>>(std::move(pipe));
  }
  if (open() >= max_pipes()) return std::nullopt;
  absl::StatusOr<Pipe> pipe = Pipe::Create(pipe_bytes_);
  if (pipe.ok() && pipe->capacity_bytes() < pipe_bytes_ && open() > 0) {
    // The user's budget is spent (by another of its processes: PipeBudget leaves room
    // for this one's): the pipes held are what this thread gets.
    undersized_.fetch_add(1, std::memory_order_relaxed);
    max_pipes_.store(open(), std::memory_order_relaxed);
    LOG(WARNING) << "a new pipe got " << pipe->capacity_bytes() << " bytes instead of "
                 << pipe_bytes_ << ": this user's pipe budget (fs.pipe-user-pages-soft) is "
                 << "spent; this thread now splices through the " << open() << " pipes it holds";
    return std::nullopt;
  }
  if (!pipe.ok()) return std::optional<absl::StatusOr<Pipe>>(pipe.status());
  // A pipe smaller than asked with none held is still better than none.
  if (pipe->capacity_bytes() < pipe_bytes_) undersized_.fetch_add(1, std::memory_order_relaxed);
  open_.fetch_add(1, std::memory_order_relaxed);
  out_.fetch_add(1, std::memory_order_relaxed);
  return std::optional<absl::StatusOr<Pipe>>(std::move(pipe));
}

void PipePool::Lease::Return() {
  if (!pipe_.has_value()) return;
  pool_->Give(*std::move(pipe_));
  pipe_.reset();
}

void PipePool::Lease::Close() {
  if (!pipe_.has_value()) return;
  pipe_.reset();
  pool_->Discard();
}

absl::StatusOr<PipePool::Lease> PipePool::Take(absl::Time deadline) {
  absl::StatusOr<Pipe> pipe = TakePipe(deadline);
  if (!pipe.ok()) return pipe.status();
  return Lease(this, *std::move(pipe));
}

absl::StatusOr<Pipe> PipePool::TakePipe(absl::Time deadline) {
  // A sender does not pass those already waiting.
  if (waiters_.empty()) {
    if (std::optional<absl::StatusOr<Pipe>> taken = TryTake()) return *std::move(taken);
  }
  waits_.fetch_add(1, std::memory_order_relaxed);
  Waiter self;
  waiters_.push_back(&self);
  const int res = self.ready.Wait(deadline);
  if (!self.granted) {
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &self));
    if (res == -ETIMEDOUT) {
      return absl::DeadlineExceededError(
          absl::StrCat("all ", max_pipes(), " splice pipes of this thread stayed in use"));
    }
    return absl::CancelledError("the server is stopping");
  }
  if (self.pipe.has_value()) return *std::move(self.pipe);
  absl::StatusOr<Pipe> pipe = Pipe::Create(pipe_bytes_);
  if (!pipe.ok()) Discard();
  return pipe;
}

void PipePool::Give(Pipe pipe) {
  out_.fetch_sub(1, std::memory_order_relaxed);
  if (!waiters_.empty()) {
    Handoff(std::move(pipe));
    return;
  }
  idle_.push_back(std::move(pipe));
}

void PipePool::Discard() {
  out_.fetch_sub(1, std::memory_order_relaxed);
  open_.fetch_sub(1, std::memory_order_relaxed);
  if (!waiters_.empty() && open() < max_pipes()) Handoff(std::nullopt);
}

void PipePool::Handoff(std::optional<Pipe> pipe) {
  Waiter* next = waiters_.front();
  waiters_.pop_front();
  out_.fetch_add(1, std::memory_order_relaxed);
  if (!pipe.has_value()) open_.fetch_add(1, std::memory_order_relaxed);
  next->granted = true;
  next->pipe = std::move(pipe);
  next->ready.Set();
}

void PipePool::AppendMetrics(const std::vector<const PipePool*>& pools,
                             std::vector<MetricFamilySamples>* out) {
  double max = 0, in_use = 0, open = 0, waits = 0, undersized = 0, fallbacks = 0, stalls = 0;
  for (const PipePool* pool : pools) {
    max += static_cast<double>(pool->max_pipes());
    in_use += static_cast<double>(pool->out());
    open += static_cast<double>(pool->open());
    waits += static_cast<double>(pool->waits());
    undersized += static_cast<double>(pool->undersized());
    fallbacks += static_cast<double>(pool->fallbacks());
    stalls += static_cast<double>(pool->stalls());
  }
  out->push_back(OneSample("ferry_pipes_max",
                           "Splice pipes the data-plane threads may hold (--max-pipes, or the "
                           "user's pipe budget).",
                           MetricKind::kGauge, max));
  out->push_back(OneSample("ferry_pipes_open",
                           "Splice pipes open, in use or idle in the threads' pools.",
                           MetricKind::kGauge, open));
  out->push_back(OneSample("ferry_pipes_in_use", "Splice pipes a segment's transfer holds now.",
                           MetricKind::kGauge, in_use));
  out->push_back(OneSample("ferry_pipe_waits_total",
                           "Segments that waited for a pipe: every one was in use.",
                           MetricKind::kCounter, waits));
  out->push_back(OneSample("ferry_pipe_fallbacks_total",
                           "Segments copied instead of spliced: no pipe came free within 2 ms.",
                           MetricKind::kCounter, fallbacks));
  out->push_back(OneSample(
      "ferry_pipe_stalls_total",
      "Spliced chunks the socket did not take within 20 ms though its room said it would: "
      "the pipe was closed and the rest sent again from the file once the socket had room.",
      MetricKind::kCounter, stalls));
  out->push_back(OneSample("ferry_pipes_undersized_total",
                           "Pipes the kernel granted smaller than --pipe-size (the user's pipe "
                           "budget was spent); the pool then stops growing.",
                           MetricKind::kCounter, undersized));
}

}  // namespace ferry
