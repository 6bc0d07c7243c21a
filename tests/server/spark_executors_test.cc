#include "server/spark_executors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

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
  ASSERT_TRUE(registry->Register(Registration("app-2", "0", {root_ + "/blockmgr-1"})).ok());
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
  // Registering again replaces, and needs no room.
  EXPECT_TRUE((*registry)->Register(Registration("a", "1", {root_ + "/blockmgr-2"})).ok());
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
