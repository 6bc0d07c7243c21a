#include "server/ops/peer_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <glog/logging.h>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

// Runs `fn` with stderr (where glog writes) going to a file; returns what was written.
template <typename Fn>
std::string CaptureStderr(Fn fn) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/stderr";
  const int saved = ::dup(STDERR_FILENO);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  fn();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int Lines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(PeerLogTest, AFloodIsCutToTheRateAndCountedInTheNextLine) {
  FLAGS_logtostderr = true;
  auto [a, b] = testing::SocketPair();
  testing::FakeClock clock;
  const std::string text = CaptureStderr([&] {
    for (int i = 0; i < 500; ++i) {
      LogPeerFailure(a.get(), "spark", absl::NotFoundError("shuffle_0_1_2: no such block"), clock);
    }
    clock.Advance(absl::Milliseconds(1100));  // the next second's window
    LogPeerFailure(a.get(), "ferry", absl::InvalidArgumentError("bad frame"), clock);
  });
  EXPECT_EQ(Lines(text, "spark: NOT_FOUND: shuffle_0_1_2: no such block"), kPeerLinesPerSecond);
  EXPECT_TRUE(absl::StrContains(
      text, "ferry: INVALID_ARGUMENT: bad frame (480 earlier failures on this thread not logged)"))
      << text;
}

// An app id holding a newline and a glog-looking line made the server's log
// hold a line of the attacker's.
TEST(PeerLogTest, APeersTextCannotStartALine) {
  FLAGS_logtostderr = true;
  auto [a, b] = testing::SocketPair();
  testing::FakeClock clock;
  const std::string text = CaptureStderr([&] {
    LogPeerFailure(a.get(), "spark",
                   absl::InvalidArgumentError(
                       "app id 'x\nE1203 07:00:00.000000 4242 ferry_server.cc:1] FORGED' is bad"),
                   clock);
  });
  EXPECT_EQ(Lines(text, "\n"), 1) << text;
  EXPECT_TRUE(absl::StrContains(text, "app id 'x\\x0aE1203 07:00:00.000000")) << text;
}

}  // namespace
}  // namespace ferry
