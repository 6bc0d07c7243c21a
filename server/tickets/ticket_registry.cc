#include "server/tickets/ticket_registry.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/option_check.h"
#include "common/status_macros.h"

namespace ferry {

absl::Status TicketLimits::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckRange("max-open-streams", max_streams, 1, kMaxLimit));
  FERRY_RETURN_IF_ERROR(CheckRange("max-streams-per-client", max_streams_per_client, 1, kMaxLimit));
  return CheckRange("max-stream-blocks", max_blocks, 1, kMaxLimit);
}

std::string BlockName(const Stream& stream, const StreamBlock& block) {
  return absl::StrCat(BlockName(block.id), " of app ", stream.app_id);
}

size_t TicketRegistry::TicketHash::operator()(const Ticket& t) const {
  // The ticket is already uniformly random; any 8 of its bytes make a good hash.
  uint64_t h;
  std::memcpy(&h, t.data(), sizeof(h));
  return static_cast<size_t>(h);
}

absl::StatusOr<Ticket> TicketRegistry::Register(std::shared_ptr<const Stream> stream) {
  Ticket ticket;
  size_t filled = 0;
  while (filled < ticket.size()) {
    const ssize_t n = ::getrandom(ticket.data() + filled, ticket.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "getrandom for a stream ticket");
    filled += static_cast<size_t>(n);
  }
  absl::MutexLock lock(&mu_);
  SweepExpiredLocked(clock_.Now());
  FERRY_RETURN_IF_ERROR(InsertLocked(ticket, std::move(stream)));
  return ticket;
}

absl::Status TicketRegistry::Adopt(const Ticket& ticket, std::shared_ptr<const Stream> stream) {
  absl::MutexLock lock(&mu_);
  SweepExpiredLocked(clock_.Now());
  if (streams_.contains(ticket)) return absl::AlreadyExistsError("the ticket is registered here");
  return InsertLocked(ticket, std::move(stream));
}

std::vector<std::pair<Ticket, std::shared_ptr<const Stream>>> TicketRegistry::Live() const {
  const absl::Time now = clock_.Now();
  std::vector<std::pair<Ticket, std::shared_ptr<const Stream>>> live;
  absl::MutexLock lock(&mu_);
  for (const auto& [ticket, stream] : streams_) {
    if (stream->expires > now) live.emplace_back(ticket, stream);
  }
  return live;
}

absl::Status TicketRegistry::InsertLocked(const Ticket& ticket,
                                          std::shared_ptr<const Stream> stream) {
  if (streams_.size() >= limits_.max_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("server busy: ", limits_.max_streams, " streams open; retry later"));
  }
  auto client = per_client_.find(stream->client);
  if (client != per_client_.end() && client->second >= limits_.max_streams_per_client) {
    return absl::ResourceExhaustedError(absl::StrCat("server busy: client ", stream->client,
                                                     " has ", limits_.max_streams_per_client,
                                                     " streams open; close some or retry later"));
  }
  if (blocks_ + stream->blocks.size() > limits_.max_blocks) {
    return absl::ResourceExhaustedError(
        absl::StrCat("server busy: open streams hold ", blocks_, " blocks and this one adds ",
                     stream->blocks.size(), " (limit ", limits_.max_blocks, "); retry later"));
  }
  ++per_client_[stream->client];
  blocks_ += stream->blocks.size();
  by_expiry_.emplace(stream->expires, ticket);
  streams_.emplace(ticket, std::move(stream));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Stream>> TicketRegistry::Find(const Ticket& ticket) const {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(ticket);
  if (it == streams_.end()) {
    return absl::UnauthenticatedError("unknown, closed or expired stream ticket");
  }
  if (it->second->expires <= now) {
    return absl::UnauthenticatedError(absl::StrCat(
        "stream ticket expired at ", absl::FormatTime(it->second->expires, absl::UTCTimeZone())));
  }
  return it->second;
}

bool TicketRegistry::Close(const Ticket& ticket) {
  absl::MutexLock lock(&mu_);
  const auto it = streams_.find(ticket);
  if (it == streams_.end()) return false;
  // An expired stream was no longer open, whether or not a sweep has dropped it yet.
  const bool open = it->second->expires > clock_.Now();
  EraseLocked(ticket);
  return open;
}

void TicketRegistry::SweepExpired() {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  SweepExpiredLocked(now);
}

size_t TicketRegistry::size() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_.Now();
  size_t expired = 0;
  for (auto it = by_expiry_.begin(); it != by_expiry_.end() && it->first <= now; ++it) ++expired;
  return streams_.size() - expired;
}

uint64_t TicketRegistry::blocks() const {
  absl::MutexLock lock(&mu_);
  return blocks_;
}

void TicketRegistry::SweepExpiredLocked(absl::Time now) {
  // Soonest expiry first: each expired stream costs one step, a live one none.
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    EraseLocked(by_expiry_.begin()->second);
  }
}

void TicketRegistry::EraseLocked(const Ticket& ticket) {
  auto it = streams_.find(ticket);
  const Stream& stream = *it->second;
  by_expiry_.erase({stream.expires, ticket});
  auto client = per_client_.find(stream.client);
  if (--client->second == 0) per_client_.erase(client);
  blocks_ -= stream.blocks.size();
  streams_.erase(it);
}

void TicketRegistry::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  FERRY_APPEND_READS(FERRY_TICKET_STATS, out);
}

}  // namespace ferry
