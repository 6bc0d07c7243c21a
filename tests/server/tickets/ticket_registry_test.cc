#include "server/tickets/ticket_registry.h"

#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace ferry {
namespace {

// A stream of `blocks` that expires `ttl` after now on `clock`.
std::shared_ptr<Stream> MakeStream(const std::string& client, size_t blocks,
                                   absl::Duration ttl = absl::Minutes(1),
                                   const Clock& clock = Clock::Real()) {
  auto s = std::make_shared<Stream>();
  s->app_id = "app";
  s->client = client;
  s->blocks.resize(blocks);
  s->expires = clock.Now() + ttl;
  return s;
}

TEST(TicketRegistryTest, RegisteredStreamsAreFoundUntilClosed) {
  TicketRegistry registry;
  auto ticket = registry.Register(MakeStream("a", 3));
  ASSERT_TRUE(ticket.ok());
  auto found = registry.Find(*ticket);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->blocks.size(), 3u);
  EXPECT_EQ(registry.blocks(), 3u);
  EXPECT_TRUE(registry.Close(*ticket));
  EXPECT_FALSE(registry.Close(*ticket));
  // One that expired was no longer open, swept or not.
  testing::FakeClock clock;
  TicketRegistry timed({}, clock);
  auto expiring = timed.Register(MakeStream("a", 1, absl::Seconds(1), clock));
  ASSERT_TRUE(expiring.ok());
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(timed.Find(*expiring).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE(timed.Close(*expiring));
  EXPECT_EQ(registry.Find(*ticket).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(registry.blocks(), 0u);
}

// A hand-over: the live streams go to another registry under their tickets, within its
// limits; a ticket registered there already is refused.
TEST(TicketRegistryTest, LiveStreamsAreAdoptedUnderTheirTickets) {
  testing::FakeClock clock;
  TicketRegistry old({}, clock);
  auto live = old.Register(MakeStream("a", 2, absl::Minutes(1), clock));
  ASSERT_TRUE(old.Register(MakeStream("a", 1, absl::Seconds(1), clock)).ok());
  ASSERT_TRUE(live.ok());
  clock.Advance(absl::Seconds(2));
  const auto handed = old.Live();
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(handed[0].first, *live);
  TicketRegistry next({.max_streams_per_client = 1}, clock);
  ASSERT_TRUE(next.Adopt(handed[0].first, handed[0].second).ok());
  auto found = next.Find(*live);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ((*found)->blocks.size(), 2u);
  EXPECT_EQ(next.Adopt(handed[0].first, MakeStream("b", 1, absl::Minutes(1), clock)).code(),
            absl::StatusCode::kAlreadyExists);
  Ticket other = *live;
  other[0] ^= 1;
  EXPECT_EQ(next.Adopt(other, MakeStream("a", 1, absl::Minutes(1), clock)).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(TicketRegistryTest, ExpiredStreamsDoNotCountAgainstTheLimit) {
  testing::FakeClock clock;
  TicketRegistry registry({.max_streams = 2}, clock);
  ASSERT_TRUE(registry.Register(MakeStream("a", 1, absl::Milliseconds(1), clock)).ok());
  ASSERT_TRUE(registry.Register(MakeStream("a", 1, absl::Milliseconds(1), clock)).ok());
  EXPECT_EQ(registry.size(), 2u);
  clock.Advance(absl::Milliseconds(5));
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_TRUE(registry.Register(MakeStream("a", 1, absl::Minutes(1), clock)).ok());
  EXPECT_TRUE(registry.Register(MakeStream("a", 1, absl::Minutes(1), clock)).ok());
  EXPECT_EQ(registry.Register(MakeStream("a", 1, absl::Minutes(1), clock)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(TicketRegistryTest, SweepLetsGoOfExpiredStreams) {
  testing::FakeClock clock;
  TicketRegistry registry({}, clock);
  auto stream = MakeStream("a", 4, absl::Milliseconds(1), clock);
  std::weak_ptr<Stream> watch = stream;
  ASSERT_TRUE(registry.Register(std::move(stream)).ok());
  registry.SweepExpired();
  EXPECT_FALSE(watch.expired());
  clock.Advance(absl::Seconds(1));
  registry.SweepExpired();
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(registry.blocks(), 0u);
}

TEST(TicketRegistryTest, PerClientAndBlockLimits) {
  TicketRegistry registry({.max_streams = 100, .max_streams_per_client = 2, .max_blocks = 10});
  ASSERT_TRUE(registry.Register(MakeStream("a", 1)).ok());
  ASSERT_TRUE(registry.Register(MakeStream("a", 1)).ok());
  auto third = registry.Register(MakeStream("a", 1));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("client a"), std::string::npos);
  EXPECT_TRUE(registry.Register(MakeStream("b", 8)).ok());
  auto over = registry.Register(MakeStream("c", 1));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("limit 10"), std::string::npos);
}

}  // namespace
}  // namespace ferry
