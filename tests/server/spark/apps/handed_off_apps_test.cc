// How YARN's applications reach ferry_server (server/spark/apps/handed_off_apps.h), from real files
// laid out as the NodeManager's aux service (server/yarn) writes them, and the secrets
// SparkSecrets takes from them. YARN itself: tests/e2e/yarn_test.
#include "server/spark/apps/handed_off_apps.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/spark/auth/spark_auth.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::TempDir;
using ::ferry::testing::WaitFor;

TEST(ServiceDataTest, TheRawSecretAsSparkSendsItWithRecoveryOn) {
  absl::StatusOr<HandedOffApps::ServiceData> data =
      HandedOffApps::ParseServiceData("a2V5IG9mIHRoZSBhcHBsaWNhdGlvbg==");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->secret.value_or(Secret("none")), "a2V5IG9mIHRoZSBhcHBsaWNhdGlvbg==");
  EXPECT_FALSE(data->recovery_disabled);
  // Not an object: a secret, as Spark's service reads it.
  EXPECT_EQ(HandedOffApps::ParseServiceData("12345")->secret.value_or(Secret("none")), "12345");
  EXPECT_EQ(HandedOffApps::ParseServiceData("[1]")->secret.value_or(Secret("none")), "[1]");
  EXPECT_EQ(HandedOffApps::ParseServiceData("{not json")->secret.value_or(Secret("none")),
            "{not json");
}

TEST(ServiceDataTest, NothingWithoutSparkAuthenticate) {
  absl::StatusOr<HandedOffApps::ServiceData> data = HandedOffApps::ParseServiceData("");
  ASSERT_TRUE(data.ok());
  EXPECT_FALSE(data->secret.has_value());
}

TEST(ServiceDataTest, TheJsonPayloadOfAnApplicationWithRecoveryDisabled) {
  absl::StatusOr<HandedOffApps::ServiceData> data = HandedOffApps::ParseServiceData(
      R"({"spark.yarn.shuffle.server.recovery.disabled":true,"secret":"s3cr3t"})");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->secret.value_or(Secret("none")), "s3cr3t");
  EXPECT_TRUE(data->recovery_disabled);
  data =
      HandedOffApps::ParseServiceData(R"({"spark.yarn.shuffle.server.recovery.disabled":"true"})");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_FALSE(data->secret.has_value());
  EXPECT_TRUE(data->recovery_disabled);
  EXPECT_FALSE(HandedOffApps::ParseServiceData(R"({"secret":null})")->secret.has_value());
  // Nested fields are not the top-level ones; the last of a name wins; what follows the
  // object is ignored (Jackson's defaults).
  data = HandedOffApps::ParseServiceData(
      R"({"x":{"secret":"inner","y":[{"secret":1}]},"secret":"a","secret":"b"}}} trailing)");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->secret.value_or(Secret("none")), "b");
  EXPECT_FALSE(data->recovery_disabled);
}

TEST(ServiceDataTest, APayloadOfTheWrongTypesIsAnError) {
  EXPECT_EQ(HandedOffApps::ParseServiceData(R"({"secret":7})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HandedOffApps::ParseServiceData(R"({"secret":{"a":1}})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HandedOffApps::ParseServiceData(
                R"({"secret":"s","spark.yarn.shuffle.server.recovery.disabled":[1]})")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// What an application can set: nesting 30,000 deep in 60 KB took Protobuf's parser 31 s.
// Past kMaxJsonDepth it is no payload, so it is the secret's bytes, as Jackson (whose
// nesting is bounded too) leaves it.
TEST(ServiceDataTest, DeepNestingIsNoPayload) {
  const std::string deep =
      absl::StrCat(R"({"secret":"s","x":)", std::string(30000, '['), std::string(30000, ']'), "}");
  absl::StatusOr<HandedOffApps::ServiceData> data = HandedOffApps::ParseServiceData(deep);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->secret.value_or(Secret("none")), deep);
  const std::string objects = absl::StrCat(std::string(HandedOffApps::kMaxJsonDepth + 1, '{'),
                                           std::string(HandedOffApps::kMaxJsonDepth + 1, '}'));
  EXPECT_EQ(HandedOffApps::ParseServiceData(objects)->secret.value_or(Secret("none")), objects);
  const std::string within =
      absl::StrCat(R"({"secret":"s","x":)", std::string(HandedOffApps::kMaxJsonDepth - 1, '['),
                   std::string(HandedOffApps::kMaxJsonDepth - 1, ']'), "}");
  EXPECT_EQ(HandedOffApps::ParseServiceData(within)->secret.value_or(Secret("none")), "s");
  EXPECT_FALSE(HandedOffApps::ParseServiceData(within)->unparsed);
  EXPECT_TRUE(HandedOffApps::ParseServiceData(objects)->unparsed);
  // 33 deep, as Jackson reads it: the inner secret.
  const std::string d33 =
      absl::StrCat(R"({"secret":"d33","a":)", std::string(32, '['), std::string(32, ']'), "}");
  EXPECT_EQ(HandedOffApps::ParseServiceData(d33)->secret.value_or(Secret("none")), "d33");
  EXPECT_FALSE(
      HandedOffApps::ParseServiceData(std::string(HandedOffApps::kMaxServiceDataBytes + 1, 'x'))
          .ok());
}

// The dir as YARN's NodeManager writes it (--spark-yarn-dir).
HandedOffApps::Options Yarn(const std::string& dir, absl::Duration rescan = absl::Seconds(5)) {
  HandedOffApps::Options options;
  options.yarn_dir = dir;
  options.rescan = rescan;
  return options;
}

class HandedOffAppsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0750), 0);
    for (const char* sub : {"apps", "stopped"}) {
      ASSERT_EQ(::mkdir(absl::StrCat(dir_.path(), "/", sub).c_str(), 0750), 0);
    }
    Open();
  }
  void Open() {
    apps_.reset();
    absl::StatusOr<std::unique_ptr<HandedOffApps>> apps =
        HandedOffApps::Open(Yarn(dir_.path(), absl::Hours(1)));
    ASSERT_TRUE(apps.ok()) << apps.status();
    apps_ = *std::move(apps);
  }
  // As the aux service writes: a temporary name, renamed.
  void Write(const std::string& relative, const std::string& contents, mode_t mode = 0640) {
    const std::string path = absl::StrCat(dir_.path(), "/", relative);
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << contents;
    ASSERT_EQ(::chmod(tmp.c_str(), mode), 0);
    ASSERT_EQ(::rename(tmp.c_str(), path.c_str()), 0);
  }
  std::string Path(const std::string& relative) { return absl::StrCat(dir_.path(), "/", relative); }
  TempDir dir_;
  std::unique_ptr<HandedOffApps> apps_;
};

TEST_F(HandedOffAppsTest, ADirOthersCanWriteIsRefusedAndNothingIsMadeInIt) {
  TempDir other;
  ASSERT_EQ(::chmod(other.path().c_str(), 0777), 0);
  absl::Status open = HandedOffApps::Open(Yarn(other.path())).status();
  EXPECT_EQ(open.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(open.message().find("writable by anyone (mode 0777)"), std::string::npos) << open;
  ASSERT_EQ(::chmod(other.path().c_str(), 0770), 0);
  EXPECT_NE(HandedOffApps::Open(Yarn(other.path())).status().message().find("its group"),
            std::string::npos);
  ASSERT_EQ(::chmod(other.path().c_str(), 0750), 0);
  ASSERT_TRUE(HandedOffApps::Open(Yarn(other.path())).ok());
  struct stat st {};
  EXPECT_NE(::stat((other.path() + "/apps").c_str(), &st), 0) << "apps/ is the NodeManager's";
  Write("file", "x");
  EXPECT_NE(HandedOffApps::Open(Yarn(Path("file"))).status().message().find("is not a directory"),
            std::string::npos);
  EXPECT_NE(HandedOffApps::Open(Yarn("relative")).status().message().find("absolute"),
            std::string::npos);
  EXPECT_EQ(HandedOffApps::Open(Yarn(Path("none"))).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(HandedOffAppsTest, AnApplicationIsReadOnceWhenItsFileAppearsAndForgottenWhenItGoes) {
  const std::string app = "application_1764000000000_0001";
  EXPECT_EQ(apps_->Find(app).status().code(), absl::StatusCode::kNotFound);
  Write("apps/" + app, "the-secret");
  // The watch sees it: no rescan, no read at the lookup.
  ASSERT_TRUE(WaitFor([&] { return apps_->Find(app).ok(); }));
  EXPECT_EQ(apps_->Find(app)->secret.value_or(Secret("none")), "the-secret");
  Write("apps/" + app, R"({"secret":"changed"})");
  ASSERT_TRUE(WaitFor([&] { return apps_->Find(app)->secret.value_or(Secret("")) == "changed"; }));
  ASSERT_EQ(::unlink(Path("apps/" + app).c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return absl::IsNotFound(apps_->Find(app).status()); }));
}

TEST_F(HandedOffAppsTest, EndedApplicationsAreHandedOutOnceAndTheirMarkersAreLeftToTheNodeManager) {
  const std::string a = "application_1_0001", b = "application_1_0002";
  Write("stopped/" + a, "");
  Write("stopped/.application_1_0003.tmp", "");  // the aux service's, half written
  apps_->Rescan();
  EXPECT_TRUE(apps_->Ended(a));
  EXPECT_FALSE(apps_->Ended(b));
  EXPECT_EQ(apps_->PendingEnded(), std::vector<std::string>{a});
  apps_->Handled(a);
  EXPECT_TRUE(apps_->PendingEnded().empty());
  Write("stopped/" + b, "");
  apps_->Rescan();
  EXPECT_EQ(apps_->PendingEnded(), std::vector<std::string>{b});
  struct stat st {};
  EXPECT_EQ(::stat(Path("stopped/" + a).c_str(), &st), 0) << "ferry_server deletes nothing there";
  // The aux service deletes the marker: forgotten.
  ASSERT_EQ(::unlink(Path("stopped/" + a).c_str()), 0);
  apps_->Rescan();
  EXPECT_FALSE(apps_->Ended(a));
  // A restarted server hands out what is still there.
  Open();
  EXPECT_EQ(apps_->PendingEnded(), std::vector<std::string>{b});
}

TEST_F(HandedOffAppsTest, FilesNotTheNodeManagersAreRefused) {
  Write("apps/application_1_0001", "group-writable", 0660);
  ASSERT_EQ(
      ::symlink(Path("apps/application_1_0001").c_str(), Path("apps/application_1_0002").c_str()),
      0);
  ASSERT_EQ(::mkfifo(Path("apps/application_1_0003").c_str(), 0600), 0);
  Write("apps/application_1_0004", std::string(HandedOffApps::kMaxServiceDataBytes + 1, 'x'));
  Write("apps/application_1_0005", R"({"secret": 1})");
  Write("stopped/application_1_0006", "", 0666);
  apps_->Rescan();
  auto refused = [&](const std::string& app, absl::string_view why) {
    absl::Status s = apps_->Find(app).status();
    EXPECT_FALSE(s.ok()) << app;
    EXPECT_NE(s.message().find(why), std::string::npos) << s;
  };
  refused("application_1_0001", "writable by others than its owner (mode 0660)");
  refused("application_1_0002", "is a symlink; refused");
  refused("application_1_0003", "not a regular file");
  refused("application_1_0004", "holds more than");
  refused("application_1_0005", "apps/application_1_0005: the service data's \"secret\"");
  EXPECT_FALSE(apps_->Ended("application_1_0006"));
  EXPECT_EQ(apps_->Find("../stopped").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(apps_->Find(".hidden").status().code(), absl::StatusCode::kNotFound);
  if (::geteuid() == 0) {
    // Another user's file, and a subdir of another user's: as if not there.
    Write("apps/application_1_0007", "theirs");
    ASSERT_EQ(::chown(Path("apps/application_1_0007").c_str(), 12345, 12345), 0);
    apps_->Rescan();
    refused("application_1_0007", "owned by uid 12345");
    Write("apps/application_1_0008", "fine");
    apps_->Rescan();
    ASSERT_TRUE(apps_->Find("application_1_0008").ok());
    ASSERT_EQ(::chown(Path("apps").c_str(), 12345, 12345), 0);
    apps_->Rescan();
    EXPECT_EQ(apps_->Find("application_1_0008").status().code(), absl::StatusCode::kNotFound);
  }
  // A world-writable apps/: nothing in it is read.
  ASSERT_EQ(::chown(Path("apps").c_str(), ::geteuid(), ::getegid()), 0);
  ASSERT_EQ(::chmod(Path("apps").c_str(), 0777), 0);
  apps_->Rescan();
  EXPECT_EQ(apps_->Find("application_1_0008").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(HandedOffAppsTest, TheNodeManagersLocalDirs) {
  EXPECT_EQ(apps_->NodeManagerLocalDirs().status().code(), absl::StatusCode::kNotFound);
  Write("nodemanager-local-dirs", "/data/1/yarn\n/data/2/yarn\n");
  absl::StatusOr<std::vector<std::string>> dirs = apps_->NodeManagerLocalDirs();
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ(*dirs, (std::vector<std::string>{"/data/1/yarn", "/data/2/yarn"}));
  Write("nodemanager-local-dirs", "\n");
  EXPECT_FALSE(apps_->NodeManagerLocalDirs().ok());
  Write("nodemanager-local-dirs", "/data/1/yarn\n", 0666);
  EXPECT_EQ(apps_->NodeManagerLocalDirs().status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(HandedOffAppsTest, SecretsComeFromYarnThenTheSharedSecret) {
  SparkSecrets::Options options;
  options.yarn = true;
  EXPECT_NE(SparkSecrets::Load(options).status().message().find("--spark-yarn-dir"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<SparkSecrets>> secrets = SparkSecrets::Load(options, apps_.get());
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_TRUE((*secrets)->required());
  Write("apps/application_1_0001", "own");
  Write("apps/application_1_0002", "");  // started without spark.authenticate
  Write("apps/application_1_0004", R"({"secret": false})");
  apps_->Rescan();
  EXPECT_EQ((*secrets)->SecretOf("application_1_0001").value_or(Secret("refused")), "own");
  EXPECT_EQ((*secrets)->SecretOf("application_1_0002").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ((*secrets)->SecretOf("application_1_0003").status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::Status damaged = (*secrets)->SecretOf("application_1_0004").status();
  EXPECT_NE(damaged.message().find("no usable secret for application application_1_0004"),
            std::string::npos)
      << damaged;

  Write("shared", "cluster");
  options.secret_file = dir_.path() + "/shared";
  secrets = SparkSecrets::Load(options, apps_.get());
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ((*secrets)->SecretOf("application_1_0001").value_or(Secret("refused")), "own");
  EXPECT_EQ((*secrets)->SecretOf("application_1_0002").value_or(Secret("refused")), "cluster");
  EXPECT_EQ((*secrets)->SecretOf("application_1_0003").value_or(Secret("refused")), "cluster");
}

// The same layout written by a node agent (--spark-apps-dir, Kubernetes): applications,
// secrets and ends as from YARN, but no NodeManager's dirs, and errors name its flag.
TEST_F(HandedOffAppsTest, ANodeAgentsDirHoldsApplicationsButNoNodeManagersDirs) {
  HandedOffApps::Options both = Yarn(dir_.path());
  both.apps_dir = dir_.path();
  EXPECT_EQ(HandedOffApps::Open(both).status().code(), absl::StatusCode::kInvalidArgument);
  HandedOffApps::Options agent;
  agent.apps_dir = Path("none");
  EXPECT_NE(HandedOffApps::Open(agent).status().message().find("--spark-apps-dir"),
            std::string::npos);
  agent.apps_dir = dir_.path();
  absl::StatusOr<std::unique_ptr<HandedOffApps>> apps = HandedOffApps::Open(agent);
  ASSERT_TRUE(apps.ok()) << apps.status();
  const std::string app = "spark-6a1f3c0f4b2d4c8e9f00112233445566";
  EXPECT_NE((*apps)->Find(app).status().message().find("node agent"), std::string::npos);
  Write("apps/" + app, R"({"secret":"from-the-pod"})");
  Write("nodemanager-local-dirs", "/data/1/yarn\n");
  (*apps)->Rescan();
  EXPECT_EQ((*apps)->Find(app)->secret.value_or(Secret("none")), "from-the-pod");
  EXPECT_EQ((*apps)->NodeManagerLocalDirs().status().code(), absl::StatusCode::kNotFound);
  SparkSecrets::Options options;
  options.apps = true;
  EXPECT_NE(SparkSecrets::Load(options).status().message().find("--spark-apps-dir"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<SparkSecrets>> secrets = SparkSecrets::Load(options, apps->get());
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ((*secrets)->SecretOf(app).value_or(Secret("refused")), "from-the-pod");
  Write("stopped/" + app, "");
  (*apps)->Rescan();
  EXPECT_TRUE((*apps)->Ended(app));
  EXPECT_EQ((*apps)->PendingEnded(), std::vector<std::string>{app});
}

}  // namespace
}  // namespace ferry
