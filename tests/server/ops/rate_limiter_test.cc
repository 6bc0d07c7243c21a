#include "server/ops/rate_limiter.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

RateLimiter::Options Rates() {
  return {.total = {.per_second = 100, .burst = 100},
          .per_client = {.per_second = 10, .burst = 5},
          .max_wait = absl::Milliseconds(300),
          .max_clients = 4};
}

TEST(RateLimiterTest, ABurstGoesAtOnceThenRequestsWaitTheirTurnThenAreRefused) {
  RateLimiter limiter(Rates(), "registrations");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(*limiter.Admit("a", kStart), absl::ZeroDuration()) << i;
  // 10 a second: the next ones 100 ms apart, up to 300 ms ahead.
  EXPECT_EQ(*limiter.Admit("a", kStart), absl::Milliseconds(100));
  EXPECT_EQ(*limiter.Admit("a", kStart), absl::Milliseconds(200));
  EXPECT_EQ(*limiter.Admit("a", kStart), absl::Milliseconds(300));
  absl::StatusOr<absl::Duration> refused = limiter.Admit("a", kStart);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("registrations are over their rate"),
            std::string::npos);
  // A refusal takes no turn; another client has its own bucket.
  EXPECT_EQ(*limiter.Admit("a", kStart + absl::Milliseconds(100)), absl::Milliseconds(300));
  EXPECT_EQ(*limiter.Admit("b", kStart), absl::ZeroDuration());
  // Quiet for a while, the burst is back.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(*limiter.Admit("a", kStart + absl::Seconds(2)), absl::ZeroDuration()) << i;
  }
}

TEST(RateLimiterTest, TheTotalBoundsEveryClientTogether) {
  RateLimiter::Options rates = Rates();
  rates.max_clients = 1000;
  RateLimiter limiter(rates, "registrations");
  int admitted = 0;
  for (int client = 0; client < 200; ++client) {
    for (int i = 0; i < 5; ++i) admitted += limiter.Admit(absl::StrCat(client), kStart).ok();
  }
  // The total's burst of 100 and 300 ms of its 100 a second.
  EXPECT_EQ(admitted, 130);
}

TEST(RateLimiterTest, TrackedClientsAreBoundedAndIdleOnesLetGo) {
  RateLimiter limiter(Rates(), "registrations");
  for (int client = 0; client < 10; ++client)
    ASSERT_TRUE(limiter.Admit(absl::StrCat(client), kStart).ok());
  EXPECT_EQ(limiter.tracked_clients(), 4u);
  // Their buckets full again, the tracked ones make room for new ones.
  ASSERT_TRUE(limiter.Admit("new", kStart + absl::Seconds(1)).ok());
  EXPECT_EQ(limiter.tracked_clients(), 1u);
}

}  // namespace
}  // namespace ferry
