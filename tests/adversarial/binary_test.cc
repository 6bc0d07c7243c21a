// Attacks on the ferry_server binary itself, where the process's own limits matter:
// descriptors and memory.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/control_client.h"
#include "client/shuffle_client.h"
#include "common/spark/wire.h"
#include "gtest/gtest.h"
#include "tests/e2e/spark_raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/loopback.h"
#include "tests/testing/server_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using testing::ServerProcess;

constexpr char kServerBinary[] = "server/ferry_server";
constexpr char kApp[] = "app-0";

class BinaryAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::RaiseFdLimit(4096);  // this test's own sockets
    data_dir_ = dir_.path() + "/data";
    ASSERT_EQ(::mkdir(data_dir_.c_str(), 0755), 0);
    data_.AddMapOutput(data_dir_, kApp, 0, 0, std::vector<size_t>(64, 1000));
  }

  void Start(const std::vector<std::string>& args, uint64_t fd_limit = 0) {
    auto started = ServerProcess::Start(kServerBinary, data_dir_, args, log_path(), fd_limit);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  std::string log_path() const { return dir_.path() + "/server.log"; }
  std::string Log() const {
    std::ifstream in(log_path());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  testing::TempDir dir_;
  std::string data_dir_;
  testing::DataSet data_;
  std::unique_ptr<ServerProcess> server_;
};

// Under a 1,024-descriptor limit, 1,100 idle data connections took the
// process to EMFILE and gRPC never accepted again. The server now fits its connection
// limit to the descriptors it has, and keeps a reserve for the control plane.
TEST_F(BinaryAttackTest, IdleDataConnectionsCannotStarveTheControlPlane) {
  ASSERT_NO_FATAL_FAILURE(Start(
      {"--threads=2", "--max-connections-per-client=5000", "--metrics-address=127.0.0.1:0"}, 1024));
  EXPECT_NE(Log().find("--max-connections lowered from 10000"), std::string::npos) << Log();
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 1100; ++i) idle.push_back(testing::ConnectLoopback(server_->data_port()));
  // Every connection accepted or refused.
  const auto counter = [&](const char* name) {
    absl::StatusOr<double> value = testing::ScrapeMetric(server_->metrics_port(), name);
    return value.ok() ? *value : -1;
  };
  EXPECT_TRUE(testing::WaitFor([&] {
    return counter("ferry_connections_accepted_total") +
               counter("ferry_connections_refused_total") >=
           1100;
  })) << counter("ferry_connections_accepted_total")
      << " accepted, " << counter("ferry_connections_refused_total") << " refused";
  EXPECT_LT(server_->OpenFdCount(), 1024);
  ControlClient control(absl::Seconds(5));
  auto info = control.GetServerInfo(server_->control_target());
  EXPECT_TRUE(info.ok()) << info.status();
  idle.clear();
  ShuffleClient client;
  auto fetched = client.FetchToBuffers(kApp, data_.AllPartitions(server_->control_target()));
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[63], data_.Expected(0, 0, 63, 64));
}

// 380,000 copies of one 64-partition block cost 24 s of CPU and 2.2 GiB of
// RSS per call. Refused before any work, the calls leave the server as it was.
TEST_F(BinaryAttackTest, HugeOpenStreamsCostTheServerNothing) {
  ASSERT_NO_FATAL_FAILURE(Start({"--threads=1"}));
  const double rss_before = server_->RssMiB();
  const double cpu_before = server_->CpuSeconds();
  ControlClient control(absl::Seconds(30));
  const std::vector<BlockId> many(380000, BlockId{0, 0, 0, 64});
  for (int i = 0; i < 3; ++i) {
    auto handle = control.OpenStream(server_->control_target(), kApp, many);
    EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument) << handle.status();
  }
  const double rss_growth = server_->RssMiB() - rss_before;
  const double cpu = server_->CpuSeconds() - cpu_before;
  std::printf("3 OpenStreams of 380,000 x 64 partitions: server RSS +%.1f MiB, CPU %.2f s\n",
              rss_growth, cpu);
  // gRPC holds each 4.6 MB request while it parses it, and allocators (ASan's
  // quarantine above all) keep some of that; the defect cost 2.2 GiB and 24 s a call.
  EXPECT_LT(rss_growth, 512.0);
  EXPECT_LT(cpu, 10.0);
}

TEST_F(BinaryAttackTest, OutOfRangeLimitsAreRefusedNotClamped) {
  for (const std::string flag :
       {"--ticket-ttl=0s", "--idle-timeout=-1s", "--io-timeout=0s", "--max-open-files=0",
        "--max-connections=-5", "--first-request-timeout=0s", "--max-streams-per-client=0",
        "--sweep-interval=-5s", "--sweep-interval=0", "--max-request-buffer-bytes=0",
        "--threads=-1"}) {
    auto started = ServerProcess::Start(kServerBinary, data_dir_, {flag}, log_path());
    EXPECT_FALSE(started.ok()) << flag << " was accepted";
    EXPECT_NE(Log().find("must be"), std::string::npos) << flag << ": " << Log();
  }
}

TEST_F(BinaryAttackTest, HelpListsTheServersFlags) {
  const auto output_of = [](const std::string& command, int* status) {
    FILE* pipe = ::popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::string text;
    char buffer[4096];
    for (size_t n; pipe != nullptr && (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) {
      text.append(buffer, n);
    }
    *status = pipe != nullptr ? ::pclose(pipe) : -1;
    return text;
  };
  // --help: the essentials, for people, exit 0; --helpfull: every flag, grouped.
  int status = -1;
  const std::string help = output_of(absl::StrCat(kServerBinary, " --help 2>&1"), &status);
  EXPECT_EQ(status, 0) << help;
  EXPECT_LT(std::count(help.begin(), help.end(), '\n'), 100) << help;
  for (const char* wanted : {"--data-dir", "--spark-address", "--check-config", "--helpfull",
                             "--flagfile", "Spark's front door:"}) {
    EXPECT_NE(help.find(wanted), std::string::npos) << wanted << " missing from:\n" << help;
  }
  EXPECT_EQ(help.find("--max-stream-blocks"), std::string::npos) << help;
  EXPECT_EQ(output_of(absl::StrCat(kServerBinary, " -h 2>&1"), &status), help);
  const std::string full = output_of(absl::StrCat(kServerBinary, " --helpfull 2>&1"), &status);
  EXPECT_EQ(status, 0);
  for (const char* flag : {"--data-dir", "--max-connections-per-client", "--first-request-timeout",
                           "--max-stream-blocks", "Streams:"}) {
    EXPECT_NE(full.find(flag), std::string::npos) << flag << " missing from:\n" << full;
  }
  EXPECT_EQ(full.find("--data_dir"), std::string::npos) << "spelled as absl spells it";
}

// An unauthenticated peer's app id holding a newline and a glog-looking line
// made a line of the server's log begin with the attacker's text.
TEST_F(BinaryAttackTest, APeerCannotForgeALineOfTheLog) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--threads=1", "--spark-address=127.0.0.1:0", "--spark-dir-roots=" + data_dir_}));
  const std::string forged = "E1203 07:00:00.000000 4242 ferry_server.cc:1] FORGED LINE";
  {
    testing::SparkClient client(server_->spark_port());
    const testing::Reply reply = client.Call(spark::EncodeFetchShuffleBlocks(
        {absl::StrCat("x\n", forged, "\r\n", forged), "1", 0, {0}, {{0}}, false}));
    EXPECT_EQ(reply.type, spark::MessageType::kRpcFailure);
  }
  ASSERT_TRUE(server_->SignalAndWait(SIGTERM, absl::Seconds(20)).ok());
  const std::string log = Log();
  EXPECT_EQ(log.find("\n" + forged), std::string::npos) << log;
  EXPECT_EQ(log.find("\r"), std::string::npos) << log;
  EXPECT_NE(log.find("x\\x0a" + forged), std::string::npos) << log;
}

}  // namespace
}  // namespace ferry
