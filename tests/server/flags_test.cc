// ferry_server's flags: each sets the field it is declared beside, with that field's
// default, and docs/operations.md's flags table lists every one with its default.
#include "server/flags.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "server/ferry_server.h"
#include "tests/testing/command.h"
#include "tests/testing/temp_dir.h"

ABSL_DECLARE_FLAG(int64_t, max_pipes);
ABSL_DECLARE_FLAG(int64_t, disk_workers);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(std::string, auth_token_file);
ABSL_DECLARE_FLAG(std::string, tls_cert_file);
ABSL_DECLARE_FLAG(std::vector<std::string>, spark_dir_roots);
ABSL_DECLARE_FLAG(bool, spark_push_merge);
ABSL_DECLARE_FLAG(int64_t, spark_push_min_chunk_bytes);

namespace ferry {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The flags the server's flags libraries define, by dashed name: their defaults as
// --helpfull prints them.
std::map<std::string, std::string> LinkedFlags() {
  std::map<std::string, std::string> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    if (!absl::StartsWith(file, "server/") && !absl::StartsWith(file, "common/")) continue;
    flags[absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}))] = flag->DefaultValue();
  }
  return flags;
}

// docs/operations.md's flags table: each row's flag and its default (backticks gone,
// "empty" as the empty string).
std::map<std::string, std::string> DocumentedFlags() {
  std::map<std::string, std::string> flags;
  const std::string doc = ReadAll("docs/operations.md");
  const size_t begin = doc.find("\n## Flags\n");
  const size_t end = doc.find("\n## ", begin + 1);
  if (begin == std::string::npos) return flags;
  std::istringstream table(doc.substr(begin, end - begin));
  for (std::string line; std::getline(table, line);) {
    if (!absl::StartsWith(line, "| `--")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, " | ");
    if (cells.size() < 3) continue;
    std::string name(absl::StripSuffix(absl::StripPrefix(cells[0], "| `"), "`"));
    std::string value = cells[1] == "empty" ? "" : absl::StrReplaceAll(cells[1], {{"`", ""}});
    flags[name] = value;
  }
  return flags;
}

TEST(FlagsTest, OperationsDocListsEveryFlagWithItsDefault) {
  const std::map<std::string, std::string> linked = LinkedFlags();
  const std::map<std::string, std::string> documented = DocumentedFlags();
  ASSERT_GT(linked.size(), 40u);
  for (const auto& [name, value] : linked) {
    auto row = documented.find(name);
    if (row == documented.end()) {
      ADD_FAILURE() << name << " is a flag but not in docs/operations.md's flags table";
      continue;
    }
    EXPECT_EQ(row->second, value) << name << "'s default in docs/operations.md";
  }
  // The rest are the binary's own (server/main.cc): it must define them.
  absl::StatusOr<testing::CommandResult> help =
      testing::RunCommand({"server/ferry_server", "--helpfull"}, absl::Seconds(30));
  ASSERT_TRUE(help.ok()) << help.status();
  for (const auto& [name, value] : documented) {
    if (linked.count(name) != 0) continue;
    // --helpfull lists each as "  --name (default)", or "  --name" when it is empty.
    const std::string listed = absl::StrCat("  ", name, value.empty() ? "\n" : " (");
    EXPECT_NE(help->output.find(listed), std::string::npos)
        << name << " is in docs/operations.md but ferry_server has no such flag";
  }
}

TEST(FlagsTest, DefaultsAreTheOptionsStructsOwn) {
  FerryServerOptions options;
  ASSERT_TRUE(ApplyServerFlags(&options).ok());
  options.data_dir = "/data";  // --data-dir has no default
  const FerryServerOptions defaults;
  EXPECT_EQ(options.data.max_connections, defaults.data.max_connections);
  EXPECT_EQ(options.data.pipe_bytes, defaults.data.pipe_bytes);
  EXPECT_EQ(options.disks.workers_per_disk, defaults.disks.workers_per_disk);
  EXPECT_EQ(options.disks.unhealthy_after, defaults.disks.unhealthy_after);
  EXPECT_EQ(options.tickets.max_blocks, defaults.tickets.max_blocks);
  EXPECT_EQ(options.control.ticket_ttl, defaults.control.ticket_ttl);
  EXPECT_EQ(options.spark.service.max_open_chunks, defaults.spark.service.max_open_chunks);
  EXPECT_EQ(options.spark.auth.auth_engine_v1, defaults.spark.auth.auth_engine_v1);
  EXPECT_EQ(options.spark.blocking.threads, defaults.spark.blocking.threads);
  EXPECT_EQ(options.connection.io_timeout, defaults.connection.io_timeout);
  // The command line's own: fixed ports, one thread per core.
  EXPECT_EQ(options.control_address, "127.0.0.1:7070");
  EXPECT_EQ(options.data_address, "127.0.0.1:7071");
  EXPECT_EQ(options.data.threads,
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
}

TEST(FlagsTest, EachFlagSetsItsFieldAndABadValueNamesTheFlag) {
  absl::FlagSaver restore;
  absl::SetFlag(&FLAGS_max_pipes, 7);
  absl::SetFlag(&FLAGS_disk_workers, 3);
  absl::SetFlag(&FLAGS_threads, 5);
  absl::SetFlag(&FLAGS_spark_dir_roots, std::vector<std::string>{"/a", "/b"});
  absl::SetFlag(&FLAGS_spark_push_merge, true);
  absl::SetFlag(&FLAGS_spark_push_min_chunk_bytes, 4096);
  FerryServerOptions options;
  ASSERT_TRUE(ApplyServerFlags(&options).ok());
  EXPECT_TRUE(options.spark.push.enabled);
  EXPECT_EQ(options.spark.push.min_chunk_bytes, 4096);
  EXPECT_EQ(options.data.max_pipes, 7u);
  EXPECT_EQ(options.disks.workers_per_disk, 3u);
  EXPECT_EQ(options.data.threads, 5);
  EXPECT_EQ(options.spark.executors.dir_roots, (std::vector<std::string>{"/a", "/b"}));

  absl::SetFlag(&FLAGS_disk_workers, -1);
  absl::Status status = ApplyServerFlags(&options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "--disk-workers must be between 1 and 256, not -1");
  // In the field's type but past its range: Validate's, naming the flag too.
  absl::SetFlag(&FLAGS_disk_workers, 1000);
  ASSERT_TRUE(ApplyServerFlags(&options).ok());
  options.data_dir = "/data";
  EXPECT_EQ(options.Validate().message(), "--disk-workers must be between 1 and 256, not 1000");
}

TEST(FlagsTest, FileFlagsReadTheirFilesAndNameThemWhenTheyCannot) {
  absl::FlagSaver restore;
  testing::TempDir dir;
  const std::string token = dir.path() + "/token";
  std::ofstream(token) << "s3cret\n";
  absl::SetFlag(&FLAGS_auth_token_file, token);
  FerryServerOptions options;
  ASSERT_TRUE(ApplyServerFlags(&options).ok());
  EXPECT_TRUE(options.control.auth_token == "s3cret");

  absl::SetFlag(&FLAGS_tls_cert_file, dir.path() + "/missing.pem");
  const absl::Status status = ApplyServerFlags(&options);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "missing.pem")) << status;
}

}  // namespace
}  // namespace ferry
