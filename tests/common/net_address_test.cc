#include "common/net_address.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"

namespace ferry {
namespace {

TEST(NetAddressTest, HostPortTextOfEveryShape) {
  struct Case {
    const char* text;
    const char* host;
    uint16_t port;
  };
  for (const Case& c :
       {Case{"10.0.0.7:7070", "10.0.0.7", 7070}, Case{"[::1]:0", "::1", 0},
        Case{"[fd00::2]:7337", "fd00::2", 7337}, Case{"localhost:65535", "localhost", 65535},
        Case{"node-3.example:1", "node-3.example", 1}}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(c.text);
    ASSERT_TRUE(parsed.ok()) << c.text << ": " << parsed.status();
    EXPECT_EQ(parsed->host, c.host);
    EXPECT_EQ(parsed->port, c.port);
    EXPECT_EQ(FormatHostPort(parsed->host, parsed->port), c.text);
  }
  for (const char* bad : {"", "7070", "host:", ":7070", "host:65536", "host:-1", "::1:7070",
                          "[::1]", "[::1:7070", "[]:1", "[not-v6]:1", "host:70x"}) {
    const absl::StatusOr<HostPort> parsed = ParseHostPort(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << "'" << bad << "' was taken";
  }
}

TEST(NetAddressTest, NumericAddressesOfBothFamilies) {
  absl::StatusOr<SocketAddress> v4 = SocketAddress::Numeric("127.0.0.1", 80);
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->family(), AF_INET);
  EXPECT_EQ(v4->size(), sizeof(sockaddr_in));
  EXPECT_EQ(v4->ToString(), "127.0.0.1:80");
  absl::StatusOr<SocketAddress> v6 = SocketAddress::Numeric("fd00::2", 7337);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->family(), AF_INET6);
  EXPECT_EQ(v6->ToString(), "[fd00::2]:7337");
  EXPECT_EQ(SocketAddress::Numeric("localhost", 1)->host(), "127.0.0.1");
  EXPECT_TRUE(absl::IsInvalidArgument(SocketAddress::Numeric("node-3", 1).status()));
  EXPECT_EQ(SocketAddress::Resolve("localhost", 9)->port(), 9);
}

TEST(NetAddressTest, ASocketsPeerAndLocalAddresses) {
  uint16_t port = 0;
  UniqueFd listener = testing::ListenLoopback(&port, 1);
  UniqueFd client = testing::ConnectLoopback(port);
  UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  absl::StatusOr<SocketAddress> peer = SocketAddress::PeerOf(server.get());
  absl::StatusOr<SocketAddress> local = SocketAddress::LocalOf(client.get());
  ASSERT_TRUE(peer.ok() && local.ok());
  EXPECT_EQ(peer->ToString(), local->ToString());
  EXPECT_EQ(SocketAddress::LocalOf(listener.get())->port(), port);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  EXPECT_TRUE(absl::IsNotFound(SocketAddress::PeerOf(pipe_fds[0]).status()));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

// A port in use, an address no interface has, a host that does not resolve: each error
// says which in words an operator acts on.
TEST(NetAddressTest, WhyAnAddressCannotBeListenedOn) {
  absl::StatusOr<SocketAddress> any = SocketAddress::Numeric("127.0.0.1", 0);
  ASSERT_TRUE(any.ok());
  absl::StatusOr<UniqueFd> taken = Listen(*any, 16);
  ASSERT_TRUE(taken.ok()) << taken.status();
  absl::StatusOr<SocketAddress> local = SocketAddress::LocalOf(taken->get());
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(CheckCanListen(local->ToString()).message(),
            "cannot listen on " + local->ToString() +
                ": Address already in use (another process listens on this port)");
  EXPECT_EQ(Listen(*local, 16).status().message(), CheckCanListen(local->ToString()).message());
  // 192.0.2.0/24 is TEST-NET-1: no interface here has it.
  EXPECT_EQ(CheckCanListen("192.0.2.1:7070").message(),
            "cannot listen on 192.0.2.1:7070: Cannot assign requested address (no interface of "
            "this host has this address)");
  EXPECT_TRUE(absl::StartsWith(CheckCanListen("no-such-host.invalid:7070").message(),
                               "cannot listen on no-such-host.invalid:7070: its host does not "
                               "resolve"));
  EXPECT_EQ(CheckCanListen("7070").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckCanListen("127.0.0.1:0").ok());
}

}  // namespace
}  // namespace ferry
