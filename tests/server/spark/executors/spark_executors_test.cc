#include "server/spark/executors/spark_executors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spark/wire.h"
#include "gtest/gtest.h"
#include "tests/testing/small_tmpfs.h"
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
    ASSERT_EQ(::mkdir((root_ + "/blockmgr-3").c_str(), 0755), 0);
    ASSERT_TRUE(registry->Register(Registration("app-2", "0", {root_ + "/blockmgr-3"})).ok());
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

// YARN's spark.yarn.shuffle.server.recovery.disabled: such an application's executors
// are served while the registry lives, and are not in the state file, nor after a
// compaction, nor after a restart.
TEST_F(ExecutorRegistryTest, AnApplicationNotKeptAcrossRestartsIsNotInTheStateFile) {
  ExecutorRegistry::Options options{.dir_roots = {root_}, .state_dir = state_};
  options.kept_across_restarts = [](absl::string_view app) { return app != "app-ephemeral"; };
  {
    auto registry = ExecutorRegistry::Open(options);
    ASSERT_TRUE(registry.ok()) << registry.status();
    ASSERT_TRUE((*registry)->Register(Registration("app-kept", "0", {root_ + "/blockmgr-1"})).ok());
    ASSERT_TRUE(
        (*registry)->Register(Registration("app-ephemeral", "0", {root_ + "/blockmgr-2"})).ok());
    EXPECT_TRUE((*registry)->Find("app-ephemeral", "0").ok());
    // Forgetting one that was never written writes nothing for it either.
    EXPECT_EQ((*registry)->Remove("app-ephemeral", "", false)->executors, 1u);
    ASSERT_TRUE(
        (*registry)->Register(Registration("app-ephemeral", "1", {root_ + "/blockmgr-2"})).ok());
    std::ifstream in(state_ + "/spark-executors", std::ios::binary);
    const std::string journal((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(journal.find("app-kept"), std::string::npos);
    EXPECT_EQ(journal.find("app-ephemeral"), std::string::npos);
  }
  auto registry = ExecutorRegistry::Open(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->size(), 1u);
  EXPECT_TRUE((*registry)->Find("app-kept", "0").ok());
  EXPECT_FALSE((*registry)->Find("app-ephemeral", "1").ok());
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
  ASSERT_EQ(
      ::symlink((dir_.path() + "/elsewhere").c_str(), (root_ + "/blockmgr-1/0c/link").c_str()), 0);
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

// An application ends (Options::app_gone) once its last registration is forgotten,
// removed one executor at a time, all at once, or swept with its dirs gone; never while
// one remains.
TEST_F(ExecutorRegistryTest, AnApplicationIsGoneWithItsLastRegistration) {
  std::vector<std::string> gone;
  auto registry = ExecutorRegistry::Open(
      {.dir_roots = {root_}, .state_dir = state_, .app_gone = [&](const std::string& app) {
         gone.push_back(app);
       }});
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_EQ(::mkdir((root_ + "/blockmgr-3").c_str(), 0755), 0);
  ASSERT_TRUE((*registry)->Register(Registration("app-1", "0", {root_ + "/blockmgr-1"})).ok());
  ASSERT_TRUE((*registry)->Register(Registration("app-1", "1", {root_ + "/blockmgr-2"})).ok());
  ASSERT_TRUE((*registry)->Register(Registration("app-2", "0", {root_ + "/blockmgr-3"})).ok());
  ASSERT_TRUE((*registry)->Remove("app-1", "0", false).ok());
  EXPECT_TRUE(gone.empty());
  ASSERT_TRUE((*registry)->Remove("app-1", "1", false).ok());
  EXPECT_EQ(gone, std::vector<std::string>{"app-1"});
  ASSERT_EQ(::rmdir((root_ + "/blockmgr-3").c_str()), 0);
  ASSERT_TRUE((*registry)->ForgetVanished().ok());
  EXPECT_EQ(gone, (std::vector<std::string>{"app-1", "app-2"}));
  ASSERT_TRUE((*registry)->Remove("app-2", "", false).ok());  // nothing left to forget
  EXPECT_EQ(gone.size(), 2u);
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
  auto registry =
      ExecutorRegistry::Open({.dir_roots = {root_}, .state_dir = "", .max_executors = 2});
  ASSERT_TRUE(registry.ok());
  ASSERT_TRUE((*registry)->Register(Registration("a", "0", {root_ + "/blockmgr-1"})).ok());
  ASSERT_TRUE((*registry)->Register(Registration("a", "1", {root_ + "/blockmgr-1"})).ok());
  EXPECT_EQ((*registry)->Register(Registration("a", "2", {root_ + "/blockmgr-1"})).code(),
            absl::StatusCode::kResourceExhausted);
  // Registering again, as an executor does when it reconnects, needs no room.
  EXPECT_TRUE((*registry)->Register(Registration("a", "1", {root_ + "/blockmgr-1"})).ok());
}

// Registrations were bounded by count only.
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

// A registration whose dir was deleted while the server was down made the
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

// Each registration rewrote the whole state file. It is a journal now:
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

// One app could delete another's live dirs, or move another's executor onto
// other dirs. It could also register them as its own and read them.
TEST_F(ExecutorRegistryTest, AnAppCannotClaimDeleteOrMoveAnotherAppsDirs) {
  auto registry = Open();
  ASSERT_EQ(::mkdir((root_ + "/blockmgr-1/sub").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root_ + "/blockmgr-1/sub/deeper").c_str(), 0755), 0);
  ASSERT_TRUE(registry->Register(Registration("victim", "1", {root_ + "/blockmgr-1/sub"})).ok());
  // The same dir, one around it, one inside it, and one of each among others: refused.
  for (const std::vector<std::string>& dirs :
       std::vector<std::vector<std::string>>{{root_ + "/blockmgr-1/sub"},
                                             {root_ + "/blockmgr-1"},
                                             {root_ + "/blockmgr-1/sub/deeper"},
                                             {root_ + "/blockmgr-2", root_ + "/blockmgr-1/sub"}}) {
    auto claimed = registry->Register(Registration("evil", "1", dirs));
    EXPECT_EQ(claimed.code(), absl::StatusCode::kPermissionDenied) << claimed;
  }
  EXPECT_EQ(registry->size(), 1u);
  // The victim's own executors may share and nest dirs.
  ASSERT_TRUE(registry->Register(Registration("victim", "2", {root_ + "/blockmgr-1"})).ok());
  absl::StatusOr<ExecutorRegistry::Removal> removed = registry->Remove("victim", "2", true);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->executors, 1u);
  EXPECT_EQ(removed->dirs_deleted, 0u);
  EXPECT_EQ(removed->kept, std::vector<std::string>{root_ + "/blockmgr-1"});
  struct stat st;
  EXPECT_EQ(::lstat((root_ + "/blockmgr-1/sub").c_str(), &st), 0);
  auto moved = registry->Register(Registration("victim", "1", {root_ + "/blockmgr-2"}));
  EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition) << moved;
  EXPECT_EQ(registry->Find("victim", "1")->local_dirs,
            std::vector<std::string>{root_ + "/blockmgr-1/sub"});
  // Once the victim is gone, its dirs are free, and its removal deleted them.
  removed = registry->Remove("victim", "", true);
  EXPECT_EQ(removed->dirs_deleted, 1u);
  EXPECT_NE(::lstat((root_ + "/blockmgr-1/sub").c_str(), &st), 0);
  EXPECT_TRUE(registry->Register(Registration("other", "1", {root_ + "/blockmgr-1"})).ok());
}

// Ferry's Spark plugin's dir, ferry-<app>-<executor>, is that executor's alone, even
// before it registers it: no other application, nor another executor of the same one,
// registers it or a dir inside it.
TEST_F(ExecutorRegistryTest, APluginsDirIsItsExecutorsAlone) {
  auto registry = Open();
  const std::string own = root_ + "/ferry-app-7-3";
  ASSERT_EQ(::mkdir(own.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((own + "/0a").c_str(), 0755), 0);
  for (const auto& [app, exec, dir] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"app-8", "3", own}, {"app-7", "4", own}, {"app-8", "3", own + "/0a"}}) {
    absl::Status s = registry->Register(Registration(app, exec, {dir}));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << app << " " << exec << ": " << s;
    EXPECT_NE(s.message().find("Ferry's Spark plugin keeps for another executor"),
              std::string::npos)
        << s;
  }
  EXPECT_EQ(registry->size(), 0u);
  EXPECT_TRUE(registry->Register(Registration("app-7", "3", {own})).ok());
}

// On YARN a dir belongs to the application it lies under, registered or not: after a
// restart with no claim left (recovery disabled, or no state dir), bob still cannot
// register alice's dirs, nor claim a dir above hers while none of hers is registered.
TEST_F(ExecutorRegistryTest, OnYarnAnApplicationRegistersOnlyDirsInsideItsOwn) {
  const std::string nm = root_ + "/nm-local-dir";
  const std::string alice = nm + "/usercache/alice/appcache/application_1_0001";
  const std::string bob = nm + "/usercache/bob/appcache/application_1_0002";
  for (const std::string& d : {alice + "/blockmgr-a", bob + "/blockmgr-b"}) {
    std::filesystem::create_directories(d);
  }
  std::vector<std::string> ended;
  ExecutorRegistry::Options options;
  options.dir_roots = {nm};
  options.yarn_layout = true;
  options.ended = [&](absl::string_view app) {
    return std::find(ended.begin(), ended.end(), app) != ended.end();
  };
  auto registry = ExecutorRegistry::Open(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  for (const std::string& dir : {alice + "/blockmgr-a", alice, nm + "/usercache/alice",
                                 nm + "/usercache", nm + "/usercache/alice/appcache"}) {
    absl::Status s = (*registry)->Register(Registration("application_1_0002", "1", {dir}));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << dir << ": " << s;
    EXPECT_NE(s.message().find("not inside the application's own dir"), std::string::npos) << s;
    EXPECT_EQ((*registry)->Check(Registration("application_1_0002", "1", {dir})).code(),
              absl::StatusCode::kPermissionDenied);
  }
  // The same layout under a root above the NodeManager's local dirs.
  options.dir_roots = {root_};
  auto above = ExecutorRegistry::Open(options);
  ASSERT_TRUE(above.ok()) << above.status();
  EXPECT_FALSE(
      (*above)->Register(Registration("application_1_0002", "1", {alice + "/blockmgr-a"})).ok());
  EXPECT_TRUE(
      (*above)->Register(Registration("application_1_0001", "1", {alice + "/blockmgr-a"})).ok());

  EXPECT_TRUE(
      (*registry)->Register(Registration("application_1_0001", "1", {alice + "/blockmgr-a"})).ok());
  EXPECT_TRUE(
      (*registry)->Register(Registration("application_1_0002", "1", {bob + "/blockmgr-b"})).ok());
  // An ended application registers nothing more.
  ended.push_back("application_1_0001");
  absl::Status late =
      (*registry)->Register(Registration("application_1_0001", "2", {alice + "/blockmgr-a"}));
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
}

// A NodeManager's local dir may be a symlink (executors name it as the NodeManager
// does), and a missing one (a failed disk) is skipped while the others serve.
TEST_F(ExecutorRegistryTest, RootsMayBeSymlinksAndAMissingOneIsSkipped) {
  const std::string link = dir_.path() + "/link";
  ASSERT_EQ(::symlink(root_.c_str(), link.c_str()), 0);
  ExecutorRegistry::Options options;
  options.dir_roots = {dir_.path() + "/gone", link};
  auto registry = ExecutorRegistry::Open(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_TRUE((*registry)->Register(Registration("app-1", "1", {link + "/blockmgr-1"})).ok());
  // Below the root, links are still not followed.
  ASSERT_EQ(::symlink((dir_.path() + "/elsewhere").c_str(), (root_ + "/out").c_str()), 0);
  EXPECT_FALSE((*registry)->Register(Registration("app-1", "2", {link + "/out"})).ok());
  options.dir_roots = {dir_.path() + "/gone"};
  absl::Status none = ExecutorRegistry::Open(options).status();
  EXPECT_NE(none.message().find("no Spark dir root is a directory"), std::string::npos) << none;
}

// A state file written before claims were checked may hold two apps naming one dir: the
// first registration keeps it, the later one is dropped at start.
TEST_F(ExecutorRegistryTest, AtStartTheFirstRegistrationOfADirKeepsIt) {
  {
    auto registry = ExecutorRegistry::Open({.dir_roots = {root_}, .state_dir = ""});
    ASSERT_TRUE(registry.ok());
  }
  std::string journal;
  for (const auto& r : {Registration("first", "1", {root_ + "/blockmgr-1"}),
                        Registration("second", "1", {root_ + "/blockmgr-1"}),
                        Registration("second", "2", {root_ + "/blockmgr-2"})}) {
    spark::WireWriter(&journal).String(spark::EncodeRegisterExecutor(r));
  }
  const int fd = ::open((state_ + "/spark-executors").c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_EQ(::write(fd, journal.data(), journal.size()), static_cast<ssize_t>(journal.size()));
  ::close(fd);
  auto registry = Open();
  EXPECT_EQ(registry->size(), 2u);
  EXPECT_TRUE(registry->Find("first", "1").ok());
  EXPECT_FALSE(registry->Find("second", "1").ok());
  EXPECT_TRUE(registry->Find("second", "2").ok());
}

// A registration lstat'ed every prefix of every dir, O(depth^2) path walks
// (a 1,501-deep chain named 64 times took 5.3 s of CPU). A dir is one openat2, at most
// kMaxDirDepth levels below its root.
TEST_F(ExecutorRegistryTest, DeepDirsAreRefusedAndADirIsOneLookup) {
  auto registry = Open();
  std::string dir = root_ + "/blockmgr-1";
  std::string at_limit;
  for (int depth = 2; depth <= 40; ++depth) {
    dir += "/d";
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    if (depth == ExecutorRegistry::kMaxDirDepth) at_limit = dir;
  }
  auto deep = registry->Register(Registration("app", "0", std::vector<std::string>(64, dir)));
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument) << deep;
  EXPECT_NE(deep.message().find("more than 16 levels below its root"), std::string::npos) << deep;
  EXPECT_TRUE(registry->Register(Registration("app", "0", {at_limit})).ok());
  // A symlink anywhere on the way is refused, the last component or one above it.
  ASSERT_EQ(::symlink(root_.c_str(), (root_ + "/blockmgr-2/up").c_str()), 0);
  EXPECT_EQ(registry->Register(Registration("app", "1", {root_ + "/blockmgr-2/up"})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      registry->Register(Registration("app", "1", {root_ + "/blockmgr-2/up/blockmgr-1"})).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry->size(), 1u);
}

// The journal's records, to read them back in tests: (offset, length) of each.
std::vector<std::pair<size_t, uint32_t>> Records(const std::string& bytes) {
  std::vector<std::pair<size_t, uint32_t>> records;
  for (size_t at = 0; at + 4 <= bytes.size();) {
    const uint32_t length = (uint32_t{static_cast<uint8_t>(bytes[at])} << 24) |
                            (uint32_t{static_cast<uint8_t>(bytes[at + 1])} << 16) |
                            (uint32_t{static_cast<uint8_t>(bytes[at + 2])} << 8) |
                            uint32_t{static_cast<uint8_t>(bytes[at + 3])};
    records.emplace_back(at, length);
    at += 4 + length;
  }
  return records;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename());
  }
  return names;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The compaction an append triggered was made from memory before the change
// was: a new registration, or a removal, whose record took the journal past the threshold
// was acknowledged and missing from (or revived by) the rewritten file.
TEST_F(ExecutorRegistryTest, TheChangeThatTriggersACompactionIsInTheCompactedFile) {
  const std::string path = state_ + "/spark-executors";
  // A registration of ~10 KB: 64 dirs with long names.
  std::vector<std::string> wide;
  for (int i = 0; i < 64; ++i) {
    wide.push_back(absl::StrCat(root_, "/blockmgr-", i, "-", std::string(140, 'w')));
    ASSERT_EQ(::mkdir(wide.back().c_str(), 0755), 0);
  }
  for (const bool removal : {false, true}) {
    SCOPED_TRACE(removal ? "a removal" : "a registration");
    ASSERT_EQ(::unlink(path.c_str()) == 0 || errno == ENOENT, true);
    auto registry = Open();
    // 80 executors whose forget records take ~12 KB.
    for (int i = 0; i < 80; ++i) {
      const std::string exec = absl::StrCat(i, "-", std::string(120, 'c'));
      ASSERT_TRUE(registry->Register(Registration("appC", exec, {root_ + "/blockmgr-2"})).ok());
    }
    // One executor registered again and again with another shuffle manager of the same
    // size, until the journal is within 9 KB of the threshold (twice what is live, and
    // 1 MiB), so that either change takes it past.
    const auto size = [&] {
      struct stat st;
      return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
    };
    const auto gap = [&] {
      return static_cast<int64_t>(2 * registry->bytes() + (1 << 20)) - size();
    };
    for (int i = 0; i < 1000 && gap() >= 9000; ++i) {
      auto r = Registration("appA", "1", {root_ + "/blockmgr-1"});
      r.info.shuffle_manager = absl::StrCat(i % 10, std::string(3999, i % 2 ? 'a' : 'b'));
      ASSERT_TRUE(registry->Register(r).ok());
    }
    ASSERT_GT(gap(), 0);
    ASSERT_LT(gap(), 9000);
    const int64_t before = size();
    if (removal) {
      EXPECT_EQ(registry->Remove("appC", "", false)->executors, 80u);
      EXPECT_LT(size(), before);  // compacted
    } else {
      ASSERT_TRUE(registry->Register(Registration("appB", "1", wide)).ok());
    }
    registry = Open();
    EXPECT_EQ(registry->Find("appB", "1").ok(), !removal);
    EXPECT_FALSE(registry->Find("appC", absl::StrCat(0, "-", std::string(120, 'c'))).ok() &&
                 removal);
    EXPECT_EQ(registry->size(), removal ? 1u : 82u);
  }
}

// A length field of record 2 of 5 damaged was taken for a torn tail: records
// 2-4 dropped with a warning and the file rewritten, so the loss was permanent. Only the
// last record can be torn; damage before it sets the file aside.
TEST_F(ExecutorRegistryTest, DamageBeforeTheLastRecordSetsTheFileAside) {
  const std::string path = state_ + "/spark-executors";
  for (const int32_t damaged_length : {2 << 20, -7, 0, 1}) {
    SCOPED_TRACE(damaged_length);
    ASSERT_EQ(::unlink(path.c_str()) == 0 || errno == ENOENT, true);
    {
      auto registry = Open();
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(
            registry->Register(Registration("app", absl::StrCat(i), {root_ + "/blockmgr-1"})).ok());
      }
    }
    std::string bytes = ReadFile(path);
    const auto records = Records(bytes);
    ASSERT_EQ(records.size(), 5u);
    const uint32_t length = static_cast<uint32_t>(damaged_length);
    for (int i = 0; i < 4; ++i)
      bytes[records[2].first + i] = static_cast<char>(length >> (24 - 8 * i));
    WriteFile(path, bytes);
    auto registry = Open();
    ASSERT_NE(registry, nullptr);
    EXPECT_EQ(registry->size(), 2u);  // records 0 and 1
    EXPECT_TRUE(registry->Find("app", "1").ok());
    std::vector<std::string> aside;
    for (const std::string& name : Names(state_)) {
      if (name.rfind("spark-executors.damaged-", 0) == 0) aside.push_back(name);
    }
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_EQ(ReadFile(state_ + "/" + aside[0]), bytes);  // as it was, for the operator
    ::unlink((state_ + "/" + aside[0]).c_str());
    registry.reset();
    EXPECT_EQ(Open()->size(), 2u);  // the new journal holds what loaded
  }
}

// A crash during an append leaves a prefix of its records: that tail is cut off at start
// (in place: no room is needed), and the next appends follow whole records.
TEST_F(ExecutorRegistryTest, ATornTailIsCutOffAndAppendsFollowWholeRecords) {
  const std::string path = state_ + "/spark-executors";
  {
    auto registry = Open();
    ASSERT_TRUE(registry->Register(Registration("app", "0", {root_ + "/blockmgr-1"})).ok());
    ASSERT_TRUE(registry->Register(Registration("app", "1", {root_ + "/blockmgr-1"})).ok());
  }
  const std::string whole = ReadFile(path);
  const auto records = Records(whole);
  for (const std::string& tail : {whole.substr(records[1].first, 3),
                                  whole.substr(records[1].first, 20), std::string(300, '\0')}) {
    WriteFile(path, whole + tail);
    {
      auto registry = Open();
      EXPECT_EQ(registry->size(), 2u);
      ASSERT_TRUE(registry->Register(Registration("app", "2", {root_ + "/blockmgr-2"})).ok());
    }
    auto registry = Open();
    EXPECT_EQ(registry->size(), 3u);
    EXPECT_TRUE(registry->Find("app", "2").ok());
    ASSERT_TRUE(registry->Remove("app", "2", false).ok());
  }
}

// Registrations never expired. One whose dirs are all gone (its app ended
// and the worker deleted them) is forgotten, in memory and in the state file.
TEST_F(ExecutorRegistryTest, RegistrationsWhoseDirsAreGoneAreForgotten) {
  auto registry = Open();
  ASSERT_TRUE(
      registry->Register(Registration("ended", "0", {root_ + "/blockmgr-1", root_ + "/blockmgr-2"}))
          .ok());
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

// A local dir with a NUL byte was accepted.
TEST_F(ExecutorRegistryTest, ALocalDirWithANulByteIsRefused) {
  auto registry = Open();
  auto r = Registration("app", "0", {root_ + std::string("/blockmgr-1\0/x", 14)});
  EXPECT_EQ(registry->Register(r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry->size(), 0u);
}

TEST_F(ExecutorRegistryTest, AStateFileThatIsNotAJournalIsSetAside) {
  const std::string path = state_ + "/spark-executors";
  WriteFile(path, std::string("\0\0\0\x09garbage!!", 13));
  auto registry = ExecutorRegistry::Open({.dir_roots = {root_}, .state_dir = state_});
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->size(), 0u);
  EXPECT_EQ(Names(state_).size(), 2u);  // the new journal, and the old
}

// With less free space than the journal's size the server did not start,
// because opening always rewrote the file. It starts, and serves what it has.
TEST_F(ExecutorRegistryTest, AFullStateDiskDoesNotKeepTheRegistryFromOpening) {
  auto tmpfs = testing::SmallTmpfs::Mount(dir_.path() + "/disk", 256 << 10);
  if (!tmpfs.ok()) GTEST_SKIP() << tmpfs.status();
  const std::string disk = (*tmpfs)->path();
  const auto open = [&] {
    return ExecutorRegistry::Open({.dir_roots = {root_}, .state_dir = disk});
  };
  {
    auto registry = open();
    ASSERT_TRUE(registry.ok()) << registry.status();
    for (int i = 0; i < 60; ++i) {
      auto r = Registration("app", absl::StrCat(i), {root_ + "/blockmgr-1"});
      r.info.shuffle_manager = std::string(400, 'm');
      ASSERT_TRUE((*registry)->Register(r).ok());
    }
    // Forget records: a compaction at start would be worth making.
    for (int i = 50; i < 60; ++i)
      ASSERT_TRUE((*registry)->Remove("app", absl::StrCat(i), false).ok());
  }
  ASSERT_TRUE((*tmpfs)->Fill().ok());
  auto registry = open();
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->size(), 50u);
  EXPECT_TRUE((*registry)->Find("app", "49").ok());
  // A change that cannot be written is refused, and nothing is lost by it. (Its record is
  // larger than the page the journal's last one may have left room in.)
  auto large = Registration("app", "new", {root_ + "/blockmgr-2"});
  large.info.shuffle_manager = std::string(4096, 'l');
  auto refused = (*registry)->Register(large);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_FALSE((*registry)->Find("app", "new").ok());
  registry->reset();
  EXPECT_EQ((*open())->size(), 50u);
  // With room again, changes are kept.
  ASSERT_TRUE((*tmpfs)->Unfill().ok());
  registry = open();
  ASSERT_TRUE((*registry)->Register(Registration("app", "new", {root_ + "/blockmgr-2"})).ok());
  registry->reset();
  EXPECT_EQ((*open())->size(), 51u);
}

}  // namespace
}  // namespace ferry
