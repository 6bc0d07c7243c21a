#include "common/dir_entries.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

TEST(DirEntriesTest, EveryNameButTheDotsUntilTold) {
  testing::TempDir dir;
  for (const char* name : {"a", "b", "c"}) std::ofstream(dir.path() + "/" + name) << name;
  ASSERT_EQ(::mkdir((dir.path() + "/sub").c_str(), 0755), 0);
  std::vector<std::string> names;
  ASSERT_TRUE(ForEachEntry(dir.path().c_str(), [&](const char* name) {
                names.emplace_back(name);
                return true;
              }).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "sub"}));

  // From an O_PATH descriptor, which stays the caller's; stopped after two names.
  UniqueFd fd(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  int seen = 0;
  ASSERT_TRUE(ForEachEntry(fd.get(), "the test dir", [&](const char*) { return ++seen < 2; }).ok());
  EXPECT_EQ(seen, 2);
  struct stat st {};
  EXPECT_EQ(::fstatat(fd.get(), "a", &st, 0), 0) << "the caller's descriptor was closed";
}

TEST(DirEntriesTest, AnErrorNamesTheDirectory) {
  testing::TempDir dir;
  const std::string missing = dir.path() + "/none";
  const absl::Status status = ForEachEntry(missing.c_str(), [](const char*) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(status.message(), "list " + missing)) << status;
  std::ofstream(dir.path() + "/file") << "x";
  UniqueFd file(::open((dir.path() + "/file").c_str(), O_PATH | O_CLOEXEC));
  EXPECT_TRUE(absl::StrContains(
      ForEachEntry(file.get(), "a file", [](const char*) { return true; }).message(),
      "list a file"));
}

TEST(DirEntriesTest, WhetherAPathIsADirectoryIsAskedInOnePlace) {
  testing::TempDir dir;
  ASSERT_EQ(::mkdir((dir.path() + "/sub").c_str(), 0700), 0);
  std::ofstream(dir.path() + "/file") << "x";
  ASSERT_EQ(::symlink("sub", (dir.path() + "/link").c_str()), 0);
  UniqueFd fd(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  EXPECT_TRUE(IsDirectoryAt(fd.get(), "sub"));
  EXPECT_FALSE(IsDirectoryAt(fd.get(), "file"));
  EXPECT_FALSE(IsDirectoryAt(fd.get(), "link"));  // a symlink is not followed
  EXPECT_FALSE(IsDirectoryAt(fd.get(), "none"));

  EXPECT_TRUE(CheckDirectory("--dir", dir.path() + "/sub", W_OK | X_OK).ok());
  EXPECT_TRUE(CheckDirectory("--dir", dir.path() + "/link", R_OK).ok());
  const absl::Status missing = CheckDirectory("--dir", dir.path() + "/none", R_OK);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.message(), "--dir " + dir.path() + "/none")) << missing;
  const absl::Status file = CheckDirectory("--dir", dir.path() + "/file", R_OK);
  EXPECT_EQ(file.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(file.message(), "is not a directory")) << file;
  if (::geteuid() != 0) {  // root may write anywhere
    ASSERT_EQ(::chmod((dir.path() + "/sub").c_str(), 0500), 0);
    const absl::Status unwritable = CheckDirectory("--dir", dir.path() + "/sub", W_OK | X_OK);
    EXPECT_EQ(unwritable.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(absl::StrContains(unwritable.message(), "cannot write")) << unwritable;
  }
}

}  // namespace
}  // namespace ferry
