// SegmentSender over a real loopback connection, from a real file, in every mode and
// engine, with the file cached and evicted from the page cache (then the disk's workers
// read it): the bytes that arrive are the header and exactly the segment asked for.
#include "server/dataplane/segment_sender.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/ready_ops.h"
#include "gtest/gtest.h"
#include "tests/testing/cold_file.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

struct Config {
  DataPlaneMode mode;
  IoEngine engine;
  bool cold;
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
    ASSERT_EQ(::fdatasync(out.get()), 0);
    auto file = std::make_shared<DataFile>();
    file->path = "app/data";
    file->fd.Reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    ASSERT_EQ(::fstat(file->fd.get(), &st), 0);
    file->identity = {st.st_dev, st.st_ino};
    file_ = file;
    options_.mode = GetParam().mode;
    options_.engine = GetParam().engine;
    options_.copy_buffer_bytes = 64 << 10;
  }

  // For the cold configurations: the file leaves the page cache.
  void Evict() {
    if (!GetParam().cold) return;
    const absl::Status evicted = testing::Evict(file_->fd.get());
    if (absl::IsFailedPrecondition(evicted)) GTEST_SKIP() << evicted;
    ASSERT_TRUE(evicted.ok()) << evicted;
  }

  // Reads the disk's workers did.
  uint64_t DiskReads() const {
    uint64_t reads = 0;
    for (const auto& disk : disks_.Stats()) reads += disk.reads;
    return reads;
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
      SegmentSender sender(server.get(), options_, pipes_, disks_);
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
  std::shared_ptr<DataFile> file_;
  ConnectionOptions options_;
  PipePool pipes_{2, 64 << 10};
  DiskReader disks_{DiskReader::Options{}};
};

TEST_P(SegmentSenderTest, HeaderThenExactlyTheSegment) {
  Evict();
  if (IsSkipped()) return;
  absl::Status status;
  const uint64_t pos = 12345;
  const uint64_t length = (size_t{2} << 20) + 99;  // several pipe or buffer loads
  const std::string got = SendAndRead(
      [&](SegmentSender& sender) {
        sender.StartResponse(length);
        int headers = 0;
        ASSERT_TRUE(sender
                        .SendSegment(
                            "HEAD", file_, pos, length, [] { return std::string("seg"); },
                            [&] { ++headers; })
                        .ok());
        ASSERT_TRUE(
            sender
                .SendSegment(
                    "E", file_, 0, 0, [] { return std::string("empty"); }, [&] { ++headers; })
                .ok());
        EXPECT_EQ(headers, 2);
        sender.EndResponse();
      },
      4 + length + 1, &status);
  ASSERT_EQ(got.size(), 4 + length + 1);
  EXPECT_EQ(got.substr(0, 4), "HEAD");
  EXPECT_TRUE(got.compare(4, length, content_, pos, length) == 0);
  EXPECT_EQ(got.substr(4 + length), "E");
  // Cached, nothing goes to the disk's workers. (Cold, how much does depends on how fast
  // the kernel's read-ahead, which the first miss starts, outruns the sender.)
  if (!GetParam().cold) {
    EXPECT_EQ(DiskReads(), 0u);
  }
  // Every pipe went back to the pool.
  EXPECT_EQ(pipes_.out(), 0u);
}

// Segments around kSmallSegmentBytes, which splice mode copies below and splices above.
TEST_P(SegmentSenderTest, SmallAndJustLargerSegmentsArriveWhole) {
  Evict();
  if (IsSkipped()) return;
  absl::Status status;
  const uint64_t small = SegmentSender::kSmallSegmentBytes;
  const std::vector<std::pair<uint64_t, uint64_t>> segments = {
      {7, 1}, {100, 1000}, {4096, small}, {3, small + 1}};
  uint64_t total = 0;
  for (const auto& [pos, length] : segments) total += 1 + length;
  const std::string got = SendAndRead(
      [&](SegmentSender& sender) {
        for (const auto& [pos, length] : segments) {
          ASSERT_TRUE(sender
                          .SendSegment(
                              "H", file_, pos, length, [] { return std::string("seg"); }, [] {})
                          .ok());
        }
      },
      total, &status);
  std::string expected;
  for (const auto& [pos, length] : segments) expected += "H" + content_.substr(pos, length);
  EXPECT_EQ(got, expected);
}

TEST_P(SegmentSenderTest, FileShorterThanTheSegmentIsDataLossNamingIt) {
  Evict();
  if (IsSkipped()) return;
  absl::Status status;
  absl::Status send_status;
  bool header_sent = false;
  const std::string got = SendAndRead(
      [&](SegmentSender& sender) {
        send_status = sender.SendSegment(
            "HEAD", file_, content_.size() - 10, 100,
            [] { return std::string("shuffle 0 map 1 reduce 2"); }, [&] { header_sent = true; });
      },
      10, &status);
  EXPECT_EQ(send_status.code(), absl::StatusCode::kDataLoss) << send_status;
  EXPECT_NE(send_status.message().find("shuffle 0 map 1 reduce 2"), std::string::npos);
  EXPECT_NE(send_status.message().find("app/data"), std::string::npos);
  // Its one chunk fell short before the header went: the peer was promised nothing.
  EXPECT_FALSE(header_sent);
  EXPECT_EQ(got, "");
}

// With every pipe of the thread held (by senders whose peers do not read), a segment
// is copied after a short wait instead of stalling behind them.
TEST_P(SegmentSenderTest, WithoutAFreePipeTheSegmentIsCopied) {
  Evict();
  if (IsSkipped()) return;
  absl::Status status;
  const uint64_t length = (size_t{1} << 20) + 5;
  absl::StatusOr<PipePool::Lease> held = absl::UnknownError("not taken");
  const std::string got = SendAndRead(
      [&](SegmentSender& sender) {
        held = pipes_.Take(absl::Now() + absl::Seconds(10));
        ASSERT_TRUE(held.ok());
        absl::StatusOr<PipePool::Lease> second = pipes_.Take(absl::Now() + absl::Seconds(10));
        ASSERT_TRUE(second.ok());
        ASSERT_TRUE(sender
                        .SendSegment(
                            "H", file_, 77, length, [] { return std::string("seg"); }, [] {})
                        .ok());
        second->Return();
        held->Return();
      },
      1 + length, &status);
  EXPECT_TRUE(got == "H" + content_.substr(77, length));
  EXPECT_EQ(pipes_.fallbacks(), GetParam().mode == DataPlaneMode::kSplice ? 1u : 0u);
}

// A Unix-domain socket counts nothing in its send queue (SO_MEMINFO's wmem_queued is
// 0), so the room it reports is always its whole buffer: the kernel takes less than it
// said, as TCP's does when it cuts a socket's buffer under memory pressure. A spliced
// chunk it has not taken after kSocketStall costs its pipe, and the segment waits for
// the socket with none held; once the peer reads, every byte arrives, in order.
TEST_P(SegmentSenderTest, ASocketThatTakesLessThanItSaidHoldsNoPipe) {
  if (GetParam().mode != DataPlaneMode::kSplice) GTEST_SKIP() << "copy mode holds no pipe";
  Evict();
  if (IsSkipped()) return;
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd server(pair[0]);
  UniqueFd reader(pair[1]);
  const uint64_t pos = 3;
  const uint64_t length = (size_t{3} << 20) - 3;
  std::atomic<bool> held_none{false};
  std::string got;
  std::thread read([&] {
    // Not read until the sender stalled and gave its pipe up.
    held_none = testing::WaitFor([&] { return pipes_.stalls() > 0 && pipes_.out() == 0; });
    char buf[65536];
    while (got.size() < 1 + length) {
      const ssize_t n = ::recv(reader.get(), buf, sizeof(buf), 0);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
  });
  absl::Status sent = absl::UnknownError("not run");
  testing::RunInFiber([&] {
    ASSERT_EQ(SocketIoFor(options_.engine).Prepare(server.get()), 0);
    SegmentSender sender(server.get(), options_, pipes_, disks_);
    sent = sender.SendSegment(
        "H", file_, pos, length, [] { return std::string("seg"); }, [] {});
  });
  server.Reset();
  read.join();
  EXPECT_TRUE(held_none) << pipes_.out() << " pipes held, " << pipes_.stalls() << " stalls";
  EXPECT_TRUE(sent.ok()) << sent;
  ASSERT_EQ(got.size(), 1 + length);
  EXPECT_TRUE(got == "H" + content_.substr(pos, length));
  EXPECT_EQ(pipes_.out(), 0u);
}

// A peer that never reads such a socket fails after io_timeout, as over TCP, holding no
// pipe while it waits.
TEST_P(SegmentSenderTest, APeerThatNeverReadsTimesOutHoldingNoPipe) {
  if (GetParam().mode != DataPlaneMode::kSplice) GTEST_SKIP() << "copy mode holds no pipe";
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd server(pair[0]);
  UniqueFd reader(pair[1]);
  options_.io_timeout = absl::Milliseconds(500);
  absl::Status sent = absl::UnknownError("not run");
  const absl::Time start = absl::Now();
  testing::RunInFiber([&] {
    ASSERT_EQ(SocketIoFor(options_.engine).Prepare(server.get()), 0);
    SegmentSender sender(server.get(), options_, pipes_, disks_);
    sent = sender.SendSegment(
        "H", file_, 0, content_.size(), [] { return std::string("shuffle 1 map 2 reduce 3"); },
        [] {});
  });
  EXPECT_EQ(sent.code(), absl::StatusCode::kDeadlineExceeded) << sent;
  EXPECT_NE(sent.message().find("shuffle 1 map 2 reduce 3"), std::string::npos) << sent;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_GT(pipes_.stalls(), 0u);
  EXPECT_EQ(pipes_.out(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Configs, SegmentSenderTest,
                         ::testing::Values(Config{DataPlaneMode::kSplice, IoEngine::kInline, false},
                                           Config{DataPlaneMode::kCopy, IoEngine::kInline, false},
                                           Config{DataPlaneMode::kSplice, IoEngine::kUring, false},
                                           Config{DataPlaneMode::kCopy, IoEngine::kUring, false},
                                           Config{DataPlaneMode::kSplice, IoEngine::kInline, true},
                                           Config{DataPlaneMode::kCopy, IoEngine::kInline, true},
                                           Config{DataPlaneMode::kSplice, IoEngine::kUring, true},
                                           Config{DataPlaneMode::kCopy, IoEngine::kUring, true}),
                         [](const ::testing::TestParamInfo<Config>& param) {
                           return absl::StrCat(
                               param.param.mode == DataPlaneMode::kSplice ? "Splice" : "Copy",
                               param.param.engine == IoEngine::kInline ? "Inline" : "Uring",
                               param.param.cold ? "Cold" : "");
                         });

}  // namespace
}  // namespace ferry
