// How YARN's applications reach ferry_server (server/spark/yarn_apps.h), from real files
// laid out as the NodeManager's aux service (server/yarn) writes them, and the secrets
// SparkSecrets takes from them. YARN itself: tests/e2e/yarn_test.
#include "server/spark/yarn_apps.h"

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/spark/spark_auth.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::TempDir;

TEST(ServiceDataTest, TheRawSecretAsSparkSendsItWithRecoveryOn) {
  absl::StatusOr<YarnApps::ServiceData> data =
      YarnApps::ParseServiceData("a2V5IG9mIHRoZSBhcHBsaWNhdGlvbg==");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->secret.value_or("none"), "a2V5IG9mIHRoZSBhcHBsaWNhdGlvbg==");
  EXPECT_FALSE(data->recovery_disabled);
  // Not an object: a secret, as Spark's service reads it.
  EXPECT_EQ(YarnApps::ParseServiceData("12345")->secret.value_or("none"), "12345");
}

TEST(ServiceDataTest, NothingWithoutSparkAuthenticate) {
  absl::StatusOr<YarnApps::ServiceData> data = YarnApps::ParseServiceData("");
  ASSERT_TRUE(data.ok());
  EXPECT_FALSE(data->secret.has_value());
}

TEST(ServiceDataTest, TheJsonPayloadOfAnApplicationWithRecoveryDisabled) {
  absl::StatusOr<YarnApps::ServiceData> data = YarnApps::ParseServiceData(
      R"({"spark.yarn.shuffle.server.recovery.disabled":true,"secret":"s3cr3t"})");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->secret.value_or("none"), "s3cr3t");
  EXPECT_TRUE(data->recovery_disabled);
  data = YarnApps::ParseServiceData(R"({"spark.yarn.shuffle.server.recovery.disabled":"true"})");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_FALSE(data->secret.has_value());
  EXPECT_TRUE(data->recovery_disabled);
  EXPECT_FALSE(YarnApps::ParseServiceData(R"({"secret":null})")->secret.has_value());
}

TEST(ServiceDataTest, APayloadOfTheWrongTypesIsAnError) {
  EXPECT_EQ(YarnApps::ParseServiceData(R"({"secret":7})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(YarnApps::ParseServiceData(
                R"({"secret":"s","spark.yarn.shuffle.server.recovery.disabled":[1]})")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

class YarnAppsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<YarnApps>> apps = YarnApps::Open({dir_.path()});
    ASSERT_TRUE(apps.ok()) << apps.status();
    apps_ = *std::move(apps);
  }
  void Write(const std::string& relative, const std::string& contents) {
    std::ofstream(absl::StrCat(dir_.path(), "/", relative)) << contents;
  }
  bool Exists(const std::string& relative) {
    struct stat st {};
    return ::stat(absl::StrCat(dir_.path(), "/", relative).c_str(), &st) == 0;
  }
  TempDir dir_;
  std::unique_ptr<YarnApps> apps_;
};

TEST_F(YarnAppsTest, OpenMakesTheSubdirsAndRefusesWhatIsNotADir) {
  EXPECT_TRUE(Exists("apps"));
  EXPECT_TRUE(Exists("stopped"));
  Write("file", "x");
  absl::Status not_dir = YarnApps::Open({dir_.path() + "/file"}).status();
  EXPECT_NE(not_dir.message().find("is not a directory"), std::string::npos) << not_dir;
  EXPECT_NE(YarnApps::Open({"relative"}).status().message().find("absolute"), std::string::npos);
  EXPECT_EQ(YarnApps::Open({dir_.path() + "/none"}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(YarnAppsTest, FindsAnApplicationsServiceDataUntilItEnds) {
  const std::string app = "application_1764000000000_0001";
  EXPECT_EQ(apps_->Find(app).status().code(), absl::StatusCode::kNotFound);
  Write("apps/" + app, "the-secret");
  absl::StatusOr<YarnApps::ServiceData> found = apps_->Find(app);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->secret.value_or("none"), "the-secret");

  Write("stopped/" + app, "");
  Write("stopped/.application_1764000000000_0002.tmp", "");  // the shim's, half written
  absl::StatusOr<std::vector<std::string>> stopped = apps_->Stopped();
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, std::vector<std::string>{app});
  ASSERT_TRUE(apps_->Forget(app).ok());
  EXPECT_FALSE(Exists("apps/" + app));
  EXPECT_FALSE(Exists("stopped/" + app));
  EXPECT_TRUE(apps_->Stopped()->empty());
  EXPECT_TRUE(apps_->Forget(app).ok()) << "forgetting twice is not an error";
}

TEST_F(YarnAppsTest, NamesThatAreNoApplicationAndBadFilesAreNeverRead) {
  EXPECT_EQ(apps_->Find("../stopped").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(apps_->Find(".hidden").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(apps_->Forget("../x").ok());
  // A FIFO would block the reader; an endless file is not read past the bound.
  ASSERT_EQ(::mkfifo((dir_.path() + "/apps/application_1_0001").c_str(), 0600), 0);
  EXPECT_NE(apps_->Find("application_1_0001").status().message().find("not a regular file"),
            std::string::npos);
  Write("apps/application_1_0002", std::string(YarnApps::kMaxServiceDataBytes + 1, 'x'));
  EXPECT_EQ(apps_->Find("application_1_0002").status().code(), absl::StatusCode::kInvalidArgument);
  Write("apps/application_1_0003", R"({"secret": 1})");
  absl::Status bad = apps_->Find("application_1_0003").status();
  EXPECT_NE(bad.message().find("apps/application_1_0003"), std::string::npos) << bad;
}

TEST_F(YarnAppsTest, TheNodeManagersLocalDirs) {
  EXPECT_EQ(apps_->NodeManagerLocalDirs().status().code(), absl::StatusCode::kNotFound);
  Write("nodemanager-local-dirs", "/data/1/yarn\n/data/2/yarn\n");
  absl::StatusOr<std::vector<std::string>> dirs = apps_->NodeManagerLocalDirs();
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ(*dirs, (std::vector<std::string>{"/data/1/yarn", "/data/2/yarn"}));
  Write("nodemanager-local-dirs", "\n");
  EXPECT_FALSE(apps_->NodeManagerLocalDirs().ok());
}

TEST_F(YarnAppsTest, SecretsComeFromYarnThenTheSharedSecret) {
  SparkSecrets::Options options;
  options.yarn = true;
  EXPECT_NE(SparkSecrets::Load(options).status().message().find("--spark-yarn-dir"),
            std::string::npos);
  absl::StatusOr<std::unique_ptr<SparkSecrets>> secrets = SparkSecrets::Load(options, apps_.get());
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_TRUE((*secrets)->required());
  Write("apps/application_1_0001", "own");
  Write("apps/application_1_0002", "");  // started without spark.authenticate
  EXPECT_EQ((*secrets)->SecretOf("application_1_0001").value_or("refused"), "own");
  EXPECT_EQ((*secrets)->SecretOf("application_1_0002").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ((*secrets)->SecretOf("application_1_0003").status().code(),
            absl::StatusCode::kPermissionDenied);
  Write("apps/application_1_0004", R"({"secret": false})");
  absl::Status damaged = (*secrets)->SecretOf("application_1_0004").status();
  EXPECT_NE(damaged.message().find("no usable secret for application application_1_0004"),
            std::string::npos)
      << damaged;

  Write("shared", "cluster");
  options.secret_file = dir_.path() + "/shared";
  secrets = SparkSecrets::Load(options, apps_.get());
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_EQ((*secrets)->SecretOf("application_1_0001").value_or("refused"), "own");
  EXPECT_EQ((*secrets)->SecretOf("application_1_0002").value_or("refused"), "cluster");
  EXPECT_EQ((*secrets)->SecretOf("application_1_0003").value_or("refused"), "cluster");
}

}  // namespace
}  // namespace ferry
