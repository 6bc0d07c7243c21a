#include "server/storage/ids.h"

#include <string>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(IdsTest, OnlyPlainNamesOfAtMost128CharactersAreIds) {
  EXPECT_TRUE(IsValidId("app-20261201_0001.attempt-2"));
  EXPECT_TRUE(IsValidId(std::string(128, 'a')));
  EXPECT_FALSE(IsValidId(std::string(129, 'a')));
  EXPECT_FALSE(IsValidId(""));
  EXPECT_FALSE(IsValidId("."));
  EXPECT_FALSE(IsValidId(".."));
  EXPECT_TRUE(IsValidId("..."));  // a name, not a path step
  for (const char* bad : {"a/b", "a b", "a\\b", "\xc3\xa9", "a\n", "a:b"}) {
    EXPECT_FALSE(IsValidId(bad)) << bad;
  }
  EXPECT_FALSE(IsValidId(std::string("a\0b", 3)));
}

TEST(IdsTest, ChecksNameWhatIsWrongCutShort) {
  EXPECT_TRUE(CheckAppId("app-1").ok());
  const absl::Status bad = CheckAppId("../etc");
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_NE(bad.message().find("'../etc'"), absl::string_view::npos) << bad;
  EXPECT_LT(CheckAppId(std::string(100000, '/')).message().size(), 300u);
  EXPECT_TRUE(CheckAppAndExecutorIds("app-1", "7").ok());
  const absl::Status exec = CheckAppAndExecutorIds("app-1", "7/..");
  EXPECT_TRUE(absl::IsInvalidArgument(exec));
  EXPECT_NE(exec.message().find("executor id '7/..'"), absl::string_view::npos) << exec;
}

}  // namespace
}  // namespace ferry
