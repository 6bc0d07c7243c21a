#include "server/storage/layout.h"

#include <fcntl.h>

#include <memory>
#include <string>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

TEST(LayoutTest, AFerryAppsFilesAreInItsDirectoryNamedRelativeToTheDataDir) {
  testing::TempDir dir;
  UniqueFd app(::open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  const int fd = app.get();
  const FerryAppLayout layout("app-1", std::move(app));
  const ShuffleFileLocation at = layout.Locate("shuffle_3_7_0.index");
  EXPECT_EQ(at.dir_fd, fd);
  EXPECT_EQ(at.relative, "shuffle_3_7_0.index");
  EXPECT_EQ(at.display, "app-1/shuffle_3_7_0.index");  // never the data dir's path
  EXPECT_EQ(layout.Describe(), "app app-1");
  EXPECT_FALSE(layout.CommitsInTwoSteps());
  EXPECT_EQ(layout.owner().kind, ShuffleOwner::Kind::kFerryApp);
}

TEST(LayoutTest, ASparkExecutorsFilesAreHashedOverItsLocalDirs) {
  auto dirs = std::make_shared<spark::ExecutorDirs>();
  dirs->local_dirs = {{3, "blockmgr-a", "/r/blockmgr-a"}, {4, "blockmgr-b", "/r/blockmgr-b"}};
  dirs->sub_dirs_per_local_dir = 8;
  const SparkExecutorLayout layout("app-1", "7", dirs);
  const std::string name = "shuffle_3_7_0.data";
  const ShuffleFileLocation at = layout.Locate(name);
  const ShuffleFileLocation expected = dirs->Locate(name);
  EXPECT_EQ(at.dir_fd, expected.dir_fd);
  EXPECT_EQ(at.relative, expected.relative);
  EXPECT_EQ(layout.Describe(), "executor 7 of app app-1");
  EXPECT_TRUE(layout.CommitsInTwoSteps());
}

TEST(LayoutTest, OwnersAreOneKeyAcrossLayouts) {
  // A Ferry app and a Spark app of the same name are different owners.
  const ShuffleOwner ferry{ShuffleOwner::Kind::kFerryApp, "app-1", ""};
  const ShuffleOwner spark{ShuffleOwner::Kind::kSparkExecutor, "app-1", ""};
  EXPECT_FALSE(ferry == spark);
  EXPECT_TRUE(ferry == (ShuffleOwner{ShuffleOwner::Kind::kFerryApp, "app-1", ""}));
  EXPECT_NE(absl::Hash<ShuffleOwner>()(ferry), absl::Hash<ShuffleOwner>()(spark));
}

}  // namespace
}  // namespace ferry
