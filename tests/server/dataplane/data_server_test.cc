#include "server/dataplane/data_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/ops.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"

namespace ferry {
namespace {

using ::ferry::testing::ConnectLoopback;

// Answers each byte it receives with `tag`, until the peer closes or the server drains.
DataServer::Listener Tagging(char tag) {
  DataServer::Listener listener;
  listener.host = "127.0.0.1";
  listener.port = 0;
  listener.handler = [tag](UniqueFd socket, ConnectionControl& control) {
    for (;;) {
      char byte = 0;
      control.serving = false;
      if (Recv(socket.get(), &byte, 1) != 1) return;
      control.serving = true;
      if (Send(socket.get(), &tag, 1) != 1) return;
      if (control.draining->load()) return;
    }
  };
  return listener;
}

std::unique_ptr<DataServer> StartServer(DataServer::Listener listener) {
  DataServerOptions options;
  options.threads = 2;
  options.max_pipes = 2;
  std::vector<DataServer::Listener> listeners;
  listeners.push_back(std::move(listener));
  absl::StatusOr<std::unique_ptr<DataServer>> server =
      DataServer::Start(options, std::move(listeners), nullptr);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// The byte that answers one sent on `fd` within `timeout_ms`: 0 without one, -1 at EOF.
int Ask(int fd, int timeout_ms) {
  const char byte = '?';
  if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) return -1;
  pollfd ready{fd, POLLIN, 0};
  if (::poll(&ready, 1, timeout_ms) != 1) return 0;
  char answer = 0;
  return ::recv(fd, &answer, 1, 0) == 1 ? answer : -1;
}

// Paused, the listener keeps its port and backlog: a connection made meanwhile waits,
// unanswered, and is served once accepting resumes.
TEST(DataServerTest, APauseKeepsTheListenerAndItsBacklog) {
  std::unique_ptr<DataServer> server = StartServer(Tagging('A'));
  ASSERT_NE(server, nullptr);
  UniqueFd before = ConnectLoopback(server->port());
  EXPECT_EQ(Ask(before.get(), 10000), 'A');
  server->PauseAccepting();
  UniqueFd waiting = ConnectLoopback(server->port());
  EXPECT_EQ(Ask(waiting.get(), 300), 0);
  EXPECT_EQ(Ask(before.get(), 10000), 'A');  // connections accepted before go on
  server->ResumeAccepting();
  pollfd ready{waiting.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&ready, 1, 10000), 1);
  char answer = 0;
  EXPECT_EQ(::recv(waiting.get(), &answer, 1, 0), 1);
  EXPECT_EQ(answer, 'A');
  server->Stop();
}

// A hand-over: the first server stops accepting and ends its connections (the idle one
// at once), and a second server takes its listening socket. Connections to the same
// port, waiting or new, are the second's; none is refused.
TEST(DataServerTest, ASecondServerServesTheFirstsListener) {
  std::unique_ptr<DataServer> first = StartServer(Tagging('A'));
  ASSERT_NE(first, nullptr);
  const uint16_t port = first->port();
  UniqueFd idle = ConnectLoopback(port);
  EXPECT_EQ(Ask(idle.get(), 10000), 'A');
  first->PauseAccepting();
  UniqueFd waiting = ConnectLoopback(port);
  const DataServer::DrainReport drained = first->DrainConnections(absl::Seconds(10));
  EXPECT_EQ(drained.idle, 1u);
  EXPECT_EQ(drained.cut, 0u);
  char eof = 0;
  EXPECT_EQ(::recv(idle.get(), &eof, 1, 0), 0);  // closed by the first server
  absl::StatusOr<std::vector<UniqueFd>> listeners = first->Listeners();
  ASSERT_TRUE(listeners.ok()) << listeners.status();
  ASSERT_EQ(listeners->size(), 1u);
  DataServer::Listener inherited = Tagging('B');
  inherited.inherited = std::move((*listeners)[0]);
  std::unique_ptr<DataServer> second = StartServer(std::move(inherited));
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->port(), port);
  first->Stop();  // its copy of the socket goes; the second's keeps the port
  EXPECT_EQ(Ask(waiting.get(), 10000), 'B');
  for (int i = 0; i < 5; ++i) {
    UniqueFd fresh = ConnectLoopback(port);
    EXPECT_EQ(Ask(fresh.get(), 10000), 'B');
  }
  second->Stop();
}

}  // namespace
}  // namespace ferry
