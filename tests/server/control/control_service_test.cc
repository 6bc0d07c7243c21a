// ControlService on its own: its collaborators (a BlockStore over a real data dir, a
// TicketRegistry on a FakeClock) are passed in, and its methods are called as gRPC would
// call them, without a server or a channel, so that what the service decides (admission,
// limits, what a handle holds, expiry, diagnosis) is checked here and not only through
// whole servers.
#include "server/control/control_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

constexpr char kApp[] = "app-control";

ferry::v1::BlockId Block(int32_t shuffle, int64_t map, int32_t start, int32_t end) {
  ferry::v1::BlockId id;
  id.set_shuffle_id(shuffle);
  id.set_map_id(map);
  id.set_start_reduce_id(start);
  id.set_end_reduce_id(end);
  return id;
}

class ControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_.AddMapOutput(dir_.path(), kApp, 0, 0, {100, 0, 5000});
    data_.AddMapOutput(dir_.path(), kApp, 0, 1, {7, 8});
    data_.AddMapOutput(dir_.path(), kApp, 2, 0, {1});
    absl::StatusOr<std::unique_ptr<BlockStore>> store = BlockStore::Open({.data_dir = dir_.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    options_.data_host = "10.0.0.9";
    options_.data_port = 7071;
    options_.ticket_ttl = absl::Minutes(1);
  }

  ControlService& Service() {
    if (service_ == nullptr) {
      service_ = std::make_unique<ControlService>(options_, store_.get(), &tickets_);
    }
    return *service_;
  }

  grpc::Status Open(std::initializer_list<ferry::v1::BlockId> blocks,
                    ferry::v1::StreamHandle* handle, const std::string& app = kApp) {
    ferry::v1::OpenStreamRequest request;
    request.set_app_id(app);
    for (const ferry::v1::BlockId& block : blocks) *request.add_blocks() = block;
    grpc::ServerContext context;
    return Service().OpenStream(&context, &request, handle);
  }

  testing::TempDir dir_;
  testing::DataSet data_;
  std::unique_ptr<BlockStore> store_;
  testing::FakeClock clock_;
  TicketRegistry tickets_{TicketLimits{}, clock_};
  ControlServiceOptions options_;
  std::unique_ptr<ControlService> service_;
};

TEST_F(ControlServiceTest, AStreamHoldsItsBlocksUntilItExpiresOrCloses) {
  ferry::v1::StreamHandle handle;
  const grpc::Status opened = Open({Block(0, 0, 0, 3), Block(0, 1, 1, 2)}, &handle);
  ASSERT_TRUE(opened.ok()) << opened.error_message();
  EXPECT_EQ(handle.ticket().size(), 16u);
  EXPECT_EQ(handle.data_host(), "10.0.0.9");
  EXPECT_EQ(handle.data_port(), 7071u);
  ASSERT_EQ(handle.blocks_size(), 2);
  EXPECT_EQ(handle.blocks(0).length(), 5100u);
  ASSERT_EQ(handle.blocks(0).partitions_size(), 3);
  EXPECT_EQ(handle.blocks(0).checksum_algorithm(), ferry::v1::CRC32C);
  EXPECT_EQ(handle.blocks(0).partitions(2).checksum(),
            Checksum::Of(ChecksumAlgorithm::kCrc32c, data_.Expected(0, 0, 2, 3)));
  EXPECT_EQ(handle.blocks(1).length(), 8u);
  EXPECT_EQ(handle.expires_unix_ms(), absl::ToUnixMillis(clock_.Now() + absl::Minutes(1)));
  EXPECT_EQ(tickets_.size(), 1u);

  // Its TTL passes on the registry's clock: the stream is gone.
  clock_.Advance(absl::Seconds(61));
  EXPECT_EQ(tickets_.size(), 0u);
  ferry::v1::CloseStreamRequest close;
  close.set_ticket(handle.ticket());
  ferry::v1::CloseStreamResponse closed;
  grpc::ServerContext context;
  ASSERT_TRUE(Service().CloseStream(&context, &close, &closed).ok());
  EXPECT_FALSE(closed.was_open());

  // One that is closed before then says it was open, once.
  ASSERT_TRUE(Open({Block(2, 0, 0, 1)}, &handle).ok());
  close.set_ticket(handle.ticket());
  grpc::ServerContext again;
  ASSERT_TRUE(Service().CloseStream(&again, &close, &closed).ok());
  EXPECT_TRUE(closed.was_open());
  EXPECT_EQ(tickets_.size(), 0u);
}

TEST_F(ControlServiceTest, RequestsOutOfBoundsAreRefusedNamingTheBound) {
  options_.max_blocks_per_stream = 2;
  options_.max_partitions_per_stream = 4;
  ferry::v1::StreamHandle handle;
  grpc::Status status = Open({Block(0, 0, 0, 1)}, &handle, "../etc");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  status = Open({}, &handle);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("no blocks"), std::string::npos) << status.error_message();
  status = Open({Block(0, 0, 0, 1), Block(0, 0, 1, 2), Block(0, 0, 2, 3)}, &handle);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("the limit is 2"), std::string::npos)
      << status.error_message();
  status = Open({Block(0, 0, 0, 3), Block(0, 1, 0, 2)}, &handle);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("5 partitions; the limit is 4"), std::string::npos)
      << status.error_message();
  // A map output that is not there: nothing is registered, and the error names it.
  status = Open({Block(0, 9, 0, 1)}, &handle);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_NE(status.error_message().find("map output 9 of shuffle 0"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(tickets_.size(), 0u);
  // With a token configured, a call without it is refused before any work.
  options_.auth_token = Secret("s3cret");
  service_.reset();
  status = Open({Block(0, 0, 0, 1)}, &handle);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  EXPECT_EQ(tickets_.size(), 0u);
}

TEST_F(ControlServiceTest, ListsShufflesAndTellsTheDataPlane) {
  ferry::v1::ListShufflesRequest request;
  request.set_app_id(kApp);
  ferry::v1::ListShufflesResponse listed;
  grpc::ServerContext context;
  ASSERT_TRUE(Service().ListShuffles(&context, &request, &listed).ok());
  ASSERT_EQ(listed.shuffles_size(), 2);
  EXPECT_EQ(listed.shuffles(0).shuffle_id(), 0);
  ASSERT_EQ(listed.shuffles(0).map_outputs_size(), 2);
  EXPECT_EQ(listed.shuffles(0).map_outputs(0).partitions(), 3);
  EXPECT_EQ(listed.shuffles(0).map_outputs(0).data_bytes(), 5100u);
  EXPECT_EQ(listed.shuffles(1).shuffle_id(), 2);

  options_.splice = false;
  options_.io_engine = "uring";
  options_.copy_buffer_bytes = 65536;
  service_.reset();
  ferry::v1::ServerInfoRequest ask;
  ferry::v1::ServerInfo info;
  grpc::ServerContext info_context;
  ASSERT_TRUE(Service().GetServerInfo(&info_context, &ask, &info).ok());
  EXPECT_EQ(info.mode(), ferry::v1::COPY);
  EXPECT_EQ(info.io_engine(), "uring");
  EXPECT_EQ(info.copy_buffer_bytes(), 65536u);
  EXPECT_EQ(info.ticket_ttl_ms(), 60000);
  EXPECT_EQ(info.data_port(), 7071u);
}

TEST_F(ControlServiceTest, DiagnosisTellsTheDiskFromTheWire) {
  const std::string expected = data_.Expected(0, 0, 2, 3);
  const uint32_t right = Checksum::Of(ChecksumAlgorithm::kCrc32c, expected);
  const auto diagnose = [&](uint32_t received) {
    ferry::v1::DiagnoseCorruptionRequest request;
    request.set_app_id(kApp);
    *request.mutable_block() = Block(0, 0, 2, 3);
    request.set_received_checksum(received);
    ferry::v1::CorruptionDiagnosis diagnosis;
    grpc::ServerContext context;
    const grpc::Status status = Service().DiagnoseCorruption(&context, &request, &diagnosis);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return diagnosis;
  };
  EXPECT_EQ(diagnose(right).cause(), ferry::v1::CAUSE_NONE);
  const ferry::v1::CorruptionDiagnosis wire = diagnose(right ^ 1);
  EXPECT_EQ(wire.cause(), ferry::v1::CAUSE_TRANSFER);
  EXPECT_EQ(wire.stored_checksum(), right);
  EXPECT_EQ(wire.disk_checksum(), right);

  // A byte of the partition changes on disk.
  const std::string path = absl::StrCat(dir_.path(), "/", kApp, "/shuffle_0_0_0.data");
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  const char flipped = static_cast<char>(expected[10] ^ 0x40);
  ASSERT_EQ(::pwrite(fd.get(), &flipped, 1, 100 + 10), 1);
  const ferry::v1::CorruptionDiagnosis disk = diagnose(right ^ 1);
  EXPECT_EQ(disk.cause(), ferry::v1::CAUSE_DISK) << disk.explanation();
  EXPECT_EQ(disk.stored_checksum(), right);
  EXPECT_NE(disk.disk_checksum(), right);
}

TEST_F(ControlServiceTest, RemovingASparkAppNeedsTheSparkFrontDoor) {
  ferry::v1::RemoveSparkAppRequest request;
  request.set_app_id(kApp);
  ferry::v1::RemoveSparkAppResponse response;
  grpc::ServerContext context;
  const grpc::Status status = Service().RemoveSparkApp(&context, &request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_NE(status.error_message().find("--spark-address"), std::string::npos);
}

}  // namespace
}  // namespace ferry
