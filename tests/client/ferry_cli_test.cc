// The ferry CLI as an operator runs it: the binary, its output and exit codes, real files.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/ferry_server.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/command.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/server_process.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

constexpr char kFerry[] = "client/ferry";

testing::CommandResult Ferry(std::vector<std::string> args) {
  args.insert(args.begin(), kFerry);
  absl::StatusOr<testing::CommandResult> ran = testing::RunCommand(args, absl::Seconds(60));
  EXPECT_TRUE(ran.ok()) << ran.status();
  return ran.ok() ? *ran : testing::CommandResult{};
}

int64_t ModifiedNanos(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// `ferry gen --app=mine` wrote app-0 over two map outputs of an existing data set, which
// was then served as one mixed shuffle. It writes the app it is told, and never over a
// map output that is there without --force.
TEST(FerryCliTest, GenWritesTheAppItIsToldAndNeverOverwritesSilently) {
  testing::TempDir dir;
  const std::vector<std::string> small = {"gen", "--dir=" + dir.path(), "--maps=2",
                                          "--partitions=4", "--total-bytes=64K"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = small;
    args.insert(args.end(), more.begin(), more.end());
    return Ferry(args);
  };
  testing::CommandResult made = with({"--app=mine"});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string index = dir.path() + "/mine/shuffle_0_1_0.index";
  EXPECT_TRUE(std::filesystem::exists(index)) << made.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/app-0"));
  const int64_t before = ModifiedNanos(index);

  testing::CommandResult again = with({"--app=mine", "--seed=7"});
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_TRUE(absl::StrContains(again.output, "mine/shuffle_0_0_0.data exists")) << again.output;
  EXPECT_TRUE(absl::StrContains(again.output, "--force")) << again.output;
  EXPECT_EQ(ModifiedNanos(index), before) << "an existing map output was written over";

  // New map ids beside the old ones are no overwrite; --force writes over.
  EXPECT_EQ(with({"--app=mine", "--first-map=2"}).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/mine/shuffle_0_3_0.index"));
  testing::CommandResult forced = with({"--app=mine", "--seed=7", "--force"});
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(ModifiedNanos(index), before);

  // Without --app, app-0 .. app-<apps-1>; --app with more apps is a usage error.
  EXPECT_EQ(with({"--apps=2"}).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/app-1/shuffle_0_0_0.index"));
  testing::CommandResult both = with({"--apps=2", "--app=mine"});
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_TRUE(absl::StrContains(both.output, "--app names one app")) << both.output;
}

// Once the control plane requires a token, `ferry health` without it failed
// UNAUTHENTICATED although the server was healthy: the health check needs no token, and
// only the disks' health is left out.
TEST(FerryCliTest, HealthWithoutTheTokenStillSaysServing) {
  testing::TempDir data, secret;
  FerryServerOptions options = testing::TestServerOptions(data.path(), {});
  options.control.auth_token = Secret("s3cret-token");
  std::unique_ptr<FerryServer> server = testing::StartServer(options);
  const std::string target = "--server=" + server->control_target();
  testing::CommandResult bare = Ferry({"health", target});
  EXPECT_EQ(bare.exit_code, 0) << bare.output;
  EXPECT_TRUE(absl::StrContains(bare.output, "SERVING (disks not checked")) << bare.output;
  testing::CommandResult json = Ferry({"health", target, "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_TRUE(absl::StrContains(json.output, R"("unhealthy_disks":null)")) << json.output;
  std::ofstream(secret.path() + "/token") << "s3cret-token\n";
  testing::CommandResult with_token =
      Ferry({"health", target, "--auth-token-file=" + secret.path() + "/token"});
  EXPECT_EQ(with_token.exit_code, 0) << with_token.output;
  EXPECT_EQ(with_token.output, "SERVING\n");
  std::ofstream(secret.path() + "/wrong") << "wrong\n";
  EXPECT_EQ(Ferry({"health", target, "--auth-token-file=" + secret.path() + "/wrong"}).exit_code,
            1);
}

// One map output the server cannot read (a damaged index here; an unreadable file is the
// same) made the whole application unlistable, and the server logged nothing. It is
// listed with its error, the others are fetched, the fetch fails naming it, and the
// server logs it.
TEST(FerryCliTest, AMapOutputThatCannotBeReadSpoilsItselfOnly) {
  testing::TempDir data;
  ASSERT_EQ(
      Ferry({"gen", "--dir=" + data.path(), "--maps=4", "--partitions=8", "--total-bytes=256K"})
          .exit_code,
      0);
  std::ofstream(data.path() + "/app-0/shuffle_0_2_0.index", std::ios::trunc) << "12345";
  const std::string log = data.path() + "/../server.log";
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server =
      testing::ServerProcess::Start("server/ferry_server", data.path(), {}, log);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = "--server=" + (*server)->control_target();

  testing::CommandResult ls = Ferry({"ls", target, "--app=app-0"});
  EXPECT_EQ(ls.exit_code, 0) << ls.output;
  EXPECT_TRUE(absl::StrContains(ls.output, "shuffle 0 map 2 cannot be read: ")) << ls.output;
  EXPECT_TRUE(absl::StrContains(ls.output, "shuffle_0_2_0.index")) << ls.output;
  testing::CommandResult fetch = Ferry({"fetch", target});
  EXPECT_EQ(fetch.exit_code, 1) << fetch.output;
  EXPECT_TRUE(absl::StrContains(fetch.output, "map 2 of shuffle 0 cannot be read")) << fetch.output;
  EXPECT_TRUE(absl::StrContains(fetch.output, "fetched 24 blocks; 1 map output(s)"))
      << fetch.output;
  EXPECT_TRUE(absl::StrContains(testing::ReadTextFile(log), "cannot be read, listed as such"));
}

// Every key of `json` and of what it holds, recursively.
void CollectKeys(const nlohmann::json& json, std::vector<std::string>* keys) {
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) {
      keys->push_back(key);
      CollectKeys(value, keys);
    }
  } else if (json.is_array()) {
    for (const nlohmann::json& value : json) CollectKeys(value, keys);
  }
}

// ls and info printed protobuf's JSON (camelCase, 64-bit integers as strings), fetch and
// health snake_case with numbers. One style now; ls's sizes are for people; info names
// the Spark and metrics ports.
TEST(FerryCliTest, EveryCommandsJsonIsOneStyle) {
  testing::TempDir data;
  ASSERT_EQ(Ferry({"gen", "--dir=" + data.path(), "--maps=2", "--partitions=4", "--total-bytes=3M",
                   "--distribution=fixed"})
                .exit_code,
            0);
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server = testing::ServerProcess::Start(
      "server/ferry_server", data.path(), {"--metrics-address=127.0.0.1:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = "--server=" + (*server)->control_target();
  std::map<std::string, nlohmann::json> printed;
  for (const std::string command : {"ls", "ls --app=app-0", "info", "fetch", "health"}) {
    std::vector<std::string> args = absl::StrSplit(command, ' ');
    args.push_back(target);
    args.push_back("--json");
    testing::CommandResult ran = Ferry(args);
    ASSERT_EQ(ran.exit_code, 0) << command << ": " << ran.output;
    printed[command] = nlohmann::json::parse(ran.output, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(printed[command].is_discarded()) << command << ": " << ran.output;
    std::vector<std::string> keys;
    CollectKeys(printed[command], &keys);
    for (const std::string& key : keys) {
      EXPECT_TRUE(std::none_of(key.begin(), key.end(), [](char c) { return std::isupper(c); }))
          << command << " prints key " << key;
    }
  }
  const nlohmann::json& app = printed["ls"]["apps"][0];
  EXPECT_EQ(app["app_id"], "app-0");
  EXPECT_EQ(app["data_bytes"], 3u << 20);
  EXPECT_EQ(app["map_outputs"], 2);
  EXPECT_EQ(printed["ls"]["truncated"], false);
  const nlohmann::json& map_output = printed["ls --app=app-0"]["shuffles"][0]["map_outputs"][0];
  EXPECT_TRUE(map_output["data_bytes"].is_number_unsigned()) << map_output;
  EXPECT_TRUE(map_output["map_id"].is_number_integer()) << map_output;
  EXPECT_EQ(printed["info"]["metrics_port"], (*server)->metrics_port());
  EXPECT_EQ(printed["info"]["spark_port"], 0);
  EXPECT_TRUE(printed["info"]["ticket_ttl_ms"].is_number_integer());
  EXPECT_EQ(printed["fetch"]["bytes"], 3u << 20);
  EXPECT_EQ(printed["health"]["status"], "SERVING");

  testing::CommandResult ls = Ferry({"ls", target, "--app=app-0"});
  EXPECT_TRUE(absl::StrContains(ls.output, " 3.0 MiB ")) << ls.output;
  testing::CommandResult apps = Ferry({"ls", target});
  EXPECT_TRUE(absl::StrContains(apps.output, "\napp-0 ")) << apps.output;
  EXPECT_TRUE(absl::StrContains(apps.output, " 3.0 MiB\n")) << apps.output;
  testing::CommandResult info = Ferry({"info", target});
  EXPECT_TRUE(absl::StrContains(info.output,
                                absl::StrCat("metrics port  ", (*server)->metrics_port(), "\n")))
      << info.output;
  EXPECT_TRUE(absl::StrContains(info.output, "spark port    off\n")) << info.output;
}

// `ferry fetch --help` printed all 26 flags of every command and `ferry help fetch` was a
// usage error. Each command's help shows its usage and its flags only; --helpfull lists
// every flag under some command.
TEST(FerryCliTest, HelpIsPerCommand) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"help", "fetch"}, {"fetch", "--help"}, {"--server=x:1", "fetch", "-h"}}) {
    testing::CommandResult help = Ferry(args);
    EXPECT_EQ(help.exit_code, 0) << help.output;
    EXPECT_TRUE(absl::StrContains(help.output, "usage: ferry fetch --server=")) << help.output;
    EXPECT_TRUE(absl::StrContains(help.output, "--max-in-flight (64M)")) << help.output;
    EXPECT_FALSE(absl::StrContains(help.output, "--total-bytes")) << help.output;
  }
  testing::CommandResult gen = Ferry({"gen", "--help"});
  EXPECT_TRUE(absl::StrContains(gen.output, "--total-bytes (1G)")) << gen.output;
  EXPECT_FALSE(absl::StrContains(gen.output, "--max-in-flight")) << gen.output;

  testing::CommandResult list = Ferry({"help"});
  EXPECT_EQ(list.exit_code, 0);
  for (const char* command : {"gen", "fetch", "ls", "info", "health", "remove-app"}) {
    EXPECT_TRUE(absl::StrContains(list.output, absl::StrCat("\n  ", command, " "))) << command;
  }
  testing::CommandResult full = Ferry({"--helpfull"});
  EXPECT_EQ(full.exit_code, 0);
  EXPECT_FALSE(absl::StrContains(full.output, "Other flags")) << full.output;

  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"fetch", "ls"}, {"walk"}, {"help", "walk"}}) {
    testing::CommandResult wrong = Ferry(args);
    EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
    EXPECT_EQ(std::count(wrong.output.begin(), wrong.output.end(), '\n'), 1) << wrong.output;
  }
}

}  // namespace
}  // namespace ferry
