// The data plane spoken to byte by byte over a raw socket: framing, resume offsets,
// pipelining, ticket checks, bad frames; and both modes answering with identical bytes.
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <thread>

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

constexpr char kApp[] = "app-1";

using ::ferry::testing::Dial;
using ::ferry::testing::Header;
using ::ferry::testing::ReadUntilClose;
using ::ferry::testing::SendRequest;

class DataPlaneProtocolTest : public ::testing::TestWithParam<testing::ServerConfig> {
 protected:
  void SetUp() override {
    data_.AddMapOutput(dir_.path(), kApp, 0, 0, {100, 0, 300000});
    server_ = testing::StartServer(dir_.path(), GetParam());
  }
  Ticket Open(const std::vector<BlockId>& blocks) {
    auto handle = client_.OpenStream(server_->control_target(), kApp, blocks);
    EXPECT_TRUE(handle.ok()) << handle.status();
    return handle.ok() ? testing::TicketOf(handle->ticket()) : Ticket{};
  }
  std::vector<BlockId> All() const { return {{0, 0, 0, 1}, {0, 0, 1, 2}, {0, 0, 2, 3}}; }

  TempDir dir_;
  DataSet data_;
  std::unique_ptr<FerryServer> server_;
  ControlClient client_;
};

TEST_P(DataPlaneProtocolTest, BlocksArriveAsHeaderThenExactlyLengthBytes) {
  const Ticket t = Open(All());
  UniqueFd fd = Dial(server_->data_port());
  SendRequest(fd.get(), t, 0, 3, 0);
  ::shutdown(fd.get(), SHUT_WR);  // no more requests: the server closes after answering
  const std::string got = ReadUntilClose(fd.get());
  size_t pos = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_GE(got.size(), pos + kResponseHeaderBytes);
    const ResponseHeader h = Header(absl::string_view(got).substr(pos));
    EXPECT_EQ(h.kind, FrameKind::kBlock);
    EXPECT_EQ(h.block_index, i);
    EXPECT_EQ(h.offset, 0u);
    EXPECT_EQ(h.flags, kFlagHasChecksum);
    EXPECT_EQ(h.checksum_algorithm, static_cast<uint8_t>(ChecksumAlgorithm::kCrc32c));
    const std::string expected =
        data_.Expected(0, 0, static_cast<int32_t>(i), static_cast<int32_t>(i) + 1);
    EXPECT_EQ(h.checksum, Checksum::Of(ChecksumAlgorithm::kCrc32c, expected));
    ASSERT_EQ(h.length, expected.size());
    pos += kResponseHeaderBytes;
    EXPECT_TRUE(got.substr(pos, h.length) == expected) << "block " << i;
    pos += h.length;
  }
  EXPECT_EQ(pos, got.size());
}

TEST_P(DataPlaneProtocolTest, ResumesFromAnOffsetIntoTheFirstBlock) {
  const Ticket t = Open(All());
  UniqueFd fd = Dial(server_->data_port());
  SendRequest(fd.get(), t, 2, 1, 123456);
  ::shutdown(fd.get(), SHUT_WR);
  const std::string got = ReadUntilClose(fd.get());
  const ResponseHeader h = Header(got);
  EXPECT_EQ(h.block_index, 2u);
  EXPECT_EQ(h.offset, 123456u);
  ASSERT_EQ(h.length, 300000u - 123456u);
  EXPECT_TRUE(got.substr(kResponseHeaderBytes) == data_.Expected(0, 0, 2, 3).substr(123456));
}

TEST_P(DataPlaneProtocolTest, PipelinedRequestsAreAnsweredInOrder) {
  const Ticket t = Open(All());
  UniqueFd fd = Dial(server_->data_port());
  SendRequest(fd.get(), t, 2, 1, 0);
  SendRequest(fd.get(), t, 0, 1, 0);
  SendRequest(fd.get(), t, 0, 2, 50);
  ::shutdown(fd.get(), SHUT_WR);
  const std::string got = ReadUntilClose(fd.get());
  std::vector<uint32_t> order;
  size_t pos = 0;
  while (pos + kResponseHeaderBytes <= got.size()) {
    const ResponseHeader h = Header(absl::string_view(got).substr(pos));
    order.push_back(h.block_index);
    pos += kResponseHeaderBytes + h.length;
  }
  EXPECT_EQ(order, (std::vector<uint32_t>{2, 0, 0, 1}));
  EXPECT_EQ(pos, got.size());
}

// Sends `request` and expects one ERROR frame with `code`, then a closed connection.
void ExpectErrorFrame(uint16_t port, absl::string_view request, absl::StatusCode code,
                      absl::string_view text) {
  UniqueFd fd = Dial(port);
  ASSERT_EQ(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  const std::string got = ReadUntilClose(fd.get());
  ASSERT_GE(got.size(), kResponseHeaderBytes)
      << "expecting an error frame about '" << text << "'; recv: " << std::strerror(errno);
  const ResponseHeader h = Header(got);
  EXPECT_EQ(h.kind, FrameKind::kError);
  EXPECT_EQ(h.status, static_cast<uint16_t>(code));
  ASSERT_EQ(got.size(), kResponseHeaderBytes + h.message_bytes);
  EXPECT_NE(got.find(std::string(text)), std::string::npos) << got.substr(kResponseHeaderBytes);
}

std::string Frame(const Ticket& t, uint32_t first, uint32_t count, uint64_t offset = 0) {
  FetchRequest r{t, first, count, offset};
  char frame[kRequestBytes];
  EncodeFetchRequest(r, frame);
  return std::string(frame, sizeof(frame));
}

TEST_P(DataPlaneProtocolTest, UnknownTicketIsRejected) {
  Open(All());
  Ticket forged{};
  forged.fill(0x5a);
  ExpectErrorFrame(server_->data_port(), Frame(forged, 0, 1), absl::StatusCode::kUnauthenticated,
                   "unknown, closed or expired");
}

TEST_P(DataPlaneProtocolTest, ClosedTicketIsRejected) {
  const Ticket t = Open(All());
  ASSERT_TRUE(client_.CloseStream(server_->control_target(), std::string(t.begin(), t.end())).ok());
  ExpectErrorFrame(server_->data_port(), Frame(t, 0, 1), absl::StatusCode::kUnauthenticated,
                   "unknown, closed or expired");
}

TEST_P(DataPlaneProtocolTest, ExpiredTicketIsRejected) {
  auto short_lived = testing::StartServer(dir_.path(), GetParam(), absl::Nanoseconds(1));
  auto handle = client_.OpenStream(short_lived->control_target(), kApp, All());
  ASSERT_TRUE(handle.ok()) << handle.status();
  const Ticket t = testing::TicketOf(handle->ticket());
  ExpectErrorFrame(short_lived->data_port(), Frame(t, 0, 1), absl::StatusCode::kUnauthenticated,
                   "expired");
}

TEST_P(DataPlaneProtocolTest, BadFramesGetAnErrorAndTheServerKeepsServing) {
  const Ticket t = Open(All());
  std::string bad_magic = Frame(t, 0, 1);
  bad_magic[0] = 'X';
  ExpectErrorFrame(server_->data_port(), bad_magic, absl::StatusCode::kInvalidArgument, "magic");
  std::string bad_version = Frame(t, 0, 1);
  bad_version[4] = 9;
  ExpectErrorFrame(server_->data_port(), bad_version, absl::StatusCode::kInvalidArgument,
                   "version");
  ExpectErrorFrame(server_->data_port(), Frame(t, 0, 0), absl::StatusCode::kInvalidArgument,
                   "zero blocks");
  ExpectErrorFrame(server_->data_port(), Frame(t, 2, 2), absl::StatusCode::kOutOfRange,
                   "the stream has 3");
  ExpectErrorFrame(server_->data_port(), Frame(t, 0xffffffffu, 2), absl::StatusCode::kOutOfRange,
                   "the stream has 3");
  ExpectErrorFrame(server_->data_port(), Frame(t, 0, 1, 101), absl::StatusCode::kOutOfRange,
                   "past the end of block 0");

  UniqueFd fd = Dial(server_->data_port());
  SendRequest(fd.get(), t, 0, 1, 0);
  ::shutdown(fd.get(), SHUT_WR);
  const std::string got = ReadUntilClose(fd.get());
  EXPECT_EQ(got.size(), kResponseHeaderBytes + 100);
}

TEST_P(DataPlaneProtocolTest, ATruncatedRequestClosesTheConnection) {
  const Ticket t = Open(All());
  UniqueFd fd = Dial(server_->data_port());
  const std::string frame = Frame(t, 0, 1);
  ASSERT_EQ(::send(fd.get(), frame.data(), 17, MSG_NOSIGNAL), 17);
  ::shutdown(fd.get(), SHUT_WR);
  EXPECT_EQ(ReadUntilClose(fd.get()), "");
}

TEST_P(DataPlaneProtocolTest, AHugeRequestDoesNotStarveAnotherConnectionOnItsThread) {
  // One data-plane thread, so both connections share one scheduler. A reader that keeps
  // up means the big request's socket may never fill, so the server must take turns of
  // its own accord.
  data_.AddMapOutput(dir_.path(), kApp, 1, 0, {size_t{4} << 20});
  FerryServerOptions options = testing::TestServerOptions(dir_.path(), GetParam());
  options.data.threads = 1;
  server_ = testing::StartServer(options);
  constexpr int kBigBlocks = 256;  // 1 GiB
  const Ticket big = Open(std::vector<BlockId>(kBigBlocks, BlockId{1, 0, 0, 1}));
  const Ticket small = Open(All());
  UniqueFd big_fd = Dial(server_->data_port());
  SendRequest(big_fd.get(), big, 0, kBigBlocks, 0);
  std::atomic<uint64_t> big_received{0};
  std::thread reader([&] {
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::recv(big_fd.get(), buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      big_received += static_cast<uint64_t>(n);
    }
  });
  testing::WaitFor([&] { return big_received.load() >= (uint64_t{16} << 20); }, absl::Seconds(30));
  if (big_received.load() < (uint64_t{16} << 20)) {
    ::shutdown(big_fd.get(), SHUT_RDWR);
    reader.join();
    FAIL() << "the big request never got going";
  }

  UniqueFd small_fd = Dial(server_->data_port());
  SendRequest(small_fd.get(), small, 0, 1, 0);
  const std::string answer = testing::ReadBytes(small_fd.get(), kResponseHeaderBytes + 100);
  const uint64_t big_when_answered = big_received.load();
  // EXPECT, not ASSERT: the reader thread must be joined below whatever happens.
  EXPECT_EQ(answer.size(), kResponseHeaderBytes + 100);
  if (answer.size() == kResponseHeaderBytes + 100) {
    EXPECT_EQ(answer.substr(kResponseHeaderBytes), data_.Expected(0, 0, 0, 1));
  }
  const uint64_t big_total = kBigBlocks * (kResponseHeaderBytes + (uint64_t{4} << 20));
  EXPECT_LT(big_when_answered, big_total / 2) << "the small request waited for the big one";
  ::shutdown(big_fd.get(), SHUT_RDWR);
  reader.join();
}

INSTANTIATE_TEST_SUITE_P(Configs, DataPlaneProtocolTest,
                         ::testing::ValuesIn(testing::AllServerConfigs()),
                         [](const ::testing::TestParamInfo<testing::ServerConfig>& config) {
                           return testing::ConfigName(config.param);
                         });

TEST(DataPlaneModesTest, EveryModeAndEnginePutsIdenticalBytesOnTheWire) {
  TempDir dir;
  DataSet data;
  data.AddMapOutput(dir.path(), kApp, 0, 0, {size_t{3} << 20, 0, 1, 777777});
  data.AddMapOutput(dir.path(), kApp, 0, 1, {4096, 8192});
  std::vector<std::string> wire;
  for (const testing::ServerConfig& config : testing::AllServerConfigs()) {
    auto server = testing::StartServer(dir.path(), config, absl::Minutes(1), size_t{64} << 10);
    ControlClient control;
    std::vector<BlockId> blocks;
    for (const BlockLocation& b : data.AllPartitions("")) blocks.push_back(b.block);
    blocks.push_back({0, 0, 0, 4});
    auto handle = control.OpenStream(server->control_target(), kApp, blocks);
    ASSERT_TRUE(handle.ok()) << handle.status();
    const Ticket t = testing::TicketOf(handle->ticket());
    UniqueFd fd = Dial(server->data_port());
    SendRequest(fd.get(), t, 0, static_cast<uint32_t>(blocks.size()), 0);
    SendRequest(fd.get(), t, 3, 1, 1000);
    ::shutdown(fd.get(), SHUT_WR);
    wire.push_back(ReadUntilClose(fd.get()));
  }
  EXPECT_GT(wire[0].size(), size_t{6} << 20);
  for (size_t i = 1; i < wire.size(); ++i) {
    EXPECT_TRUE(wire[i] == wire[0])
        << testing::ConfigName(testing::AllServerConfigs()[i]) << " sent " << wire[i].size()
        << " bytes, " << testing::ConfigName(testing::AllServerConfigs()[0]) << " "
        << wire[0].size();
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(DataPlaneLimitsTest, ConnectionsOverTheLimitGetABusyErrorNotASilentClose) {
  TempDir dir;
  DataSet data;
  data.AddMapOutput(dir.path(), kApp, 0, 0, {100});
  FerryServerOptions options;
  options.data_dir = dir.path();
  options.data.threads = 1;
  options.data.max_connections = 1;
  auto server = FerryServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ControlClient control;
  auto handle = control.OpenStream((*server)->control_target(), kApp, {{0, 0, 0, 1}});
  ASSERT_TRUE(handle.ok());
  const Ticket t = testing::TicketOf(handle->ticket());

  // The first connection is served and stays open.
  UniqueFd first = Dial((*server)->data_port());
  SendRequest(first.get(), t, 0, 1, 0);
  char head[kResponseHeaderBytes];
  ASSERT_EQ(::recv(first.get(), head, sizeof(head), MSG_WAITALL),
            static_cast<ssize_t>(sizeof(head)));
  EXPECT_EQ(Header(absl::string_view(head, sizeof(head))).kind, FrameKind::kBlock);

  // The second is told the server is busy, then closed.
  UniqueFd second = Dial((*server)->data_port());
  const std::string busy = ReadUntilClose(second.get());
  ASSERT_GE(busy.size(), kResponseHeaderBytes);
  const ResponseHeader h = Header(busy);
  EXPECT_EQ(h.kind, FrameKind::kError);
  EXPECT_EQ(h.status, static_cast<uint16_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(busy.find("server busy"), std::string::npos);
  EXPECT_EQ((*server)->data_server().connections_refused(), 1u);

  // Once the first goes away, a new connection is served again.
  first.Reset();
  // The server notices the close asynchronously.
  ASSERT_TRUE(testing::WaitFor([&] { return (*server)->data_server().connections_open() == 0; }));
  UniqueFd third = Dial((*server)->data_port());
  SendRequest(third.get(), t, 0, 1, 0);
  ::shutdown(third.get(), SHUT_WR);
  EXPECT_EQ(ReadUntilClose(third.get()).size(), kResponseHeaderBytes + 100);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(DataPlaneLimitsTest, AClientThatSendsNothingIsDroppedAfterTheIdleTimeout) {
  TempDir dir;
  DataSet data;
  data.AddMapOutput(dir.path(), kApp, 0, 0, {100});
  FerryServerOptions options;
  options.data_dir = dir.path();
  options.connection.idle_timeout = absl::Milliseconds(200);
  auto server = FerryServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd silent = Dial((*server)->data_port());  // reads give up after 10 s
  const absl::Time start = absl::Now();
  EXPECT_EQ(ReadUntilClose(silent.get()), "");
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(150));
  EXPECT_LT(waited, absl::Seconds(5));
  // Others are still served.
  ControlClient control;
  auto handle = control.OpenStream((*server)->control_target(), kApp, {{0, 0, 0, 1}});
  ASSERT_TRUE(handle.ok());
  const Ticket t = testing::TicketOf(handle->ticket());
  UniqueFd fd = Dial((*server)->data_port());
  SendRequest(fd.get(), t, 0, 1, 0);
  ::shutdown(fd.get(), SHUT_WR);
  EXPECT_EQ(ReadUntilClose(fd.get()).size(), kResponseHeaderBytes + 100);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(DataPlaneLifecycleTest, ShutdownClosesTheListeners) {
  TempDir dir;
  FerryServerOptions options;
  options.data_dir = dir.path();
  options.data.threads = 2;
  auto server = FerryServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const uint16_t port = (*server)->data_port();
  (*server)->Shutdown();
  // A listener left open would still complete handshakes into a backlog nobody
  // accepts; a closed one refuses.
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = testing::LoopbackAddress(port);
  EXPECT_NE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(errno, ECONNREFUSED);
}

TEST(DataPlaneThreadsTest, ConnectionsAreSpreadEvenlyOverTheThreads) {
  // The kernel's SO_REUSEPORT hash alone would leave the threads uneven most of the
  // time (all 20 on one listener is as likely as any other split); each accepted
  // connection goes to the thread serving the fewest instead.
  TempDir dir;
  DataSet data;
  data.AddMapOutput(dir.path(), kApp, 0, 0, {10});
  FerryServerOptions options = testing::TestServerOptions(dir.path(), {});
  options.data.threads = 2;
  auto server = testing::StartServer(options);
  std::vector<UniqueFd> conns;
  for (int i = 0; i < 20; ++i) {
    conns.push_back(Dial(server->data_port()));
    // One at a time, each counted before the next arrives, so the split is exact.
    ASSERT_TRUE(
        testing::WaitFor([&] { return server->data_server().connections_open() >= conns.size(); }));
  }
  EXPECT_EQ(server->data_server().connections_per_thread(), (std::vector<uint64_t>{10, 10}));
  // Handed-off connections are served like the others.
  ControlClient control;
  auto handle = control.OpenStream(server->control_target(), kApp, {{0, 0, 0, 1}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  const Ticket t = testing::TicketOf(handle->ticket());
  for (UniqueFd& fd : conns) {
    SendRequest(fd.get(), t, 0, 1, 0);
    ::shutdown(fd.get(), SHUT_WR);
    const std::string got = ReadUntilClose(fd.get());
    ASSERT_EQ(got.size(), kResponseHeaderBytes + 10);
    EXPECT_EQ(got.substr(kResponseHeaderBytes), data.Expected(0, 0, 0, 1));
  }
  conns.clear();
  ASSERT_TRUE(testing::WaitFor([&] { return server->data_server().connections_open() == 0; }));
  EXPECT_EQ(server->data_server().connections_per_thread(), (std::vector<uint64_t>{0, 0}));
}

}  // namespace
}  // namespace ferry
