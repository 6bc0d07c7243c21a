// The ferry_server binary's lifecycle flags: --log-file reopened on SIGHUP (what
// logrotate needs), --log-level, --version, --flagfile with dashed names.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/server_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::ServerProcess;
using ::ferry::testing::TempDir;

constexpr char kServerBinary[] = "server/ferry_server";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Waits (bounded: 10 s) until `path` holds `needle`.
bool WaitForText(const std::string& path, const std::string& needle) {
  return testing::WaitFor([&] { return absl::StrContains(ReadFile(path), needle); });
}

TEST(LifecycleTest, SighupReopensTheLogFileForLogrotate) {
  TempDir dir;
  const std::string log = dir.path() + "/ferry.log";
  // The flag file spells names with dashes, as the docs do.
  const std::string flags = dir.path() + "/flags";
  std::ofstream(flags) << "# from a flag file\n--log-file=" << log << "\n--threads=1\n";
  auto server = ServerProcess::Start(kServerBinary, dir.path(), {"--flagfile=" + flags});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(WaitForText(log, "limits:")) << ReadFile(log);
  // logrotate renames the file, then signals.
  ASSERT_EQ(std::rename(log.c_str(), (log + ".1").c_str()), 0);
  ASSERT_EQ(::kill((*server)->pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitForText(log, "SIGHUP, log file reopened")) << ReadFile(log);
  EXPECT_FALSE(absl::StrContains(ReadFile(log + ".1"), "reopened"));
  // Still serving after it.
  absl::StatusOr<int> status = (*server)->SignalAndWait(SIGTERM, absl::Seconds(20));
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  EXPECT_TRUE(WaitForText(log, "ferry_server: stopped"));
}

TEST(LifecycleTest, LogLevelWarningDropsInfoLines) {
  TempDir dir;
  const std::string log = dir.path() + "/ferry.log";
  auto server =
      ServerProcess::Start(kServerBinary, dir.path(), {"--log-level=warning", "--log-file=" + log});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> status = (*server)->SignalAndWait(SIGTERM, absl::Seconds(20));
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(absl::StrContains(ReadFile(log), "limits:")) << ReadFile(log);
}

TEST(LifecycleTest, VersionAndBadLevelsAnswerWithoutServing) {
  absl::StatusOr<testing::CommandResult> version =
      testing::RunCommand({kServerBinary, "--version"}, absl::Seconds(10));
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->exit_code, 0);
  EXPECT_TRUE(absl::StartsWith(version->output, "ferry_server 0.")) << version->output;
  absl::StatusOr<testing::CommandResult> bad =
      testing::RunCommand({kServerBinary, "--log-level=loud"}, absl::Seconds(10));
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad->output, "--log-level must be info, warning or error"));
}

}  // namespace
}  // namespace ferry
