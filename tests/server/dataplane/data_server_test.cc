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

// Answers each byte it receives with its connection's tag: `tag`, or for a connection
// handed over, the tag it had there. Ends when the peer closes or the server drains;
// handing over, a wait cancelled releases the connection with its tag.
DataServer::Listener Tagging(char tag) {
  DataServer::Listener listener;
  listener.host = "127.0.0.1";
  listener.port = 0;
  listener.name = "tags";
  listener.handler = [tag](UniqueFd socket, ConnectionControl& control) {
    const char mine =
        control.resumed.has_value() && control.resumed->size() == 1 ? (*control.resumed)[0] : tag;
    for (;;) {
      char byte = 0;
      control.serving = false;
      const ssize_t n = Recv(socket.get(), &byte, 1);
      if (n == -ECANCELED && control.handing_over->load()) {
        control.released = std::move(socket);
        control.released_state = std::string(1, mine);
        return;
      }
      if (n != 1) return;
      control.serving = true;
      if (Send(socket.get(), &mine, 1) != 1) return;
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

// A hand-over: the first server stops accepting and releases its connections (the idle
// one at once), and a second server takes its listening socket and them. The released
// connection goes on with its state (its tag) and the request sent while it moved;
// connections to the same port, waiting or new, are the second's; none is refused.
TEST(DataServerTest, ASecondServerServesTheFirstsListenerAndConnections) {
  std::unique_ptr<DataServer> first = StartServer(Tagging('A'));
  ASSERT_NE(first, nullptr);
  const uint16_t port = first->port();
  UniqueFd idle = ConnectLoopback(port);
  EXPECT_EQ(Ask(idle.get(), 10000), 'A');
  first->PauseAccepting();
  UniqueFd waiting = ConnectLoopback(port);
  DataServer::HandOverReport handed = first->HandOverConnections(absl::Seconds(10));
  EXPECT_EQ(handed.drained.idle, 1u);
  EXPECT_EQ(handed.drained.cut, 0u);
  ASSERT_EQ(handed.released.size(), 1u);
  EXPECT_EQ(handed.released[0].plane, "tags");
  EXPECT_EQ(handed.released[0].state, "A");
  EXPECT_EQ(first->connections_open(), 0u);
  // Sent while no server serves it: the request waits in the socket.
  const char byte = '?';
  ASSERT_EQ(::send(idle.get(), &byte, 1, MSG_NOSIGNAL), 1);
  absl::StatusOr<std::vector<UniqueFd>> listeners = first->Listeners();
  ASSERT_TRUE(listeners.ok()) << listeners.status();
  ASSERT_EQ(listeners->size(), 1u);
  DataServer::Listener inherited = Tagging('B');
  inherited.inherited = std::move((*listeners)[0]);
  std::unique_ptr<DataServer> second = StartServer(std::move(inherited));
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->port(), port);
  EXPECT_EQ(second->Adopt(std::move(handed.released)), 1u);
  first->Stop();  // its copies of the sockets go; the second's keep them
  pollfd ready{idle.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&ready, 1, 10000), 1);
  char answer = 0;
  ASSERT_EQ(::recv(idle.get(), &answer, 1, 0), 1);
  EXPECT_EQ(answer, 'A');
  EXPECT_EQ(Ask(idle.get(), 10000), 'A');
  EXPECT_EQ(Ask(waiting.get(), 10000), 'B');
  EXPECT_EQ(second->connections_open(), 2u);
  for (int i = 0; i < 5; ++i) {
    UniqueFd fresh = ConnectLoopback(port);
    EXPECT_EQ(Ask(fresh.get(), 10000), 'B');
  }
  second->Stop();
}

// A hand-over that fails: the first server takes back what it released, and serves it
// as before. A connection naming a plane the server has no listener for is closed.
TEST(DataServerTest, ReleasedConnectionsComeBackToTheirServer) {
  std::unique_ptr<DataServer> server = StartServer(Tagging('A'));
  ASSERT_NE(server, nullptr);
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(ConnectLoopback(server->port()));
    EXPECT_EQ(Ask(clients.back().get(), 10000), 'A');
  }
  server->PauseAccepting();
  DataServer::HandOverReport handed = server->HandOverConnections(absl::Seconds(10));
  ASSERT_EQ(handed.released.size(), 3u);
  handed.released[2].plane = "elsewhere";
  server->ResumeAccepting();
  EXPECT_EQ(server->Adopt(std::move(handed.released)), 2u);
  int answered = 0;
  int closed = 0;
  for (UniqueFd& client : clients) {
    const int answer = Ask(client.get(), 10000);
    answered += answer == 'A';
    closed += answer == -1;
  }
  EXPECT_EQ(answered, 2);
  EXPECT_EQ(closed, 1);
  server->Stop();
}

}  // namespace
}  // namespace ferry
