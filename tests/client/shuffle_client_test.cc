// ShuffleClient on its own: its control plane a ControlService in an in-process gRPC
// server (store and tickets passed in), its data plane a scripted peer over loopback
// that takes each connection's request and answers as the case says. What the client
// retries, what it gives up on, and how its errors name the block and the server.
#include "client/shuffle_client.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/control/control_service.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

constexpr char kApp[] = "app-shuffle-client";

// Accepts connections until destroyed; each: reads the request, then writes `reply`
// and closes (`hang_up`), or stays silent until the client leaves.
class ScriptedDataPlane {
 public:
  ScriptedDataPlane(std::string reply, bool hang_up) {
    listener_ = testing::ListenLoopback(&port_, 16);
    thread_ = std::thread([this, reply = std::move(reply), hang_up] {
      for (;;) {
        UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!conn.valid()) return;
        ++connections_;
        char buf[65536];
        if (::recv(conn.get(), buf, sizeof(buf), 0) <= 0) continue;
        if (!reply.empty()) ::send(conn.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
        if (hang_up) continue;
        while (::recv(conn.get(), buf, sizeof(buf), 0) > 0) {
        }
      }
    });
  }
  ~ScriptedDataPlane() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }

 private:
  uint16_t port_ = 0;
  UniqueFd listener_;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

class ShuffleClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_.AddMapOutput(dir_.path(), kApp, 0, 0, {100, 200});
    absl::StatusOr<std::unique_ptr<BlockStore>> store = BlockStore::Open({.data_dir = dir_.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // The control plane's address; its handles send clients to `data_port`.
  std::string Start(uint16_t data_port) {
    ControlServiceOptions options;
    options.data_host = "127.0.0.1";
    options.data_port = data_port;
    service_ = std::make_unique<ControlService>(options, store_.get(), &tickets_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    return absl::StrCat("127.0.0.1:", port);
  }
  uint64_t OpenStreamCalls() const { return service_->calls(ControlService::Rpc::kOpenStream); }
  static FetchOptions Quick() {
    FetchOptions options;
    options.io_timeout = absl::Milliseconds(500);
    options.max_attempts = 2;
    options.retry_backoff = absl::Milliseconds(10);
    options.max_retry_backoff = absl::Milliseconds(10);
    return options;
  }

  testing::TempDir dir_;
  testing::DataSet data_;
  std::unique_ptr<BlockStore> store_;
  testing::FakeClock clock_;
  TicketRegistry tickets_{TicketLimits{}, clock_};
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ShuffleClientTest, ADataPlaneThatHangsUpIsRetriedThenTheErrorNamesTheServer) {
  ScriptedDataPlane data("", /*hang_up=*/true);
  const std::string server = Start(data.port());
  ShuffleClient client(absl::Seconds(10));
  absl::StatusOr<std::vector<std::string>> got =
      client.FetchToBuffers(kApp, {{server, {0, 0, 0, 1}}}, Quick());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_NE(got.status().message().find(
                absl::StrCat("block shuffle 0 map 0 reduce 0 from server ", server)),
            std::string::npos)
      << got.status();
  EXPECT_EQ(OpenStreamCalls(), 2u);  // max_attempts
  EXPECT_EQ(data.connections(), 2);
}

TEST_F(ShuffleClientTest, ADataPlaneThatNeverAnswersTimesOutWithinItsIoTimeout) {
  ScriptedDataPlane data("", /*hang_up=*/false);
  const std::string server = Start(data.port());
  ShuffleClient client(absl::Seconds(10));
  FetchOptions options = Quick();
  options.max_attempts = 1;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> got =
      client.FetchToBuffers(kApp, {{server, {0, 0, 0, 1}}}, options);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(ShuffleClientTest, AControlPlaneRefusalIsNotRetriedAndNamesTheBlock) {
  ScriptedDataPlane data("", /*hang_up=*/true);
  const std::string server = Start(data.port());
  ShuffleClient client(absl::Seconds(10));
  absl::StatusOr<std::vector<std::string>> got =
      client.FetchToBuffers(kApp, {{server, {0, 5, 0, 1}}}, Quick());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_NE(got.status().message().find("shuffle 0 map 5"), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find(server), std::string::npos) << got.status();
  EXPECT_EQ(OpenStreamCalls(), 1u);
  EXPECT_EQ(data.connections(), 0);
}

TEST_F(ShuffleClientTest, AGarbledAnswerIsAnErrorNotAHang) {
  ScriptedDataPlane data(std::string(64, '\xff'), /*hang_up=*/false);
  const std::string server = Start(data.port());
  ShuffleClient client(absl::Seconds(10));
  FetchOptions options = Quick();
  options.max_attempts = 1;
  options.io_timeout = absl::Seconds(5);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> got =
      client.FetchToBuffers(kApp, {{server, {0, 0, 0, 1}}}, options);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal) << got.status();
  EXPECT_NE(got.status().message().find("bad response magic"), std::string::npos) << got.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

}  // namespace
}  // namespace ferry
