#include "server/ops/client_budget.h"

#include <utility>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(ClientBudgetTest, BoundsEachClientAndAllOfThemAndLeasesGiveBack) {
  ClientBudget budget(10, 6, "widgets");
  absl::StatusOr<ClientBudget::Lease> a = budget.Acquire("a", 6);
  ASSERT_TRUE(a.ok());
  const absl::StatusOr<ClientBudget::Lease> more = budget.Acquire("a", 1);
  EXPECT_TRUE(absl::IsResourceExhausted(more.status()));
  EXPECT_NE(more.status().message().find("client a holds 6 widgets"), absl::string_view::npos)
      << more.status();
  absl::StatusOr<ClientBudget::Lease> b = budget.Acquire("b", 4);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(budget.Acquire("c", 1).status()));
  EXPECT_EQ(budget.used(), 10u);
  { ClientBudget::Lease gone = *std::move(a); }
  EXPECT_EQ(budget.used(), 4u);
  EXPECT_EQ(budget.used_by("a"), 0u);
  EXPECT_TRUE(budget.Acquire("c", 6).ok());  // released again at once
  EXPECT_EQ(budget.used(), 4u);
}

TEST(ClientBudgetTest, ALeaseGrowsWithinTheBoundsAndShrinksToNothing) {
  ClientBudget budget(100, 60, "bytes");
  ClientBudget::Lease lease;
  ASSERT_TRUE(budget.Resize(&lease, "a", 40).ok());
  EXPECT_EQ(lease.units(), 40u);
  EXPECT_EQ(budget.used_by("a"), 40u);
  // Past the client's bound: refused, and the lease keeps what it had.
  EXPECT_TRUE(absl::IsResourceExhausted(budget.Resize(&lease, "a", 61)));
  EXPECT_EQ(lease.units(), 40u);
  EXPECT_EQ(budget.used(), 40u);
  ASSERT_TRUE(budget.Resize(&lease, "a", 60).ok());
  absl::StatusOr<ClientBudget::Lease> other = budget.Acquire("b", 40);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(budget.Resize(&*other, "b", 41)));  // the total
  ASSERT_TRUE(budget.Resize(&lease, "a", 10).ok());
  EXPECT_EQ(budget.used(), 50u);
  ASSERT_TRUE(budget.Resize(&lease, "a", 0).ok());
  EXPECT_EQ(lease.units(), 0u);
  EXPECT_EQ(budget.used_by("a"), 0u);
  EXPECT_EQ(budget.used(), 40u);
}

TEST(ClientBudgetTest, LeasesOutliveTheirBudget) {
  ClientBudget::Lease kept;
  {
    ClientBudget budget(5, 5, "things");
    kept = *budget.Acquire("a", 3);
  }
  EXPECT_EQ(kept.units(), 3u);  // and its destructor gives back to the shared state
}

}  // namespace
}  // namespace ferry
