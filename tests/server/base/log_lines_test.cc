#include "server/base/log_lines.h"

#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(LogEscapedTest, WhatCouldStartOrFakeALineIsEscaped) {
  EXPECT_EQ(LogEscaped("app-1 shuffle_0_1_2 'a dir'"), "app-1 shuffle_0_1_2 'a dir'");
  EXPECT_EQ(LogEscaped("x\nE1203 07:00:00.000000 4242 f.cc:1] FORGED"),
            "x\\x0aE1203 07:00:00.000000 4242 f.cc:1] FORGED");
  EXPECT_EQ(LogEscaped(std::string("\r\x1b[2K\0\x7f\xc3\xa9", 9)),
            "\\x0d\\x1b[2K\\x00\\x7f\\xc3\\xa9");
  // A backslash is escaped too, so that an escape in the log is always the server's.
  EXPECT_EQ(LogEscaped("a\\x0ab"), "a\\\\x0ab");
}

TEST(LineBudgetTest, LinesPerSecondAndWhatWasHeldBack) {
  LineBudget budget(3);
  const absl::Time start = absl::FromUnixSeconds(1000);
  uint64_t held = 99;
  int taken = 0;
  for (int i = 0; i < 10; ++i) taken += budget.Take(start + absl::Milliseconds(i), &held);
  EXPECT_EQ(taken, 3);
  EXPECT_EQ(held, 0u);
  ASSERT_TRUE(budget.Take(start + absl::Milliseconds(1001), &held));
  EXPECT_EQ(held, 7u);
  ASSERT_TRUE(budget.Take(start + absl::Milliseconds(1002), &held));
  EXPECT_EQ(held, 0u);
}

}  // namespace
}  // namespace ferry
