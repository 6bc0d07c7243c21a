// Push-based shuffle against Spark itself: tests/e2e/push/PushDiff.java drives Spark's
// own push client (ExternalBlockStoreClient, OneForOneBlockPusher) to push the same
// blocks into ferry_server and into Spark's own RemoteBlockPushResolver (behind
// ExternalBlockHandler, as a NodeManager hosts it), finalizes both, and checks that the
// return codes, the MergeStatuses and every merged file (.data, .index, .meta) agree byte
// for byte, then reads ferry_server's chunk bitmaps and merged chunks with Spark's
// reduce-side client; then a killed pusher, a newer merge id and concurrent pushers
// (PushDiff's header says what each must show); for spark-ess's 3.5.0 and for each Spark
// line scripts/setup installs.
// Skipped, saying why, where they are not there.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/ferry_server.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/command.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/spark_cluster.h"
#include "tests/testing/spark_ess.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::CommandResult;
using ::ferry::testing::TempDir;

// PushDiff compiled against `classpath` (Spark's network classes and what they load),
// run against a fresh ferry_server and a fresh resolver of that Spark: its verdict.
void ExpectAlike(const std::string& classpath, const std::string& which) {
  SCOPED_TRACE(which);
  TempDir ferry_root;
  TempDir spark_root;
  TempDir data;
  TempDir classes;
  FerryServerOptions options = testing::TestServerOptions(data.path(), {});
  options.spark.address = "127.0.0.1:0";
  options.spark.executors.dir_roots = {ferry_root.path()};
  options.spark.push.enabled = true;
  options.spark.push.min_chunk_bytes = int64_t{1} << 20;
  std::unique_ptr<FerryServer> server = testing::StartServer(options);
  absl::StatusOr<CommandResult> built = testing::RunCommand(
      {"/usr/bin/javac", "-d", classes.path(), "-cp", classpath, "tests/e2e/push/PushDiff.java"},
      absl::Seconds(120));
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_EQ(built->exit_code, 0) << built->output;
  absl::StatusOr<CommandResult> diff = testing::RunCommand(
      {"/usr/bin/java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp",
       absl::StrCat(classes.path(), ":", classpath), "ferry.pushdiff.PushDiff",
       absl::StrCat(server->spark_port()), ferry_root.path(), spark_root.path(), "1m"},
      absl::Seconds(240));
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(diff->exit_code, 0) << diff->output;
  EXPECT_TRUE(absl::StrContains(diff->output, "OK 48 blocks pushed alike")) << diff->output;
  // What Spark's resolver did where it differs (a killed pusher, concurrent pushers).
  for (absl::string_view line : absl::StrSplit(diff->output, '\n')) {
    if (absl::StartsWith(line, "OK ")) std::cout << which << ": " << line << "\n";
  }
}

// Spark 3.5.0's classes built from source (../shared/spark-ess).
TEST(PushTest, SparksPushClientMergesIntoFerryAsIntoSparksOwnResolver) {
  std::string why;
  const std::string ess = testing::SparkEssDir(&why);
  if (ess.empty()) GTEST_SKIP() << "Spark's own classes are not available: " << why;
  ExpectAlike(
      absl::StrCat(ess, "/build/spark-ess.jar:",
                   absl::StripAsciiWhitespace(testing::ReadTextFile(ess + "/build/classpath"))),
      "spark-ess 3.5.0");
}

// Each Spark line scripts/setup installs (3.5.9 and 4.3.0): its own jars.
TEST(PushTest, EachSparkLinesPushClientAndResolverAgreeWithFerry) {
  std::string why;
  const std::vector<testing::SparkDistribution> sparks = testing::InstalledSparks(&why);
  if (sparks.empty()) GTEST_SKIP() << "no Spark distribution is installed: " << why;
  for (const testing::SparkDistribution& spark : sparks) {
    ExpectAlike(spark.home + "/jars/*", spark.version);
  }
}

}  // namespace
}  // namespace ferry
