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
  // Set by Handoff: a slot is this waiter's (counted in out()), with `pipe` or with room
  // to create one.
  bool granted = false;
  std::optional<Pipe> pipe;
};

PipePool::~PipePool() { FERRY_CHECK(waiters_.empty() && "PipePool destroyed with waiters"); }

std::optional<absl::StatusOr<Pipe>> PipePool::TryTake() {
  if (!idle_.empty()) {
    Pipe pipe = std::move(idle_.back());
    idle_.pop_back();
    stats_.out.Add();
    return std::optional<absl::StatusOr<Pipe>>(std::move(pipe));
  }
  if (open() >= max_pipes()) return std::nullopt;
  absl::StatusOr<Pipe> pipe = Pipe::Create(pipe_bytes_);
  if (pipe.ok() && pipe->capacity_bytes() < pipe_bytes_ && open() > 0) {
    // The user's budget is spent (by another of its processes: PipeBudget leaves room
    // for this one's): the pipes held are what this thread gets.
    stats_.undersized.Add();
    stats_.max_pipes.Set(static_cast<int64_t>(open()));
    LOG(WARNING) << "a new pipe got " << pipe->capacity_bytes() << " bytes instead of "
                 << pipe_bytes_ << ": this user's pipe budget (fs.pipe-user-pages-soft) is "
                 << "spent; this thread now splices through the " << open() << " pipes it holds";
    return std::nullopt;
  }
  if (!pipe.ok()) return std::optional<absl::StatusOr<Pipe>>(pipe.status());
  // A pipe smaller than asked with none held is still better than none.
  if (pipe->capacity_bytes() < pipe_bytes_) stats_.undersized.Add();
  stats_.open.Add();
  stats_.out.Add();
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
  stats_.waits.Add();
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
  stats_.out.Sub();
  if (!waiters_.empty()) {
    Handoff(std::move(pipe));
    return;
  }
  idle_.push_back(std::move(pipe));
}

void PipePool::Discard() {
  stats_.out.Sub();
  stats_.open.Sub();
  if (!waiters_.empty() && open() < max_pipes()) Handoff(std::nullopt);
}

void PipePool::Handoff(std::optional<Pipe> pipe) {
  Waiter* next = waiters_.front();
  waiters_.pop_front();
  stats_.out.Add();
  if (!pipe.has_value()) stats_.open.Add();
  next->granted = true;
  next->pipe = std::move(pipe);
  next->ready.Set();
}

void PipePool::AppendMetrics(const std::vector<const PipePool*>& pools,
                             std::vector<MetricFamilySamples>* out) {
  std::vector<const Stats*> stats;
  for (const PipePool* pool : pools) stats.push_back(&pool->stats_);
  FERRY_APPEND_STATS(FERRY_PIPE_STATS, stats, out);
}

}  // namespace ferry
