#include "server/ops/hand_over.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/net_address.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::TempDir;
using ::ferry::testing::WaitFor;

// A point handing over one loopback listener as "data", that records its outcomes.
class HandOverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/ferry_server.sock";
    uint16_t port = 0;
    listener_ = testing::ListenLoopback(&port, 16);
  }

  std::unique_ptr<HandOverPoint> Point(HandOverPoint::Options options) {
    absl::StatusOr<std::unique_ptr<HandOverPoint>> point = HandOverPoint::Listen(
        std::move(options),
        [this]() -> absl::StatusOr<HandedSockets> {
          prepared_++;
          if (!refuse_.ok()) return refuse_;
          HandedSockets out;
          out.names.push_back("data");
          out.fds.emplace_back(::dup(listener_.get()));
          out.streams = streams_;
          for (size_t i = 0; i < accepted_.size(); ++i) {
            out.connections.push_back(
                HandedConnection{.plane = "spark",
                                 .socket = UniqueFd(::dup(accepted_[i].get())),
                                 .state = absl::StrCat("app=a ", i)});
          }
          return out;
        },
        [this](bool served, const std::string& why) {
          absl::MutexLock lock(&mu_);
          outcomes_.push_back(served ? "served" : why);
        });
    EXPECT_TRUE(point.ok()) << point.status();
    return point.ok() ? *std::move(point) : nullptr;
  }
  std::unique_ptr<HandOverPoint> Point() { return Point({.path = path_}); }

  std::vector<std::string> Outcomes() {
    absl::MutexLock lock(&mu_);
    return outcomes_;
  }
  bool OutcomeCount(size_t n) {
    return WaitFor([&] { return Outcomes().size() >= n; });
  }

  TempDir dir_;
  std::string path_;
  UniqueFd listener_;
  // Connections the point hands over, accepted from listener_, and their clients.
  std::vector<UniqueFd> accepted_;
  std::vector<UniqueFd> clients_;
  std::string streams_;  // the open streams' text it hands over
  std::atomic<int> prepared_{0};
  absl::Status refuse_;
  absl::Mutex mu_;
  std::vector<std::string> outcomes_;
};

uint16_t PortOf(int fd) { return SocketAddress::LocalOf(fd)->port(); }

TEST_F(HandOverTest, TheTakerGetsTheListenersAndTheOldServerHearsItServes) {
  std::unique_ptr<HandOverPoint> point = Point();
  ASSERT_NE(point, nullptr);
  struct stat file {};
  ASSERT_EQ(::stat(path_.c_str(), &file), 0);
  EXPECT_EQ(file.st_mode & 0777, 0600u);
  absl::StatusOr<std::optional<TakenOver>> taken = TakeOver(path_, absl::Seconds(10));
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_TRUE(taken->has_value());
  EXPECT_EQ((*taken)->from, ::getpid());
  UniqueFd data = (*taken)->listeners.Take("data");
  ASSERT_TRUE(data.valid());
  EXPECT_EQ(PortOf(data.get()), PortOf(listener_.get()));
  EXPECT_FALSE((*taken)->listeners.Take("spark").valid());
  ASSERT_TRUE(Served(**taken).ok());
  ASSERT_TRUE(OutcomeCount(1));
  EXPECT_EQ(Outcomes()[0], "served");
  // Handed over: later requests are refused, naming the server that took over.
  absl::StatusOr<std::optional<TakenOver>> again = TakeOver(path_, absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
  EXPECT_TRUE(absl::StrContains(again.status().message(), "has handed over")) << again.status();
  EXPECT_EQ(prepared_.load(), 1);
}

// Connections go with the listeners, each with its state: the taker's socket is the
// connection (what its client sent before and after is there), however many there are.
// The open streams go too, whatever their size.
TEST_F(HandOverTest, ConnectionsAndStreamsGoWithTheirState) {
  constexpr size_t kConnections = 300;
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&streams_, "stream ", i, "\n");
  for (size_t i = 0; i < kConnections; ++i) {
    clients_.push_back(testing::ConnectLoopback(PortOf(listener_.get())));
    accepted_.emplace_back(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(accepted_.back().valid());
    const std::string before = absl::StrCat("before ", i);
    ASSERT_EQ(::send(clients_[i].get(), before.data(), before.size(), 0), before.size());
  }
  std::unique_ptr<HandOverPoint> point = Point();
  ASSERT_NE(point, nullptr);
  absl::StatusOr<std::optional<TakenOver>> taken = TakeOver(path_, absl::Seconds(10));
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_TRUE(taken->has_value());
  std::vector<HandedConnection>& connections = (*taken)->listeners.connections;
  ASSERT_EQ(connections.size(), kConnections);
  EXPECT_EQ((*taken)->listeners.streams, streams_);
  accepted_.clear();  // the old server's copies go
  for (size_t i = 0; i < kConnections; ++i) {
    EXPECT_EQ(connections[i].plane, "spark");
    EXPECT_EQ(connections[i].state, absl::StrCat("app=a ", i));
    const std::string after = absl::StrCat(" after ", i);
    ASSERT_EQ(::send(clients_[i].get(), after.data(), after.size(), 0), after.size());
    const std::string want = absl::StrCat("before ", i, after);
    std::string got(want.size(), '\0');
    ASSERT_EQ(::recv(connections[i].socket.get(), got.data(), got.size(), MSG_WAITALL),
              want.size());
    EXPECT_EQ(got, want);
  }
  ASSERT_TRUE(Served(**taken).ok());
  ASSERT_TRUE(OutcomeCount(1));
  EXPECT_EQ(Outcomes()[0], "served");
}

// No server: no file, or a file a killed server left. The stale file is replaced.
TEST_F(HandOverTest, NoServerAnsweringIsNoHandOver) {
  absl::StatusOr<std::optional<TakenOver>> none = TakeOver(path_, absl::Seconds(1));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  {
    // Bound and closed, as a killed server leaves it (reached through its dir: the test's
    // path is longer than a socket's address allows).
    UniqueFd dir(::open(dir_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    UniqueFd stale(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string name = absl::StrCat("/proc/self/fd/", dir.get(), "/ferry_server.sock");
    std::memcpy(address.sun_path, name.data(), name.size());
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }
  none = TakeOver(path_, absl::Seconds(1));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  EXPECT_NE(Point(), nullptr);
}

// A second point on a live one fails to start, unless it replaces it (the new server's,
// after it took over); the old one's end then leaves the new one's file.
TEST_F(HandOverTest, APointOnALiveOneIsRefusedUnlessItReplacesIt) {
  std::unique_ptr<HandOverPoint> old_point = Point();
  ASSERT_NE(old_point, nullptr);
  absl::StatusOr<std::unique_ptr<HandOverPoint>> second = HandOverPoint::Listen(
      {.path = path_}, [] { return HandedSockets(); }, [](bool, const std::string&) {});
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), "--take-over")) << second.status();
  std::unique_ptr<HandOverPoint> new_point = Point({.path = path_, .replace = true});
  ASSERT_NE(new_point, nullptr);
  old_point.reset();
  struct stat file {};
  EXPECT_EQ(::stat(path_.c_str(), &file), 0);
  absl::StatusOr<std::optional<TakenOver>> taken = TakeOver(path_, absl::Seconds(10));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(taken->has_value());
}

// The new server goes, or stays silent, before it serves: the old one serves again, and
// a later hand-over may be tried.
TEST_F(HandOverTest, ANewServerThatDoesNotServeGivesTheOldOneBack) {
  std::unique_ptr<HandOverPoint> point =
      Point({.path = path_, .start_timeout = absl::Milliseconds(200)});
  ASSERT_NE(point, nullptr);
  {
    absl::StatusOr<std::optional<TakenOver>> taken = TakeOver(path_, absl::Seconds(10));
    ASSERT_TRUE(taken.ok() && taken->has_value()) << taken.status();
  }  // gone
  ASSERT_TRUE(OutcomeCount(1));
  EXPECT_TRUE(absl::StrContains(Outcomes()[0], "ended before it served")) << Outcomes()[0];
  absl::StatusOr<std::optional<TakenOver>> silent = TakeOver(path_, absl::Seconds(10));
  ASSERT_TRUE(silent.ok() && silent->has_value()) << silent.status();
  ASSERT_TRUE(OutcomeCount(2));
  EXPECT_TRUE(absl::StrContains(Outcomes()[1], "did not serve within 200ms")) << Outcomes()[1];
  EXPECT_EQ(prepared_.load(), 2);
}

// Two new servers at once: the second is refused while the first's is under way.
TEST_F(HandOverTest, OneHandOverAtATime) {
  std::unique_ptr<HandOverPoint> point = Point();
  ASSERT_NE(point, nullptr);
  absl::StatusOr<std::optional<TakenOver>> first = TakeOver(path_, absl::Seconds(10));
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  absl::StatusOr<std::optional<TakenOver>> second = TakeOver(path_, absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), "under way to pid")) << second.status();
  ASSERT_TRUE(Served(**first).ok());
  ASSERT_TRUE(OutcomeCount(1));
  EXPECT_EQ(Outcomes(), std::vector<std::string>{"served"});
}

// The old server cannot hand over (Prepare fails): the taker is told why.
TEST_F(HandOverTest, APrepareThatFailsIsARefusal) {
  refuse_ = absl::UnavailableError("the control plane would not stop");
  std::unique_ptr<HandOverPoint> point = Point();
  ASSERT_NE(point, nullptr);
  absl::StatusOr<std::optional<TakenOver>> taken = TakeOver(path_, absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(taken.status())) << taken.status();
  EXPECT_TRUE(absl::StrContains(taken.status().message(), "would not stop")) << taken.status();
  ASSERT_TRUE(OutcomeCount(1));
}

// Another user: the socket file keeps it out (0600), and where the file lets it in the
// point refuses it by its kernel-given credentials, before preparing anything.
TEST_F(HandOverTest, AnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become an unprivileged user";
  char open_dir[] = "/tmp/ferry-hand-over-XXXXXX";
  ASSERT_NE(::mkdtemp(open_dir), nullptr);
  ASSERT_EQ(::chmod(open_dir, 0755), 0);
  const std::string path = absl::StrCat(open_dir, "/s.sock");
  std::unique_ptr<HandOverPoint> point = Point({.path = path});
  ASSERT_NE(point, nullptr);
  const auto as_nobody = [&](bool open_file) {
    if (open_file) {
      EXPECT_EQ(::chmod(path.c_str(), 0666), 0);
    }
    int pipe_fds[2];
    EXPECT_EQ(::pipe(pipe_fds), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
      absl::StatusOr<std::optional<TakenOver>> taken = TakeOver(path, absl::Seconds(10));
      const std::string said = taken.ok() ? "taken" : std::string(taken.status().message());
      ::_exit(::write(pipe_fds[1], said.data(), said.size()) > 0 ? 0 : 3);
    }
    ::close(pipe_fds[1]);
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    char said[512] = {};
    const ssize_t n = ::read(pipe_fds[0], said, sizeof(said) - 1);
    ::close(pipe_fds[0]);
    return std::string(said, n > 0 ? n : 0);
  };
  EXPECT_TRUE(absl::StrContains(as_nobody(false), "Permission denied"));
  // Through an open file, the taker sees the server is root's and asks nothing.
  EXPECT_TRUE(absl::StrContains(as_nobody(true), "runs as uid 0"));
  EXPECT_EQ(prepared_.load(), 0);
  point.reset();
  ::rmdir(open_dir);
}

}  // namespace
}  // namespace ferry
