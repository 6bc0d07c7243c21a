// Where the Spark front door finds applications' secrets (server/spark/auth/spark_auth.h),
// from real files. The handshake itself: spark_protocol_test and tests/e2e/spark_test.
#include "server/spark/auth/spark_auth.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::TempDir;

SparkSecrets::Options Files(const std::string& secret_file, const std::string& secrets_dir = "") {
  SparkSecrets::Options options;
  options.secret_file = secret_file;
  options.secrets_dir = secrets_dir;
  return options;
}

class SparkSecretsTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = absl::StrCat(dir_.path(), "/", name);
    std::ofstream(path) << contents;
    return path;
  }
  TempDir dir_;
};

TEST_F(SparkSecretsTest, WithoutFilesNothingIsRequired) {
  absl::StatusOr<std::unique_ptr<SparkSecrets>> secrets = SparkSecrets::Load({});
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_FALSE((*secrets)->required());
}

TEST_F(SparkSecretsTest, BadFilesAndDirsAreRefusedAtStartNamingThem) {
  EXPECT_EQ(SparkSecrets::Load(Files(dir_.path() + "/none")).status().code(),
            absl::StatusCode::kNotFound);
  const std::string empty = Write("empty", " \n");
  EXPECT_NE(SparkSecrets::Load(Files(empty)).status().message().find("is empty"),
            std::string::npos);
  const std::string big = Write("big", std::string(5000, 'x'));
  EXPECT_NE(SparkSecrets::Load(Files(big)).status().message().find("not a secret"),
            std::string::npos);
  // A FIFO would block the reader until someone writes: it is not read at all.
  const std::string fifo = dir_.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(SparkSecrets::Load(Files(fifo)).status().message().find("not a regular file"),
            std::string::npos);
  absl::Status not_dir = SparkSecrets::Load(Files("", empty)).status();
  EXPECT_NE(not_dir.message().find("--spark-auth-secrets-dir"), std::string::npos) << not_dir;
}

TEST_F(SparkSecretsTest, AnApplicationsOwnFileComesFirstThenTheSharedSecret) {
  const std::string shared = Write("shared", "  the shared one\n");
  ASSERT_EQ(::mkdir((dir_.path() + "/apps").c_str(), 0700), 0);
  Write("apps/application_1_0001", "its own");
  Write("outside", "not an app's");
  absl::StatusOr<std::unique_ptr<SparkSecrets>> secrets =
      SparkSecrets::Load(Files(shared, dir_.path() + "/apps"));
  ASSERT_TRUE(secrets.ok()) << secrets.status();
  EXPECT_TRUE((*secrets)->required());
  EXPECT_EQ(*(*secrets)->SecretOf("application_1_0001"), "its own");
  EXPECT_EQ(*(*secrets)->SecretOf("application_1_0002"), "the shared one");
  // An id that is not a file name is never looked up as one.
  EXPECT_EQ(*(*secrets)->SecretOf("../outside"), "the shared one");
  // A file that is there but unusable is not passed over for the shared secret.
  Write("apps/app-big", std::string(5000, 'x'));
  EXPECT_EQ((*secrets)->SecretOf("app-big").status().code(), absl::StatusCode::kPermissionDenied);

  absl::StatusOr<std::unique_ptr<SparkSecrets>> dir_only =
      SparkSecrets::Load(Files("", dir_.path() + "/apps"));
  ASSERT_TRUE(dir_only.ok());
  absl::Status none = (*dir_only)->SecretOf("application_1_0002").status();
  EXPECT_EQ(none.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(none.message().find("non-registered app application_1_0002"), std::string::npos)
      << none;
}

}  // namespace
}  // namespace ferry
