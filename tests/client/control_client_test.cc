// ControlClient on its own against a ControlService in an in-process gRPC server over
// loopback (its store and tickets passed in, no data plane): what reaches the wire,
// how errors name the server, the auth token, and the callback calls' cancellation.
#include "client/control_client.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/control/control_service.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

constexpr char kApp[] = "app-client";

class ControlClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_.AddMapOutput(dir_.path(), kApp, 0, 0, {100, 0, 5000});
    data_.AddMapOutput(dir_.path(), kApp, 0, 1, {7, 8});
    absl::StatusOr<std::unique_ptr<BlockStore>> store = BlockStore::Open({.data_dir = dir_.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    options_.data_host = "127.0.0.1";
    options_.data_port = 7071;
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // The control plane's address.
  std::string Start() {
    service_ = std::make_unique<ControlService>(options_, store_.get(), &tickets_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    EXPECT_GT(port, 0);
    return absl::StrCat("127.0.0.1:", port);
  }

  testing::TempDir dir_;
  testing::DataSet data_;
  std::unique_ptr<BlockStore> store_;
  testing::FakeClock clock_;
  TicketRegistry tickets_{TicketLimits{}, clock_};
  ControlServiceOptions options_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ControlClientTest, OpensAStreamOfItsBlocksAndClosesIt) {
  const std::string server = Start();
  ControlClient client(absl::Seconds(10));
  absl::StatusOr<ferry::v1::StreamHandle> handle =
      client.OpenStream(server, kApp, {{0, 0, 0, 3}, {0, 1, 1, 2}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_EQ(handle->blocks_size(), 2);
  EXPECT_EQ(handle->blocks(0).length(), 5100u);
  EXPECT_EQ(handle->blocks(1).length(), 8u);
  EXPECT_EQ(handle->data_port(), 7071u);
  EXPECT_EQ(tickets_.size(), 1u);
  ASSERT_TRUE(client.CloseStream(server, handle->ticket()).ok());
  EXPECT_EQ(tickets_.size(), 0u);
}

TEST_F(ControlClientTest, ErrorsNameTheCallAndTheServer) {
  const std::string server = Start();
  ControlClient client(absl::Seconds(10));
  absl::StatusOr<ferry::v1::StreamHandle> missing = client.OpenStream(server, kApp, {{0, 9, 0, 1}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_NE(missing.status().message().find(absl::StrCat("OpenStream to ", server)),
            std::string::npos)
      << missing.status();

  // Nobody listens: the call fails within its timeout, naming where it went.
  uint16_t closed = 0;
  { testing::ListenLoopback(&closed, 1); }
  const std::string nowhere = absl::StrCat("127.0.0.1:", closed);
  ControlClient quick(absl::Seconds(2));
  const absl::Time start = absl::Now();
  absl::StatusOr<ferry::v1::ServerInfo> info = quick.GetServerInfo(nowhere);
  EXPECT_FALSE(info.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_NE(info.status().message().find(nowhere), std::string::npos) << info.status();
}

TEST_F(ControlClientTest, TheAuthTokenGoesWithEveryCall) {
  options_.auth_token = Secret("s3cret-token");
  const std::string server = Start();
  ControlClient without(absl::Seconds(10));
  EXPECT_EQ(without.OpenStream(server, kApp, {{0, 0, 0, 1}}).status().code(),
            absl::StatusCode::kUnauthenticated);
  ControlClient wrong(absl::Seconds(10), Secret("other-token"));
  EXPECT_EQ(wrong.GetServerInfo(server).status().code(), absl::StatusCode::kUnauthenticated);
  ControlClient with(absl::Seconds(10), Secret("s3cret-token"));
  absl::StatusOr<ferry::v1::StreamHandle> handle = with.OpenStream(server, kApp, {{0, 0, 0, 1}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_TRUE(with.CloseStream(server, handle->ticket()).ok());
}

TEST_F(ControlClientTest, ACallbackCallRunsItsDoneOnceAndACancelAfterItIsHarmless) {
  const std::string server = Start();
  auto client = std::make_unique<ControlClient>(absl::Seconds(10));
  absl::Notification done;
  int calls = 0;
  absl::StatusOr<ferry::v1::StreamHandle> got = absl::UnknownError("not run");
  ControlClient::CancelCall cancel = client->StartOpenStream(
      server, kApp, {{0, 1, 0, 2}}, "", [&](absl::StatusOr<ferry::v1::StreamHandle> handle) {
        ++calls;
        got = std::move(handle);
        done.Notify();
      });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->blocks_size(), 1);
  cancel();  // after done: nothing to cancel

  // Cancelled at once: done runs once, CANCELLED or with the answer if it came first;
  // the client may be destroyed while the call is still in flight.
  absl::Notification second;
  absl::Status second_status;
  ControlClient::CancelCall cancel_now = client->StartOpenStream(
      server, kApp, {{0, 0, 0, 1}}, "", [&](absl::StatusOr<ferry::v1::StreamHandle> handle) {
        second_status = handle.status();
        second.Notify();
      });
  cancel_now();
  client.reset();
  ASSERT_TRUE(second.HasBeenNotified());
  EXPECT_TRUE(second_status.ok() || absl::IsCancelled(second_status)) << second_status;
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ferry
