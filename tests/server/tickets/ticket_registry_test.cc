#include "server/tickets/ticket_registry.h"

#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace ferry {
namespace {

std::shared_ptr<Stream> MakeStream(const std::string& client, size_t blocks,
                                   absl::Duration ttl = absl::Minutes(1)) {
  auto s = std::make_shared<Stream>();
  s->app_id = "app";
  s->client = client;
  s->blocks.resize(blocks);
  s->expires = absl::Now() + ttl;
  return s;
}

TEST(TicketRegistryTest, RegisteredStreamsAreFoundUntilClosed) {
  TicketRegistry registry;
  auto ticket = registry.Register(MakeStream("a", 3));
  ASSERT_TRUE(ticket.ok());
  auto found = registry.Find(*ticket, absl::Now());
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->blocks.size(), 3u);
  EXPECT_EQ(registry.blocks(), 3u);
  EXPECT_TRUE(registry.Close(*ticket));
  EXPECT_FALSE(registry.Close(*ticket));
  EXPECT_EQ(registry.Find(*ticket, absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(registry.blocks(), 0u);
}

TEST(TicketRegistryTest, ExpiredStreamsDoNotCountAgainstTheLimit) {
  testing::FakeClock clock;
  TicketRegistry registry({.max_streams = 2}, clock);
  ASSERT_TRUE(registry.Register(MakeStream("a", 1, absl::Milliseconds(1))).ok());
  ASSERT_TRUE(registry.Register(MakeStream("a", 1, absl::Milliseconds(1))).ok());
  EXPECT_EQ(registry.size(), 2u);
  clock.Advance(absl::Milliseconds(5));
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_TRUE(registry.Register(MakeStream("a", 1)).ok());
  EXPECT_TRUE(registry.Register(MakeStream("a", 1)).ok());
  EXPECT_EQ(registry.Register(MakeStream("a", 1)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(TicketRegistryTest, SweepLetsGoOfExpiredStreams) {
  TicketRegistry registry;
  auto stream = MakeStream("a", 4, absl::Milliseconds(1));
  std::weak_ptr<Stream> watch = stream;
  ASSERT_TRUE(registry.Register(std::move(stream)).ok());
  registry.SweepExpired(absl::Now() + absl::Seconds(1));
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
