// ShuffleClient's round planning as functions: where each block is asked, how streams
// are split, what is retried, and the pauses between rounds.
#include "client/fetch_plan.h"

#include <random>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(FetchPlanTest, EachFailedAttemptAsksTheNextLocationAndWrapsAround) {
  const BlockLocation alone{"a:1", {0, 0, 0, 1}};
  EXPECT_EQ(LocationForAttempt(alone, 0), "a:1");
  EXPECT_EQ(LocationForAttempt(alone, 5), "a:1");
  const BlockLocation replicated{"a:1", {0, 0, 0, 1}, {"b:1", "c:1"}};
  EXPECT_EQ(LocationForAttempt(replicated, 0), "a:1");
  EXPECT_EQ(LocationForAttempt(replicated, 1), "b:1");
  EXPECT_EQ(LocationForAttempt(replicated, 2), "c:1");
  EXPECT_EQ(LocationForAttempt(replicated, 3), "a:1");
}

TEST(FetchPlanTest, OnlyFailuresAnotherRoundCanFixAreRetried) {
  EXPECT_TRUE(IsRetryable(absl::UnavailableError("gone")));
  EXPECT_TRUE(IsRetryable(absl::DeadlineExceededError("slow")));
  EXPECT_TRUE(IsRetryable(absl::ResourceExhaustedError("busy")));
  EXPECT_TRUE(IsRetryable(absl::AbortedError("cut")));
  EXPECT_FALSE(IsRetryable(absl::DataLossError("corrupt on disk")));
  EXPECT_FALSE(IsRetryable(absl::NotFoundError("no such block")));
  EXPECT_FALSE(IsRetryable(absl::InvalidArgumentError("bad request")));
  EXPECT_FALSE(IsRetryable(absl::UnauthenticatedError("no token")));
}

TEST(FetchPlanTest, StreamsGroupByServerKeepTheCallersOrderAndSplitAtTheLimits) {
  // Blocks 0-5 on two servers; block 4 covers 3 partitions.
  std::vector<BlockLocation> blocks;
  for (int i = 0; i < 6; ++i) {
    blocks.push_back({i % 2 == 0 ? "b:1" : "a:1", {0, i, 0, i == 4 ? 3 : 1}});
  }
  std::vector<std::string> server_of;
  for (const BlockLocation& b : blocks) server_of.push_back(b.server);
  // Block 3 is done already: not pending.
  const std::vector<size_t> pending = {5, 0, 1, 2, 4};
  const std::vector<PlannedStream> whole = PlanStreams(blocks, pending, server_of);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].server, "a:1");
  EXPECT_EQ(whole[0].indexes, (std::vector<size_t>{5, 1}));
  EXPECT_EQ(whole[1].server, "b:1");
  EXPECT_EQ(whole[1].indexes, (std::vector<size_t>{0, 2, 4}));
  // At most 2 blocks a stream: b's three blocks take two streams.
  const std::vector<PlannedStream> by_blocks = PlanStreams(blocks, pending, server_of, 2, 100);
  ASSERT_EQ(by_blocks.size(), 3u);
  EXPECT_EQ(by_blocks[1].indexes, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(by_blocks[2].indexes, (std::vector<size_t>{4}));
  // At most 3 partitions a stream: block 4's three start a stream of their own.
  const std::vector<PlannedStream> by_partitions = PlanStreams(blocks, pending, server_of, 100, 3);
  ASSERT_EQ(by_partitions.size(), 3u);
  EXPECT_EQ(by_partitions[1].indexes, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(by_partitions[2].indexes, (std::vector<size_t>{4}));
  // A block past the partition limit on its own still gets a stream (the server says
  // no, naming it), and a round with nothing pending plans nothing.
  const std::vector<PlannedStream> oversized = PlanStreams(blocks, {4}, server_of, 100, 1);
  ASSERT_EQ(oversized.size(), 1u);
  EXPECT_EQ(oversized[0].indexes, (std::vector<size_t>{4}));
  EXPECT_TRUE(PlanStreams(blocks, {}, server_of).empty());
}

TEST(FetchPlanTest, PausesDoubleUpToTheMaximumWithJitter) {
  std::mt19937 random(42);
  Backoff backoff(absl::Milliseconds(100), absl::Milliseconds(500));
  const absl::Duration bases[] = {absl::Milliseconds(100), absl::Milliseconds(200),
                                  absl::Milliseconds(400), absl::Milliseconds(500),
                                  absl::Milliseconds(500)};
  for (absl::Duration base : bases) {
    const absl::Duration pause = backoff.Next(random);
    EXPECT_GE(pause, base * 0.5);
    EXPECT_LT(pause, base * 1.5);
  }
  // Two clients turned away together draw different pauses.
  std::mt19937 other(7);
  Backoff a(absl::Seconds(1), absl::Seconds(1));
  Backoff b(absl::Seconds(1), absl::Seconds(1));
  EXPECT_NE(a.Next(random), b.Next(other));
}

}  // namespace
}  // namespace ferry
