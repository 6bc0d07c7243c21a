// ReadAuthToken and ReadPemFile: credentials read from files into Secrets, with the
// errors an operator needs (the file named, what is wrong with it).
#include "common/auth_token.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::TempDir;

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(AuthTokenTest, ATokenIsTheFilesTextWithoutSurroundingWhitespace) {
  TempDir dir;
  absl::StatusOr<Secret> token = ReadAuthToken(Write(dir, "token", "  s3cret-token\n"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_TRUE(*token == "s3cret-token");
}

TEST(AuthTokenTest, AnEmptyUnprintableOversizedOrMissingTokenFileIsRefusedByName) {
  TempDir dir;
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"empty", " \n"},
           {"spaced", "two words"},
           {"control", "a\x01b"},
           {"huge", std::string((1 << 20) + 1, 'x')}}) {
    const std::string path = Write(dir, name, text);
    absl::StatusOr<Secret> token = ReadAuthToken(path);
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(token.status().message().find(path), std::string::npos) << token.status();
  }
  EXPECT_EQ(ReadAuthToken(dir.path() + "/none").status().code(), absl::StatusCode::kNotFound);
}

TEST(AuthTokenTest, APemFileMustHoldABlockAndBeSmall) {
  TempDir dir;
  const std::string pem = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
  absl::StatusOr<Secret> read = ReadPemFile(Write(dir, "key.pem", pem));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->view(), pem);
  EXPECT_EQ(ReadPemFile(Write(dir, "plain", "no block here")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadPemFile(Write(dir, "big", pem + std::string(1 << 20, 'x'))).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
