#include "server/storage/ids.h"

#include <fstream>
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

// The table the aux service's AppIdsTest reads too: one rule on both sides of the YARN
// hand-off.
TEST(IdsTest, ApplicationIdsAsTheSharedTableSays) {
  std::ifstream table("tests/testdata/app_ids.tsv");
  ASSERT_TRUE(table.good());
  int cases = 0;
  for (std::string line; std::getline(table, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string verdict = line.substr(0, tab), id = line.substr(tab + 1);
    ASSERT_TRUE(verdict == "valid" || verdict == "invalid") << line;
    EXPECT_EQ(IsValidAppId(id), verdict == "valid") << "'" << id << "'";
    EXPECT_EQ(CheckAppId(id).ok(), verdict == "valid") << "'" << id << "'";
    ++cases;
  }
  EXPECT_GE(cases, 20);
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
