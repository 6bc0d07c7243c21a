// SegmentSender over a real loopback connection, from a real file, in every mode and
// engine: the bytes that arrive are the header and exactly the segment asked for.
#include "server/dataplane/segment_sender.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/io/ready_ops.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

struct Config {
  DataPlaneMode mode;
  IoEngine engine;
};

class SegmentSenderTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < (size_t{3} << 20) + 777; ++i) {
      content_.push_back(static_cast<char>(i * 7));
    }
    path_ = dir_.path() + "/data";
    UniqueFd out(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_EQ(::write(out.get(), content_.data(), content_.size()),
              static_cast<ssize_t>(content_.size()));
    file_.path = "app/data";
    file_.fd.Reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    options_.mode = GetParam().mode;
    options_.engine = GetParam().engine;
    options_.pipe_bytes = 64 << 10;
    options_.copy_buffer_bytes = 64 << 10;
  }

  // Sends through a SegmentSender on a fiber while this thread reads `expect_bytes`.
  std::string SendAndRead(const std::function<void(SegmentSender&)>& send, size_t expect_bytes,
                          absl::Status* status) {
    uint16_t port = 0;
    UniqueFd listener = testing::ListenLoopback(&port, 1);
    UniqueFd reader = testing::ConnectLoopback(port);
    UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    std::string got;
    std::thread read([&] {
      char buf[65536];
      while (got.size() < expect_bytes) {
        const ssize_t n = ::recv(reader.get(), buf, sizeof(buf), 0);
        if (n <= 0) return;
        got.append(buf, static_cast<size_t>(n));
      }
    });
    testing::RunInFiber([&] {
      ASSERT_EQ(SocketIoFor(options_.engine).Prepare(server.get()), 0);
      SegmentSender sender(server.get(), options_);
      send(sender);
      *status = absl::OkStatus();
    });
    server.Reset();
    read.join();
    return got;
  }

  testing::TempDir dir_;
  std::string path_;
  std::string content_;
  DataFile file_;
  ConnectionOptions options_;
};

TEST_P(SegmentSenderTest, HeaderThenExactlyTheSegment) {
  absl::Status status;
  const uint64_t pos = 12345;
  const uint64_t length = (size_t{2} << 20) + 99;  // several pipe or buffer loads
  const std::string got = SendAndRead(
      [&](SegmentSender& sender) {
        sender.StartResponse(length);
        ASSERT_EQ(sender.Send("HEAD", 4, /*more=*/true), 4);
        ASSERT_TRUE(sender.SendFile(file_, pos, length, [] { return std::string("seg"); }).ok());
        ASSERT_TRUE(sender.SendFile(file_, 0, 0, [] { return std::string("empty"); }).ok());
        sender.EndResponse();
      },
      4 + length, &status);
  ASSERT_EQ(got.size(), 4 + length);
  EXPECT_EQ(got.substr(0, 4), "HEAD");
  EXPECT_TRUE(got.compare(4, length, content_, pos, length) == 0);
}

// Segments around kSmallSegmentBytes, which splice mode copies below and splices above.
TEST_P(SegmentSenderTest, SmallAndJustLargerSegmentsArriveWhole) {
  absl::Status status;
  const uint64_t small = SegmentSender::kSmallSegmentBytes;
  const std::vector<std::pair<uint64_t, uint64_t>> segments = {
      {7, 1}, {100, 1000}, {4096, small}, {3, small + 1}};
  uint64_t total = 0;
  for (const auto& [pos, length] : segments) total += length;
  const std::string got = SendAndRead(
      [&](SegmentSender& sender) {
        for (const auto& [pos, length] : segments) {
          ASSERT_TRUE(
              sender.SendFile(file_, pos, length, [] { return std::string("seg"); }).ok());
        }
      },
      total, &status);
  std::string expected;
  for (const auto& [pos, length] : segments) expected += content_.substr(pos, length);
  EXPECT_EQ(got, expected);
}

TEST_P(SegmentSenderTest, FileShorterThanTheSegmentIsDataLossNamingIt) {
  absl::Status status;
  absl::Status send_status;
  (void)SendAndRead(
      [&](SegmentSender& sender) {
        send_status = sender.SendFile(file_, content_.size() - 10, 100,
                                      [] { return std::string("shuffle 0 map 1 reduce 2"); });
      },
      10, &status);
  EXPECT_EQ(send_status.code(), absl::StatusCode::kDataLoss) << send_status;
  EXPECT_NE(send_status.message().find("shuffle 0 map 1 reduce 2"), std::string::npos);
  EXPECT_NE(send_status.message().find("app/data"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, SegmentSenderTest,
    ::testing::Values(Config{DataPlaneMode::kSplice, IoEngine::kInline},
                      Config{DataPlaneMode::kCopy, IoEngine::kInline},
                      Config{DataPlaneMode::kSplice, IoEngine::kUring},
                      Config{DataPlaneMode::kCopy, IoEngine::kUring}),
    [](const ::testing::TestParamInfo<Config>& param) {
      return absl::StrCat(param.param.mode == DataPlaneMode::kSplice ? "Splice" : "Copy",
                          param.param.engine == IoEngine::kInline ? "Inline" : "Uring");
    });

}  // namespace
}  // namespace ferry
