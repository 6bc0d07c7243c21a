#include "server/spark/spark_executors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

constexpr char kSortShuffleManager[] = "org.apache.spark.shuffle.sort.SortShuffleManager";

class ExecutorRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    state_ = dir_.path() + "/state";
    for (const std::string& d : {root_, state_, root_ + "/blockmgr-1", root_ + "/blockmgr-2",
                                 dir_.path() + "/elsewhere"}) {
      ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << d;
    }
  }

  std::unique_ptr<ExecutorRegistry> Open() {
    auto registry = ExecutorRegistry::Open({.dir_roots = {root_}, .state_dir = state_});
    EXPECT_TRUE(registry.ok()) << registry.status();
    return registry.ok() ? *std::move(registry) : nullptr;
  }

  spark::RegisterExecutor Registration(const std::string& app, const std::string& exec,
                                       std::vector<std::string> dirs) {
    return {app, exec, {std::move(dirs), 64, kSortShuffleManager}};
  }

  testing::TempDir dir_;
  std::string root_;
  std::string state_;
};

TEST_F(ExecutorRegistryTest, RegistrationsSurviveARestart) {
  {
    auto registry = Open();
    ASSERT_TRUE(registry->Register(Registration("app-1", "0", {root_ + "/blockmgr-1"})).ok());
    ASSERT_TRUE(registry->Register(Registration("app-1", "1", {root_ + "/blockmgr-2"})).ok());
    ASSERT_TRUE(registry->Register(Registration("app-2", "0", {root_ + "/blockmgr-1"})).ok());
    EXPECT_EQ(registry->Remove("app-2", "0", false)->executors, 1u);
  }
  auto registry = Open();
  EXPECT_EQ(registry->size(), 2u);
  auto info = registry->Find("app-1", "1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->local_dirs, std::vector<std::string>{root_ + "/blockmgr-2"});
  EXPECT_EQ(info->sub_dirs_per_local_dir, 64);
  EXPECT_EQ(info->shuffle_manager, kSortShuffleManager);
  EXPECT_EQ(registry->Find("app-2", "0").status().message(),
            "Executor is not registered (appId=app-2, execId=0)");
  EXPECT_EQ(registry->Remove("app-1", "", false)->executors, 2u);
  EXPECT_EQ(Open()->size(), 0u);
}

TEST_F(ExecutorRegistryTest, RemovingAnAppCanDeleteItsLocalDirsButNothingOutsideThem) {
  auto registry = Open();
  // blockmgr-1/0c/shuffle_0_1_0.data, and a symlink in it to a file outside the root.
  ASSERT_EQ(::mkdir((root_ + "/blockmgr-1/0c").c_str(), 0755), 0);
  ASSERT_EQ(::close(::open((root_ + "/blockmgr-1/0c/shuffle_0_1_0.data").c_str(),
                           O_CREAT | O_WRONLY, 0644)),
            0);
  const std::string outside = dir_.path() + "/elsewhere/precious";
  ASSERT_EQ(::close(::open(outside.c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  ASSERT_EQ(::symlink((dir_.path() + "/elsewhere").c_str(),
                      (root_ + "/blockmgr-1/0c/link").c_str()),
            0);
  ASSERT_TRUE(registry->Register(Registration("app-1", "0", {root_ + "/blockmgr-1"})).ok());
  ASSERT_TRUE(registry->Register(Registration("app-1", "1", {root_ + "/blockmgr-2"})).ok());
  ASSERT_EQ(::mkdir((root_ + "/blockmgr-3").c_str(), 0755), 0);
  ASSERT_TRUE(registry->Register(Registration("app-2", "0", {root_ + "/blockmgr-3"})).ok());
  absl::StatusOr<ExecutorRegistry::Removal> removed = registry->Remove("app-1", "", true);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->executors, 2u);
  EXPECT_EQ(removed->dirs_deleted, 2u);
  EXPECT_TRUE(removed->errors.empty());
  struct stat st;
  EXPECT_NE(::lstat((root_ + "/blockmgr-1").c_str(), &st), 0);
  EXPECT_NE(::lstat((root_ + "/blockmgr-2").c_str(), &st), 0);
  EXPECT_EQ(::lstat(outside.c_str(), &st), 0);  // the link went, not what it named
  EXPECT_EQ(registry->size(), 1u);
  EXPECT_EQ(registry->Remove("app-9", "", true)->executors, 0u);
}

TEST_F(ExecutorRegistryTest, LocalDirsOutsideTheRootsAreRefused) {
  auto registry = Open();
  auto outside = registry->Register(Registration("app", "0", {dir_.path() + "/elsewhere"}));
  EXPECT_EQ(outside.code(), absl::StatusCode::kPermissionDenied) << outside;
  EXPECT_FALSE(registry->Register(Registration("app", "0", {root_ + "/../elsewhere"})).ok());
  EXPECT_FALSE(registry->Register(Registration("app", "0", {"blockmgr-1"})).ok());
  EXPECT_FALSE(registry->Register(Registration("app", "0", {root_})).ok());  // the root itself
  EXPECT_FALSE(registry->Register(Registration("app", "0", {root_ + "/missing"})).ok());
  // A link inside the root to a directory outside it is not followed.
  ASSERT_EQ(::symlink((dir_.path() + "/elsewhere").c_str(), (root_ + "/link").c_str()), 0);
  EXPECT_FALSE(registry->Register(Registration("app", "0", {root_ + "/link"})).ok());
  EXPECT_FALSE(registry->Register(Registration("../app", "0", {root_ + "/blockmgr-1"})).ok());
  auto bad_sub = Registration("app", "0", {root_ + "/blockmgr-1"});
  bad_sub.info.sub_dirs_per_local_dir = 0;
  EXPECT_FALSE(registry->Register(bad_sub).ok());
  EXPECT_EQ(registry->size(), 0u);
}

TEST_F(ExecutorRegistryTest, ExecutorsAreBounded) {
  auto registry = ExecutorRegistry::Open({.dir_roots = {root_}, .state_dir = "", .max_executors = 2});
  ASSERT_TRUE(registry.ok());
  ASSERT_TRUE((*registry)->Register(Registration("a", "0", {root_ + "/blockmgr-1"})).ok());
  ASSERT_TRUE((*registry)->Register(Registration("a", "1", {root_ + "/blockmgr-1"})).ok());
  EXPECT_EQ((*registry)->Register(Registration("a", "2", {root_ + "/blockmgr-1"})).code(),
            absl::StatusCode::kResourceExhausted);
  // Registering again, as an executor does when it reconnects, needs no room.
  EXPECT_TRUE((*registry)->Register(Registration("a", "1", {root_ + "/blockmgr-1"})).ok());
}

// Issue 18.8: registrations were bounded by count only.
TEST_F(ExecutorRegistryTest, RegistrationsAreBoundedInBytes) {
  auto registry = ExecutorRegistry::Open(
      {.dir_roots = {root_}, .state_dir = "", .max_executors = 1000, .max_bytes = 40000});
  ASSERT_TRUE(registry.ok());
  int registered = 0;
  absl::Status last;
  for (int i = 0; i < 100 && last.ok(); ++i) {
    auto r = Registration("a", absl::StrCat(i), {root_ + "/blockmgr-1"});
    r.info.shuffle_manager = std::string(4000, 'x');
    last = (*registry)->Register(r);
    if (last.ok()) ++registered;
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_EQ(registered, 9);
  EXPECT_LE((*registry)->bytes(), 40000u);
  // Forgetting makes room.
  ASSERT_TRUE((*registry)->Remove("a", "0", false).ok());
  auto r = Registration("a", "x", {root_ + "/blockmgr-1"});
  r.info.shuffle_manager = std::string(4000, 'x');
  EXPECT_TRUE((*registry)->Register(r).ok());
}

// Issue 18.2: a registration whose dir was deleted while the server was down made the
// whole state file unusable.
TEST_F(ExecutorRegistryTest, AStaleRecordIsDroppedAndTheOthersLoad) {
  {
    auto registry = Open();
    ASSERT_TRUE(registry->Register(Registration("ended", "0", {root_ + "/blockmgr-1"})).ok());
    ASSERT_TRUE(registry->Register(Registration("live", "0", {root_ + "/blockmgr-2"})).ok());
  }
  ASSERT_EQ(::rmdir((root_ + "/blockmgr-1").c_str()), 0);
  auto registry = Open();
  ASSERT_NE(registry, nullptr);
  EXPECT_EQ(registry->size(), 1u);
  EXPECT_TRUE(registry->Find("live", "0").ok());
  EXPECT_FALSE(registry->Find("ended", "0").ok());
}

// A crash during an append leaves a record cut short at the end: the records before it
// load.
TEST_F(ExecutorRegistryTest, ARecordCutShortAtTheEndIsIgnored) {
  {
    auto registry = Open();
    ASSERT_TRUE(registry->Register(Registration("app", "0", {root_ + "/blockmgr-1"})).ok());
  }
  const int fd = ::open((state_ + "/spark-executors").c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "\0\0\0\x40\x02\0\0", 7), 7);
  ::close(fd);
  auto registry = Open();
  ASSERT_NE(registry, nullptr);
  EXPECT_EQ(registry->size(), 1u);
}

// Issue 18.4: each registration rewrote the whole state file. It is a journal now:
// a registration appends its record, and the file is rewritten only when it has grown
// to twice what is live.
TEST_F(ExecutorRegistryTest, ARegistrationAppendsToTheStateFileAndItIsCompacted) {
  const std::string path = state_ + "/spark-executors";
  auto size = [&] {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  };
  auto registry = Open();
  for (int i = 0; i < 300; ++i) {
    auto r = Registration("app", absl::StrCat(i), {root_ + "/blockmgr-1"});
    r.info.shuffle_manager = std::string(4000, 'x');
    ASSERT_TRUE(registry->Register(r).ok());
  }
  const uint64_t live = registry->bytes();
  EXPECT_EQ(size(), live);
  // A new shuffle manager for one executor, 1,000 times: each appends one record, and
  // the file never holds more than twice the live records and 1 MiB.
  uint64_t largest = 0;
  for (int i = 0; i < 1000; ++i) {
    auto r = Registration("app", "7", {root_ + "/blockmgr-1"});
    r.info.shuffle_manager = absl::StrCat(std::string(3990, 'y'), i);
    ASSERT_TRUE(registry->Register(r).ok());
    largest = std::max(largest, size());
  }
  EXPECT_LE(largest, 2 * live + (1 << 20) + 8192);
  EXPECT_GT(largest, live + 4000);  // appended, not rewritten each time
  registry.reset();
  registry = Open();
  EXPECT_EQ(registry->size(), 300u);
  EXPECT_EQ(registry->Find("app", "7")->shuffle_manager, absl::StrCat(std::string(3990, 'y'), 999));
}

// Issue 18.3: one app could delete another's live dirs, or move another's executor onto
// other dirs.
TEST_F(ExecutorRegistryTest, AnAppCannotDeleteOrMoveAnotherAppsDirs) {
  auto registry = Open();
  ASSERT_EQ(::mkdir((root_ + "/blockmgr-1/sub").c_str(), 0755), 0);
  ASSERT_TRUE(registry->Register(Registration("victim", "1", {root_ + "/blockmgr-1/sub"})).ok());
  // The same dir, and one around it.
  ASSERT_TRUE(registry->Register(Registration("evil", "1", {root_ + "/blockmgr-1/sub"})).ok());
  ASSERT_TRUE(registry->Register(Registration("evil", "2", {root_ + "/blockmgr-1"})).ok());
  absl::StatusOr<ExecutorRegistry::Removal> removed = registry->Remove("evil", "", true);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->executors, 2u);
  EXPECT_EQ(removed->dirs_deleted, 0u);
  EXPECT_EQ(removed->kept,
            (std::vector<std::string>{root_ + "/blockmgr-1/sub", root_ + "/blockmgr-1"}));
  struct stat st;
  EXPECT_EQ(::lstat((root_ + "/blockmgr-1/sub").c_str(), &st), 0);
  auto moved = registry->Register(Registration("victim", "1", {root_ + "/blockmgr-2"}));
  EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition) << moved;
  EXPECT_EQ(registry->Find("victim", "1")->local_dirs,
            std::vector<std::string>{root_ + "/blockmgr-1/sub"});
  // Once the victim is gone too, its own removal deletes the dir.
  removed = registry->Remove("victim", "", true);
  EXPECT_EQ(removed->dirs_deleted, 1u);
  EXPECT_NE(::lstat((root_ + "/blockmgr-1/sub").c_str(), &st), 0);
}

// Issue 18.8: registrations never expired. One whose dirs are all gone (its app ended
// and the worker deleted them) is forgotten, in memory and in the state file.
TEST_F(ExecutorRegistryTest, RegistrationsWhoseDirsAreGoneAreForgotten) {
  auto registry = Open();
  ASSERT_TRUE(registry->Register(
      Registration("ended", "0", {root_ + "/blockmgr-1", root_ + "/blockmgr-2"})).ok());
  ASSERT_EQ(::mkdir((root_ + "/blockmgr-3").c_str(), 0755), 0);
  ASSERT_TRUE(registry->Register(Registration("live", "0", {root_ + "/blockmgr-3"})).ok());
  ASSERT_EQ(::rmdir((root_ + "/blockmgr-1").c_str()), 0);
  EXPECT_EQ(*registry->ForgetVanished(), 0u);  // one of its dirs is still there
  ASSERT_EQ(::rmdir((root_ + "/blockmgr-2").c_str()), 0);
  EXPECT_EQ(*registry->ForgetVanished(), 1u);
  EXPECT_FALSE(registry->Find("ended", "0").ok());
  EXPECT_TRUE(registry->Find("live", "0").ok());
  registry.reset();
  EXPECT_EQ(Open()->size(), 1u);
}

// Issue 18.12: a local dir with a NUL byte was accepted.
TEST_F(ExecutorRegistryTest, ALocalDirWithANulByteIsRefused) {
  auto registry = Open();
  auto r = Registration("app", "0", {root_ + std::string("/blockmgr-1\0/x", 14)});
  EXPECT_EQ(registry->Register(r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry->size(), 0u);
}

TEST_F(ExecutorRegistryTest, DamagedStateFileIsDataLoss) {
  const std::string path = state_ + "/spark-executors";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "\0\0\0\x09garbage!!", 13), 13);
  ::close(fd);
  auto registry = ExecutorRegistry::Open({.dir_roots = {root_}, .state_dir = state_});
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kDataLoss) << registry.status();
  EXPECT_NE(registry.status().message().find("record 0"), std::string::npos);
}

}  // namespace
}  // namespace ferry
