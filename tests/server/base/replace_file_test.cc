#include "server/base/replace_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ReplaceFileTest, WritesThenReplacesWholeAndLeavesNoTemporary) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/state";
  ASSERT_TRUE(ReplaceFile(path, "first version", 0600).ok());
  EXPECT_EQ(Read(path), "first version");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(ReplaceFile(path, "2nd", 0600).ok());
  EXPECT_EQ(Read(path), "2nd");
  EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0);
}

TEST(ReplaceFileTest, NeverWritesThroughASymlinkAtTheTemporary) {
  testing::TempDir dir;
  const std::string victim = dir.path() + "/victim";
  ASSERT_TRUE(ReplaceFile(victim, "untouched", 0600).ok());
  ASSERT_EQ(::symlink(victim.c_str(), (dir.path() + "/state.tmp").c_str()), 0);
  const absl::Status s = ReplaceFile(dir.path() + "/state", "payload", 0600);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("state.tmp"), std::string::npos) << s;
  EXPECT_EQ(Read(victim), "untouched");
}

TEST(ReplaceFileTest, AMissingDirectoryIsAnErrorNamingTheFile) {
  testing::TempDir dir;
  const absl::Status s = ReplaceFile(dir.path() + "/no/such/file", "x", 0644);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("no/such/file.tmp"), std::string::npos) << s;
}

}  // namespace
}  // namespace ferry
