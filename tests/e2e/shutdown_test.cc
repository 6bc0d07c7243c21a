// ferry_server as a process, stopped by a signal: it stops accepting, closes idle
// connections, finishes the requests it has already received, and exits 0; a peer that
// stops reading is cut when --drain-timeout runs out, and the exit is still clean.
#include <linux/sockios.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/control_client.h"
#include "common/version.h"
#include "gtest/gtest.h"
#include "tests/e2e/raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/loopback.h"
#include "tests/testing/server_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::ReadBytes;
using ::ferry::testing::ServerProcess;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-1";
constexpr size_t kBlockBytes = size_t{48} << 20;
constexpr char kServerBinary[] = "server/ferry_server";

// connect(2) to the port, without failing the test: 0 or the errno.
int TryConnect(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in addr = testing::LoopbackAddress(port);
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 ? 0
                                                                                          : errno;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = dir_.path() + "/data";
    ASSERT_EQ(::mkdir(data_dir_.c_str(), 0755), 0);
    data_.AddMapOutput(data_dir_, kApp, 0, 0, {kBlockBytes, 1000});
    log_ = dir_.path() + "/server.log";
  }

  void StartServer(absl::Duration drain, const std::string& log_level = "info",
                   std::vector<std::string> more = {}) {
    std::vector<std::string> flags = {"--threads=2",
                                      absl::StrCat("--drain-timeout=", absl::FormatDuration(drain)),
                                      "--log-level=" + log_level, "--metrics-address=127.0.0.1:0"};
    flags.insert(flags.end(), more.begin(), more.end());
    auto started = ServerProcess::Start(kServerBinary, data_dir_, flags, log_);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  // A ticket for the 48 MiB block (reduce 0), or the 1,000-byte one (reduce 1).
  Ticket OpenTicket(int32_t reduce = 0) {
    auto handle =
        control_.OpenStream(server_->control_target(), kApp, {{0, 0, reduce, reduce + 1}});
    EXPECT_TRUE(handle.ok()) << handle.status();
    return handle.ok() ? testing::TicketOf(handle->ticket()) : Ticket{};
  }

  TempDir dir_;
  std::string data_dir_;
  std::string log_;
  DataSet data_;
  ControlClient control_{absl::Seconds(5)};
  std::unique_ptr<ServerProcess> server_;
};

// At --log-level=warning too, the log says that the server served, where, and what its
// drain did.
TEST_F(ShutdownTest, SigtermFinishesReceivedRequestsRefusesNewOnesAndExitsZero) {
  ASSERT_NO_FATAL_FAILURE(StartServer(absl::Seconds(60), "warning"));
  const Ticket ticket = OpenTicket();
  UniqueFd busy = testing::Dial(server_->data_port());
  UniqueFd idle = testing::Dial(server_->data_port());
  // Two pipelined requests: the whole block, then its tail from a resume offset. Both
  // are in the server's hands before the signal.
  constexpr uint64_t kResume = kBlockBytes - 12345;
  testing::SendRequest(busy.get(), ticket, 0, 1, 0);
  testing::SendRequest(busy.get(), ticket, 0, 1, kResume);
  // The first megabyte arrives, and then the client reads nothing for a while: most of
  // the block is still to be sent when the signal comes.
  std::string got = ReadBytes(busy.get(), kResponseHeaderBytes + (size_t{1} << 20));
  ASSERT_EQ(got.size(), kResponseHeaderBytes + (size_t{1} << 20));
  // Both requests are in the server's socket buffer once its TCP has acknowledged them:
  // nothing is left unacknowledged in ours.
  int unacked = -1;
  ASSERT_TRUE(testing::WaitFor([&] {
    return ::ioctl(busy.get(), SIOCOUTQ, &unacked) == 0 && unacked == 0;
  })) << unacked
      << " bytes unacknowledged";
  // The idle connection is the server's too (accepted, not only in its backlog, where the
  // signal would reset it uncounted).
  ASSERT_TRUE(testing::WaitFor([&] {
    absl::StatusOr<double> open =
        testing::ScrapeMetric(server_->metrics_port(), "ferry_connections_open");
    return open.ok() && *open == 2;
  }));
  const absl::Time signalled = absl::Now();
  ASSERT_EQ(::kill(server_->pid(), SIGTERM), 0);

  // An idle connection is closed at once (EOF, no frame), and new connections are
  // refused once the listeners are gone, while the busy connection still waits.
  char byte;
  EXPECT_EQ(::recv(idle.get(), &byte, 1, 0), 0);
  int refused = 0;
  testing::WaitFor([&] { return (refused = TryConnect(server_->data_port())) != 0; });
  EXPECT_EQ(refused, ECONNREFUSED);
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(10));

  // Both requests are answered in full, every byte as written, then the connection ends.
  got += testing::ReadUntilClose(busy.get());
  const std::string block = data_.Expected(0, 0, 0, 1);
  ASSERT_EQ(got.size(), 2 * kResponseHeaderBytes + kBlockBytes + (kBlockBytes - kResume));
  const ResponseHeader first = testing::Header(got);
  EXPECT_EQ(first.kind, FrameKind::kBlock);
  EXPECT_EQ(first.length, kBlockBytes);
  EXPECT_TRUE(got.compare(kResponseHeaderBytes, kBlockBytes, block) == 0);
  const absl::string_view second =
      absl::string_view(got).substr(kResponseHeaderBytes + kBlockBytes);
  EXPECT_EQ(testing::Header(second).offset, kResume);
  EXPECT_TRUE(second.substr(kResponseHeaderBytes) == absl::string_view(block).substr(kResume));

  absl::StatusOr<int> status = server_->SignalAndWait(0, absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0) << ReadFile(log_);
  const std::string log = ReadFile(log_);
  EXPECT_TRUE(absl::StrContains(
      log,
      absl::StrCat("] ferry_server ", kFerryVersion, " serving ", data_dir_, ": control plane on ",
                   server_->control_target(), " (plaintext, no auth token)")))
      << log;
  EXPECT_TRUE(absl::StrContains(log,
                                ": 1 idle connections closed, 1 finished the requests they "
                                "had received, 0 cut at --drain-timeout=1m;"))
      << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2) << log;
}

// An upgrade: a second ferry_server started with --take-over takes the first one's
// sockets, its connection and its open stream. The client goes on on the same
// connection with the same ticket, served by the second, and the first exits 0.
TEST_F(ShutdownTest, AServerTakingOverGoesOnWithTheConnectionsAndStreams) {
  const std::string state = dir_.path() + "/state";
  ASSERT_EQ(::mkdir(state.c_str(), 0700), 0);
  ASSERT_NO_FATAL_FAILURE(StartServer(absl::Seconds(60), "info", {"--state-dir=" + state}));
  const Ticket ticket = OpenTicket(1);
  const std::string block = data_.Expected(0, 0, 1, 2);
  UniqueFd client = testing::Dial(server_->data_port());
  const auto fetch = [&](int fd) {
    testing::SendRequest(fd, ticket, 0, 1, 0);
    const std::string got = ReadBytes(fd, kResponseHeaderBytes + block.size());
    return got.size() == kResponseHeaderBytes + block.size() &&
           got.compare(kResponseHeaderBytes, block.size(), block) == 0;
  };
  ASSERT_TRUE(fetch(client.get()));
  const uint16_t data_port = server_->data_port();
  std::unique_ptr<ServerProcess> first = std::move(server_);
  const std::string first_log = log_;
  log_ = dir_.path() + "/next.log";
  ASSERT_NO_FATAL_FAILURE(
      StartServer(absl::Seconds(60), "info", {"--state-dir=" + state, "--take-over"}));
  absl::StatusOr<int> status = first->SignalAndWait(0, absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << ReadFile(first_log);
  EXPECT_EQ(server_->data_port(), data_port);
  EXPECT_TRUE(fetch(client.get())) << ReadFile(log_);
  UniqueFd another = testing::Dial(server_->data_port());
  EXPECT_TRUE(fetch(another.get()));
  const std::string log = ReadFile(log_);
  EXPECT_TRUE(absl::StrContains(log, "serving 1 streams handed over")) << log;
  EXPECT_TRUE(absl::StrContains(log, "serving 1 of the 1 connections handed over")) << log;
  EXPECT_TRUE(absl::StrContains(ReadFile(first_log), "1 connections released"))
      << ReadFile(first_log);
}

TEST_F(ShutdownTest, APeerThatStopsReadingIsCutAtTheDrainTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartServer(absl::Seconds(1)));
  const Ticket ticket = OpenTicket();
  UniqueFd stalled = testing::Dial(server_->data_port());
  testing::SendRequest(stalled.get(), ticket, 0, 1, 0);
  ASSERT_EQ(ReadBytes(stalled.get(), kResponseHeaderBytes).size(), kResponseHeaderBytes);

  const absl::Time signalled = absl::Now();
  absl::StatusOr<int> status = server_->SignalAndWait(SIGTERM, absl::Seconds(20));
  const absl::Duration took = absl::Now() - signalled;
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0) << ReadFile(log_);
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(15));
  EXPECT_TRUE(absl::StrContains(ReadFile(log_), "] ferry_server: stopped, drained in "))
      << ReadFile(log_);
  EXPECT_TRUE(absl::StrContains(ReadFile(log_),
                                ": 0 idle connections closed, 0 finished the "
                                "requests they had received, 1 cut at "
                                "--drain-timeout=1s; 1 streams open"))
      << ReadFile(log_);
  // The client sees the block end early: it can tell, and retry elsewhere.
  EXPECT_LT(testing::ReadUntilClose(stalled.get()).size(), kBlockBytes);
}

}  // namespace
}  // namespace ferry
