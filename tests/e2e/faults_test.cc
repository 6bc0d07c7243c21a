// Faults on the data plane: clients that vanish mid-block must cost the server nothing
// that lasts (descriptors, pipes, memory), and it keeps serving.
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/frame_header.h"
#include "gtest/gtest.h"
#include "tests/e2e/raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/loopback.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-faults";

// ASan keeps freed memory in a quarantine (256 MiB by default), so RSS says nothing
// about leaks there; LeakSanitizer checks those instead.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRssTellsLeaks = false;
#else
constexpr bool kRssTellsLeaks = true;
#endif

long RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      long kb;
      in >> kb;
      return kb;
    }
  }
  return 0;
}

class VanishingClientTest : public ::testing::TestWithParam<testing::ServerConfig> {};

TEST_P(VanishingClientTest, AThousandClientsVanishingMidBlockLeakNothing) {
  TempDir dir;
  DataSet data;
  data.AddMapOutput(dir.path(), kApp, 0, 0, {size_t{16} << 20});
  auto server = testing::StartServer(dir.path(), GetParam());
  ControlClient control;
  auto handle = control.OpenStream(server->control_target(), kApp, {{0, 0, 0, 1}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  FetchRequest request;
  request.ticket = testing::TicketOf(handle->ticket());
  request.block_count = 1;
  char frame[kRequestBytes];
  EncodeFetchRequest(request, frame);

  auto vanish_once = [&] {
    UniqueFd fd = testing::ConnectLoopback(server->data_port());
    ASSERT_EQ(::send(fd.get(), frame, sizeof(frame), MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof(frame)));
    char buf[8192];
    ssize_t got;
    do {
      got = ::recv(fd.get(), buf, sizeof(buf), 0);
    } while (got < 0 && errno == EINTR);
    ASSERT_GT(got, 0);
    // Vanish mid-block with a reset, as a killed process would.
    linger hard{.l_onoff = 1, .l_linger = 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  };
  auto settle = [&] {
    // The server notices each reset asynchronously; wait (bounded) until it has.
    ASSERT_TRUE(testing::WaitFor([&] { return server->data_server().connections_open() == 0; }))
        << server->data_server().connections_open() << " connections still open";
  };

  for (int i = 0; i < 20; ++i) vanish_once();  // warm up caches, pools and the allocator
  settle();
  const int fds_before = testing::OpenFdCount();
  const long rss_before = RssKiB();
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  int rounds = 0;
  for (; rounds < 1000 && absl::Now() < deadline; ++rounds) vanish_once();
  settle();
  EXPECT_EQ(rounds, 1000);
  EXPECT_EQ(testing::OpenFdCount(), fds_before);  // sockets and pipes all closed
  if (kRssTellsLeaks) {
    EXPECT_LT(RssKiB() - rss_before, 16 * 1024)
        << "RSS grew by " << RssKiB() - rss_before << " KiB";
  }

  // And the server still serves a whole block.
  ShuffleClient client;
  auto fetched = client.FetchToBuffers(kApp, {{server->control_target(), {0, 0, 0, 1}}});
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_TRUE((*fetched)[0] == data.Expected(0, 0, 0, 1));
}

INSTANTIATE_TEST_SUITE_P(Configs, VanishingClientTest,
                         ::testing::ValuesIn(testing::AllServerConfigs()),
                         [](const ::testing::TestParamInfo<testing::ServerConfig>& config) {
                           return testing::ConfigName(config.param);
                         });

}  // namespace
}  // namespace ferry
