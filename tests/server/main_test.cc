// ferry_server as an operator starts it: the binary, its output and exit codes.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/testing/command.h"
#include "tests/testing/http_get.h"
#include "tests/testing/loopback.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/server_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

constexpr char kServer[] = "server/ferry_server";

testing::CommandResult Server(std::vector<std::string> args) {
  args.insert(args.begin(), kServer);
  absl::StatusOr<testing::CommandResult> ran = testing::RunCommand(args, absl::Seconds(60));
  EXPECT_TRUE(ran.ok()) << ran.status();
  return ran.ok() ? *ran : testing::CommandResult{};
}

class CheckConfigTest : public ::testing::Test {
 protected:
  // A flag file of these lines, after a comment and a blank line (so line numbers count).
  std::string FlagFile(const std::string& name, const std::vector<std::string>& lines) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream out(path);
    out << "# ferry_server's flags\n\n";
    for (const std::string& line : lines) out << line << "\n";
    return path;
  }
  testing::TempDir dir_;
};

// `ferry_server --check-config` (or -t), as nginx -t: the flags and the flag file parsed,
// the files and dirs they name opened, what would be served printed, nothing served.
TEST_F(CheckConfigTest, AGoodConfigurationIsPrintedAndNothingServed) {
  const std::string flags =
      FlagFile("good.flags", {"--data-dir=" + dir_.path(), "--spark-address=127.0.0.1:7337",
                              "--spark-dir-roots=" + dir_.path(), "--state-dir=" + dir_.path(),
                              "--control-address=127.0.0.1:1", "--data-address=127.0.0.1:2"});
  for (const char* check : {"--check-config", "-t"}) {
    testing::CommandResult ran = Server({"--flagfile=" + flags, check});
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    EXPECT_TRUE(absl::StrContains(ran.output, "ferry_server: the configuration is good"))
        << ran.output;
    EXPECT_TRUE(absl::StrContains(ran.output, "spark-address: 127.0.0.1:7337")) << ran.output;
    EXPECT_TRUE(absl::StrContains(ran.output, "spark.authenticate: off")) << ran.output;
  }
}

TEST_F(CheckConfigTest, AWrongLineIsNamedByFileAndLine) {
  struct Case {
    std::string line;
    int exit_code;
    std::string said;
  };
  for (const Case& c : std::vector<Case>{
           {"--no-such-flag=3", 2, ":4: unknown flag --no-such-flag"},
           {"data-dir=/x", 2, ":4: 'data-dir=/x' is not a flag"},
           {"--threads=abc", 2, ":4: --threads: Illegal value 'abc'"},
           {"--max-connections=0", 2, ":4: --max-connections must be between 1 and"},
           {"--spark-address=127.0.0.1:7337", 2, "the Spark front door needs the roots"},
       }) {
    const std::string flags = FlagFile("bad.flags", {"--data-dir=" + dir_.path(), c.line});
    testing::CommandResult ran = Server({"--flagfile=" + flags, "--check-config"});
    EXPECT_EQ(ran.exit_code, c.exit_code) << c.line << ": " << ran.output;
    EXPECT_TRUE(absl::StrContains(ran.output, c.said)) << c.line << ": " << ran.output;
    if (c.exit_code == 2 && c.said[0] == ':') {
      EXPECT_TRUE(absl::StrContains(ran.output, flags + c.said)) << ran.output;
    }
  }
  // What the flags name is opened: a data dir that is not there.
  testing::CommandResult missing =
      Server({"--data-dir=" + dir_.path() + "/none", "--check-config"});
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(absl::StrContains(missing.output, dir_.path() + "/none")) << missing.output;
}

// Flag files are regular files within a bound, nested at most 8 deep and never in a
// circle; a nested one's lines are checked as the outer one's, named by file and line.
TEST_F(CheckConfigTest, FlagFilesAreBoundedAndNestedOnesCheckedAsTheOuter) {
  const std::string self = dir_.path() + "/self.flags";
  FlagFile("self.flags", {"--data-dir=" + dir_.path(), "--flagfile=" + self});
  const std::string nested = FlagFile("nested.flags", {"--threads=abc"});
  const std::string outer =
      FlagFile("outer.flags", {"--data-dir=" + dir_.path(), "--flag-file=" + nested});
  std::string deep = FlagFile("deep0.flags", {"--data-dir=" + dir_.path()});
  for (int i = 1; i <= 9; ++i) {
    deep = FlagFile(absl::StrCat("deep", i, ".flags"), {"--flagfile=" + deep});
  }
  const std::string big = dir_.path() + "/big.flags";
  {
    std::ofstream out(big);
    for (int i = 0; i < 70000; ++i) out << "# a comment line of some length\n";
  }
  struct Case {
    std::string file;
    std::string said;
  };
  for (const Case& c : std::vector<Case>{
           {self, self + ": this --flagfile includes itself"},
           {"/dev/zero", "/dev/zero: this --flagfile is not a regular file"},
           {dir_.path(), dir_.path() + ": this --flagfile is not a regular file"},
           {outer, nested + ":3: --threads: Illegal value 'abc'"},
           {deep, "--flagfile nested more than 8 deep"},
           {big, big + ": this --flagfile holds more than 1048576 bytes"},
       }) {
    testing::CommandResult ran = Server({"--flagfile=" + c.file, "--check-config"});
    EXPECT_EQ(ran.exit_code, 2) << c.file << ": " << ran.output;
    EXPECT_TRUE(absl::StrContains(ran.output, c.said)) << c.file << ": " << ran.output;
  }
}

// --check-config reads every state file the server would read, and says what it keeps
// or why it would set one aside; it writes none.
TEST_F(CheckConfigTest, TheStateFilesAreReadAsTheServerWouldReadThem) {
  const std::string state = dir_.path() + "/state";
  ASSERT_EQ(::mkdir(state.c_str(), 0700), 0);
  std::ofstream(state + "/spark-push-finalized") << "app-1\t1\t3\t0\njunk\n";
  const std::string flags =
      FlagFile("push.flags",
               {"--data-dir=" + dir_.path(), "--spark-address=127.0.0.1:7337",
                "--spark-dir-roots=" + dir_.path(), "--state-dir=" + state, "--spark-push-merge",
                "--control-address=127.0.0.1:1", "--data-address=127.0.0.1:2"});
  testing::CommandResult ran = Server({"--flagfile=" + flags, "--check-config"});
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_TRUE(absl::StrContains(ran.output, "Spark executors kept: 0")) << ran.output;
  EXPECT_TRUE(absl::StrContains(ran.output,
                                "spark-push-finalized: 1 finalized merges, 1 damaged "
                                "lines skipped"))
      << ran.output;
  ASSERT_EQ(::truncate((state + "/spark-push-finalized").c_str(), off_t{65} << 20), 0);
  ran = Server({"--flagfile=" + flags, "--check-config"});
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_TRUE(absl::StrContains(ran.output, "would be set aside at start")) << ran.output;
  struct stat st {};
  ASSERT_EQ(::stat((state + "/spark-push-finalized").c_str(), &st), 0);  // still there
  // A journal of executors that is not one: the error the server would meet.
  std::ofstream(state + "/spark-executors") << "\xff\xff\xff\xffgarbage";
  ran = Server({"--flagfile=" + flags, "--check-config"});
  EXPECT_TRUE(absl::StrContains(ran.output, "spark-executors")) << ran.output;
}

// Every usage error: one line naming the flag, exit 2.
TEST(MainTest, UsageErrorsAreOneLineAndExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--no-such-flag=1"}, {"--threads=abc"}, {"--threads=-1"}, {"--max-connections=0"}}) {
    std::vector<std::string> with_dir = args;
    with_dir.push_back("--data-dir=/tmp");
    testing::CommandResult ran = Server(with_dir);
    EXPECT_EQ(ran.exit_code, 2) << args[0] << ": " << ran.output;
    const std::string name = args[0].substr(0, args[0].find('='));
    EXPECT_TRUE(absl::StrContains(ran.output, name)) << ran.output;
    EXPECT_EQ(std::count(ran.output.begin(), ran.output.end(), '\n'), 1) << ran.output;
  }
  EXPECT_EQ(Server({"--version"}).exit_code, 0);
}

// A port in use printed gRPC's internal error blob before the line that said so, a bad
// address added a wrong hint, and civetweb said "null context when constructing
// CivetServer". Each is one line naming the flag, the address and why.
TEST(MainTest, AnAddressThatCannotBeListenedOnIsOneLine) {
  testing::TempDir dir;
  absl::StatusOr<SocketAddress> any = SocketAddress::Numeric("127.0.0.1", 0);
  ASSERT_TRUE(any.ok());
  absl::StatusOr<UniqueFd> taken = Listen(*any, 16);
  ASSERT_TRUE(taken.ok()) << taken.status();
  const std::string address = SocketAddress::LocalOf(taken->get())->ToString();
  for (const char* flag : {"control-address", "data-address", "metrics-address"}) {
    testing::CommandResult ran =
        Server({"--data-dir=" + dir.path(), "--threads=1", absl::StrCat("--", flag, "=", address)});
    EXPECT_EQ(ran.exit_code, 1) << ran.output;
    EXPECT_TRUE(absl::StrContains(
        ran.output, absl::StrCat("ferry_server: --", flag, ": cannot listen on ", address,
                                 ": Address already in use (another process listens on this "
                                 "port)\n")))
        << ran.output;
    EXPECT_EQ(std::count(ran.output.begin(), ran.output.end(), '\n'), 1) << ran.output;
  }
  testing::CommandResult nowhere =
      Server({"--data-dir=" + dir.path(), "--threads=1", "--control-address=192.0.2.1:7070"});
  EXPECT_TRUE(absl::StrContains(nowhere.output, "no interface of this host has this address"))
      << nowhere.output;
  EXPECT_EQ(std::count(nowhere.output.begin(), nowhere.output.end(), '\n'), 1) << nowhere.output;
}

// A datagram socket bound at the abstract address `name` ('@name' in $NOTIFY_SOCKET: no
// path, nothing left behind), as systemd's notify socket is; *addr and *length its
// address.
UniqueFd NotifySocket(const std::string& name, sockaddr_un* addr, socklen_t* length) {
  UniqueFd notify(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  std::copy(name.begin(), name.end(), addr->sun_path + 1);
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  EXPECT_EQ(::bind(notify.get(), reinterpret_cast<const sockaddr*>(addr), *length), 0);
  return notify;
}

// systemd's Type=notify: READY=1 (with the serving line as STATUS) once every plane
// listens, STOPPING=1 when a drain begins; sent to the datagram socket $NOTIFY_SOCKET
// names, as systemd passes it.
TEST(MainTest, TellsSystemdWhenItIsReadyAndWhenItStops) {
  testing::TempDir dir;
  const std::string name = absl::StrCat("ferry-notify-", ::getpid());
  sockaddr_un addr;
  socklen_t length = 0;
  UniqueFd notify = NotifySocket(name, &addr, &length);
  const timeval wait{.tv_sec = 30, .tv_usec = 0};
  ASSERT_EQ(::setsockopt(notify.get(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait)), 0);
  const auto next = [&] {
    char buffer[4096];
    const ssize_t n = ::recv(notify.get(), buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  };

  ::setenv("NOTIFY_SOCKET", ("@" + name).c_str(), 1);
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server =
      testing::ServerProcess::Start("server/ferry_server", dir.path(), {"--threads=1"});
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string ready = next();
  EXPECT_TRUE(absl::StartsWith(ready, "READY=1\nSTATUS=ferry_server ")) << ready;
  EXPECT_TRUE(absl::StrContains(ready, "control plane on " + (*server)->control_target())) << ready;
  ASSERT_TRUE((*server)->SignalAndWait(SIGTERM, absl::Seconds(30)).ok());
  EXPECT_EQ(next(), "STOPPING=1\nSTATUS=draining");
}

// A manager whose notify socket's queue is full (it reads nothing) cannot keep the
// server from serving or from stopping on SIGTERM.
TEST(MainTest, AFullNotifySocketNeverHoldsTheServer) {
  testing::TempDir dir;
  const std::string name = absl::StrCat("ferry-notify-full-", ::getpid());
  sockaddr_un addr;
  socklen_t length = 0;
  UniqueFd notify = NotifySocket(name, &addr, &length);
  UniqueFd filler(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  int sent = 0;
  for (; sent < 100000; ++sent) {
    if (::sendto(filler.get(), "x", 1, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&addr),
                 length) != 1) {
      break;
    }
  }
  ASSERT_EQ(errno, EAGAIN) << "the queue did not fill after " << sent << " datagrams";
  ::setenv("NOTIFY_SOCKET", ("@" + name).c_str(), 1);
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server =
      testing::ServerProcess::Start("server/ferry_server", dir.path(), {"--threads=1"});
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> stopped = (*server)->SignalAndWait(SIGTERM, absl::Seconds(30));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(*stopped, 0);
}

// A server's data dir and state dir (--state-dir, where its hand-over socket is).
struct ServerDirs {
  ServerDirs() {
    std::filesystem::create_directories(data);
    std::filesystem::create_directories(state);
  }
  testing::TempDir dir;
  const std::string data = dir.path() + "/data";
  const std::string state = dir.path() + "/state";
};

// systemctl reload (ExecReload sends SIGUSR2): the server starts its binary again with
// --take-over, and the new process takes over. Under systemd the new one says it is the
// main process (MAINPID=, confirmed by a barrier: systemd has read it before the old one
// exits), then READY=1; the old one exits 0, and the new one serves the same ports.
TEST(MainTest, SigUsr2StartsASuccessorThatSystemdTakesAsTheMainProcess) {
  const ServerDirs dirs;
  const std::string& data = dirs.data;
  const std::string& state = dirs.state;
  const std::string name = absl::StrCat("ferry-notify-reload-", ::getpid());
  sockaddr_un addr;
  socklen_t length = 0;
  UniqueFd notify = NotifySocket(name, &addr, &length);
  const timeval wait{.tv_sec = 30, .tv_usec = 0};
  ASSERT_EQ(::setsockopt(notify.get(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait)), 0);
  // The next message, its sender (as systemd reads it) and, as systemd does with a
  // barrier's pipe, any descriptor it carries closed.
  const auto next = [&](pid_t* sender) {
    char buffer[4096];
    iovec data_vec{buffer, sizeof(buffer)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * 4)];
    msghdr message{};
    message.msg_iov = &data_vec;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(notify.get(), &message, MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_type == SCM_RIGHTS) {
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          ::close(fd);
        }
      } else if (c->cmsg_type == SCM_CREDENTIALS && sender != nullptr) {
        ucred who{};
        std::memcpy(&who, CMSG_DATA(c), sizeof(who));
        *sender = who.pid;
      }
    }
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  };
  const int on = 1;
  ASSERT_EQ(::setsockopt(notify.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)), 0);
  // The successor is the old server's child: when that exits, it becomes this test's.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);

  ::setenv("NOTIFY_SOCKET", ("@" + name).c_str(), 1);
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server = testing::ServerProcess::Start(
      "server/ferry_server", data, {"--threads=1", "--state-dir=" + state});
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(server.ok()) << server.status();
  const pid_t old_pid = (*server)->pid();
  ASSERT_TRUE(absl::StartsWith(next(nullptr), "READY=1"));
  ASSERT_EQ(::kill(old_pid, SIGUSR2), 0);
  pid_t successor = 0;
  const std::string main_pid = next(&successor);
  ASSERT_TRUE(absl::StartsWith(main_pid, "MAINPID=")) << main_pid;
  EXPECT_EQ(main_pid, absl::StrCat("MAINPID=", successor));
  EXPECT_NE(successor, old_pid);
  EXPECT_EQ(next(nullptr), "BARRIER=1");
  const std::string ready = next(nullptr);
  EXPECT_TRUE(absl::StartsWith(ready, "READY=1")) << ready;
  EXPECT_TRUE(absl::StrContains(ready, absl::StrCat("taken over from pid ", old_pid))) << ready;
  absl::StatusOr<int> old_exit = (*server)->SignalAndWait(0, absl::Seconds(30));
  ASSERT_TRUE(old_exit.ok()) << old_exit.status();
  EXPECT_TRUE(WIFEXITED(*old_exit) && WEXITSTATUS(*old_exit) == 0) << *old_exit;
  // The same control port, served by the successor.
  absl::StatusOr<HostPort> target = ParseHostPort((*server)->control_target());
  ASSERT_TRUE(target.ok());
  EXPECT_FALSE(CheckCanListen((*server)->control_target()).ok());
  ASSERT_GT(successor, 0);
  ASSERT_EQ(::kill(successor, SIGTERM), 0);
  EXPECT_EQ(next(nullptr), "STOPPING=1\nSTATUS=draining");
  int status = 0;
  ASSERT_EQ(::waitpid(successor, &status, 0), successor);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// In a container an exit would be restarted: with --idle-after-hand-over the old server,
// handed over, stays without a socket or a thread of the data plane until SIGTERM.
TEST(MainTest, AnIdleOldServerHoldsNothingUntilSigterm) {
  const ServerDirs dirs;
  const std::string& data = dirs.data;
  const std::string& state = dirs.state;
  const std::string old_log = dirs.dir.path() + "/old.log";
  testing::ServerProcessOptions logged;
  logged.log_path = old_log;
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> old_server =
      testing::ServerProcess::Start("server/ferry_server", data,
                                    {"--threads=1", "--state-dir=" + state,
                                     "--idle-after-hand-over", "--metrics-address=127.0.0.1:0"},
                                    logged);
  ASSERT_TRUE(old_server.ok()) << old_server.status();
  // A connection the old server serves: handed over, it is the new one's alone.
  const UniqueFd client = testing::ConnectLoopback((*old_server)->data_port());
  ASSERT_TRUE(testing::WaitFor([&] {
    absl::StatusOr<double> open =
        testing::ScrapeMetric((*old_server)->metrics_port(), "ferry_connections_open");
    return open.ok() && *open == 1;
  }));
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> next = testing::ServerProcess::Start(
      "server/ferry_server", data, {"--threads=1", "--state-dir=" + state, "--take-over"});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->control_target(), (*old_server)->control_target());
  const auto log_says = [&](const std::string& text) {
    std::ifstream in(old_log);
    std::stringstream all;
    all << in.rdbuf();
    return absl::StrContains(all.str(), text);
  };
  ASSERT_TRUE(testing::WaitFor([&] { return log_says("idle until SIGTERM"); }));
  EXPECT_FALSE((*old_server)->SignalAndWait(0, absl::ZeroDuration()).ok());  // still runs
  // No socket left: the new server's are the only ones.
  int sockets = 0;
  for (const auto& fd :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", (*old_server)->pid(), "/fd"))) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (absl::StartsWith(target, "socket:")) ++sockets;
  }
  EXPECT_EQ(sockets, 0);
  absl::StatusOr<int> stopped = (*old_server)->SignalAndWait(SIGTERM, absl::Seconds(20));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0) << *stopped;
  EXPECT_FALSE(CheckCanListen((*next)->control_target()).ok());  // the new one serves on
}

// A reload after the flag file changed an address: that plane listens where it now says,
// the others keep the sockets handed over.
TEST(MainTest, ATakeOverListensWhereItsFlagsNowSay) {
  const ServerDirs dirs;
  const std::string& data = dirs.data;
  const std::string& state = dirs.state;
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> old_server =
      testing::ServerProcess::Start("server/ferry_server", data,
                                    {"--threads=1", "--state-dir=" + state});
  ASSERT_TRUE(old_server.ok()) << old_server.status();
  const uint16_t moved = testing::FreeLoopbackPort();
  // ServerProcess gives port 0 first: this later flag wins.
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> next =
      testing::ServerProcess::Start("server/ferry_server", data,
                                    {"--threads=1", "--state-dir=" + state, "--take-over",
                                     absl::StrCat("--data-address=127.0.0.1:", moved)});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)->data_port(), moved);
  EXPECT_NE((*next)->data_port(), (*old_server)->data_port());
  EXPECT_EQ((*next)->control_target(), (*old_server)->control_target());
  ASSERT_TRUE((*old_server)->SignalAndWait(0, absl::Seconds(30)).ok());
  // The old data port went with the old server.
  EXPECT_TRUE(CheckCanListen(absl::StrCat("127.0.0.1:", (*old_server)->data_port())).ok());
}

}  // namespace
}  // namespace ferry
