#include "server/control/control_acceptor.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "tests/testing/loopback.h"

namespace ferry {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// A gRPC server with only the standard health service, fed by a ControlAcceptor on a
// loopback socket of its own.
class ControlAcceptorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UniqueFd listener = testing::ListenLoopback(&port_, 16);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    auto to_grpc = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        grpc::InsecureServerCredentials());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    absl::StatusOr<std::unique_ptr<ControlAcceptor>> started =
        ControlAcceptor::Start(std::move(listener), std::move(to_grpc));
    ASSERT_TRUE(started.ok()) << started.status();
    acceptor_ = *std::move(started);
  }

  void TearDown() override {
    if (acceptor_ != nullptr) acceptor_->Stop();
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  // A health check on a new channel (a new connection) within `deadline`.
  grpc::StatusCode Check(std::chrono::milliseconds deadline) {
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
    auto stub = Health::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    HealthCheckRequest request;
    HealthCheckResponse response;
    return stub->Check(&context, request, &response).error_code();
  }

  uint16_t port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ControlAcceptor> acceptor_;
};

TEST_F(ControlAcceptorTest, ServesWhatItAccepts) {
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Check(std::chrono::seconds(10)), grpc::StatusCode::OK);
}

// Paused, the port stays taken and connections wait in the backlog, unanswered; resumed,
// they are served.
TEST_F(ControlAcceptorTest, APauseKeepsThePortAndTheBacklog) {
  acceptor_->Pause();
  EXPECT_FALSE(CheckCanListen(absl::StrCat("127.0.0.1:", port_)).ok());
  EXPECT_EQ(Check(std::chrono::milliseconds(300)), grpc::StatusCode::DEADLINE_EXCEEDED);
  acceptor_->Resume();
  EXPECT_EQ(Check(std::chrono::seconds(10)), grpc::StatusCode::OK);
}

TEST_F(ControlAcceptorTest, StopsWhilePausedAndFreesThePort) {
  acceptor_->Pause();
  acceptor_->Stop();
  EXPECT_TRUE(CheckCanListen(absl::StrCat("127.0.0.1:", port_)).ok());
}

}  // namespace
}  // namespace ferry
