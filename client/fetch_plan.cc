#include "client/fetch_plan.h"

#include <algorithm>
#include <map>

#include "absl/random/distributions.h"

namespace ferry {

const std::string& LocationForAttempt(const BlockLocation& location, int failed_attempts) {
  const size_t choices = 1 + location.replicas.size();
  const size_t pick = static_cast<size_t>(std::max(failed_attempts, 0)) % choices;
  return pick == 0 ? location.server : location.replicas[pick - 1];
}

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

std::vector<PlannedStream> PlanStreams(const std::vector<BlockLocation>& blocks,
                                       const std::vector<size_t>& pending,
                                       const std::vector<std::string>& server_of, size_t max_blocks,
                                       uint64_t max_partitions) {
  std::map<std::string, std::vector<size_t>> by_server;
  for (size_t i : pending) by_server[server_of[i]].push_back(i);
  std::vector<PlannedStream> streams;
  for (auto& [server, indexes] : by_server) {
    streams.push_back({server, {}});
    uint64_t partitions = 0;
    for (size_t i : indexes) {
      const BlockId& b = blocks[i].block;
      const uint64_t mine =
          static_cast<uint64_t>(std::max<int64_t>(0, int64_t{b.end_reduce_id} - b.start_reduce_id));
      if (!streams.back().indexes.empty() &&
          (streams.back().indexes.size() >= max_blocks || partitions + mine > max_partitions)) {
        streams.push_back({server, {}});
        partitions = 0;
      }
      streams.back().indexes.push_back(i);
      partitions += mine;
    }
  }
  return streams;
}

absl::Duration Backoff::Next(absl::BitGenRef random) {
  const absl::Duration pause = next_ * absl::Uniform(random, 0.5, 1.5);
  next_ = std::min(next_ * 2, max_);
  return pause;
}

}  // namespace ferry
