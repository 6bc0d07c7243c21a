#include "common/flag_names.h"

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::vector<char*> pointers;
  return NormalizeFlagNames(static_cast<int>(argv.size()), argv.data(), &pointers);
}

TEST(FlagNamesTest, DashedNamesBecomeAbslsAndValuesStay) {
  EXPECT_EQ(
      Normalize({"prog", "--data-dir=/a-b/c-d", "--mode", "copy-x", "--", "--x-y"}),
      (std::vector<std::string>{"prog", "--data_dir=/a-b/c-d", "--mode", "copy-x", "--", "--x-y"}));
}

TEST(FlagNamesTest, AFlagFileIsExpandedAndNormalizedToo) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/flags";
  std::ofstream(path) << "# a comment\n\n  --data-dir=/srv/a-b  \n--spark-dir-roots=/x,/y\n";
  EXPECT_EQ(Normalize({"prog", "--threads=2", "--flagfile=" + path, "ls"}),
            (std::vector<std::string>{"prog", "--threads=2", "--data_dir=/srv/a-b",
                                      "--spark_dir_roots=/x,/y", "ls"}));
}

}  // namespace
}  // namespace ferry
