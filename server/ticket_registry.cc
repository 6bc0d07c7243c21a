#include "server/ticket_registry.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {

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
  const absl::Time now = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  SweepExpiredLocked(now);
  streams_[ticket] = std::move(stream);
  return ticket;
}

absl::StatusOr<std::shared_ptr<const Stream>> TicketRegistry::Find(const Ticket& ticket,
                                                                   absl::Time now) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(ticket);
  if (it == streams_.end()) {
    return absl::UnauthenticatedError("unknown or closed stream ticket");
  }
  if (it->second->expires <= now) {
    return absl::UnauthenticatedError(absl::StrCat(
        "stream ticket expired at ", absl::FormatTime(it->second->expires, absl::UTCTimeZone())));
  }
  return it->second;
}

bool TicketRegistry::Close(const Ticket& ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.erase(ticket) > 0;
}

size_t TicketRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

void TicketRegistry::SweepExpiredLocked(absl::Time now) {
  // At most once a second: a sweep walks every stream.
  if (now < next_sweep_) return;
  next_sweep_ = now + absl::Seconds(1);
  absl::erase_if(streams_, [now](const auto& entry) { return entry.second->expires <= now; });
}

}  // namespace ferry
