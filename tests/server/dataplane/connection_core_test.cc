// ConnectionCore over a real loopback TCP connection, on a fiber, with both io engines:
// frames of either shape come out whole however the peer's bytes arrive, grown buffers
// are charged to the server's budget, the deadlines and the drain end the wait, and a
// block is sent only while its file still holds it.
#include "server/dataplane/connection_core.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/run_fiber.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

// Frames of a one-byte length header: the header byte counts the bytes after it.
absl::StatusOr<size_t> OneByteLength(absl::string_view header) {
  if (header[0] == '\xff') return absl::InvalidArgumentError("a frame of 0xff");
  return 1 + static_cast<size_t>(static_cast<uint8_t>(header[0]));
}

// Frames of a four-byte big-endian length header, counting the bytes after it.
absl::StatusOr<size_t> FourByteLength(absl::string_view header) {
  uint32_t n = 0;
  for (char c : header) n = (n << 8) | static_cast<uint8_t>(c);
  return 4 + size_t{n};
}

std::string FourByteFrame(const std::string& body) {
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string out = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
  return out + body;
}

class ConnectionCoreTest : public ::testing::TestWithParam<IoEngine> {
 protected:
  void SetUp() override {
    options_.engine = GetParam();
    uint16_t port = 0;
    listener_ = testing::ListenLoopback(&port, 1);
    peer_ = testing::ConnectLoopback(port);
    server_.Reset(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    control_.fd = server_.get();
    control_.draining = &draining_;
    control_.metrics = &metrics_;
    control_.request_buffers = &budget_;
    control_.pipes = &pipes_;
    control_.disks = &disks_;
  }

  // A data file holding `content` at `path`, open for reading, named `name`.
  static std::shared_ptr<DataFile> DataFileOf(const std::string& path, const std::string& content,
                                              const std::string& name) {
    {
      UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      EXPECT_EQ(::write(out.get(), content.data(), content.size()),
                static_cast<ssize_t>(content.size()));
    }
    auto file = std::make_shared<DataFile>();
    file->path = name;
    file->fd.Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    return file;
  }

  // The peer reads all the server sends into *got, until the connection closes.
  std::thread PeerReadsAll(std::string* got) {
    return std::thread([this, got] {
      char buf[65536];
      for (;;) {
        const ssize_t n = ::recv(peer_.get(), buf, sizeof(buf), 0);
        if (n <= 0) return;
        got->append(buf, static_cast<size_t>(n));
      }
    });
  }

  void PeerSends(const std::string& bytes) {
    ASSERT_EQ(::send(peer_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // Runs `body` with a started core over the accepted socket, on a fiber.
  void WithCore(const std::function<void(ConnectionCore&)>& body) {
    testing::RunInFiber([&] {
      ConnectionCore core(std::move(server_), FrontDoor::kSpark, options_, control_);
      ASSERT_TRUE(core.Start());
      body(core);
    });
  }

  ConnectionOptions options_;
  UniqueFd listener_;
  UniqueFd peer_;
  UniqueFd server_;
  std::atomic<bool> draining_{false};
  ThreadMetrics metrics_;
  ClientBudget budget_{uint64_t{1} << 20, uint64_t{1} << 20, "request bytes"};
  PipePool pipes_{1, 1 << 20};
  DiskReader disks_{DiskReader::Options{}};
  ConnectionControl control_;
};

TEST_P(ConnectionCoreTest, PipelinedFramesComeOutWholeAndInOrder) {
  // Three frames and the start of a fourth in one send; the rest of the fourth only
  // once the first three are served, so that it takes a second read.
  PeerSends(
      std::string("\x03"
                  "abc"
                  "\x00"
                  "\x02"
                  "de"
                  "\x04"
                  "fg",
                  11));
  std::vector<std::string> frames;
  WithCore([&](ConnectionCore& core) {
    const ConnectionCore::Framing framing{1, 256, OneByteLength};
    absl::string_view frame;
    while (core.NextFrame(framing, &frame)) {
      frames.emplace_back(frame);
      if (frames.size() == 3) {
        PeerSends("hi");
        ::shutdown(peer_.get(), SHUT_WR);
      }
    }
    EXPECT_EQ(core.partial_frame_bytes(), 0u);
  });
  EXPECT_EQ(frames, (std::vector<std::string>{"\x03"
                                              "abc",
                                              std::string("\x00", 1),
                                              "\x02"
                                              "de",
                                              "\x04"
                                              "fghi"}));
  EXPECT_FALSE(control_.serving);  // it ended waiting for the peer
}

TEST_P(ConnectionCoreTest, AnUploadsBodyIsReadWithTheUploadsThatFollowIt) {
  // Two uploads (a frame, then a body outside it): the first frame with a part of its
  // body, then the rest of that body together with the whole second upload.
  const std::string body1(3000, 'x');
  const std::string body2 = "second body";
  PeerSends(FourByteFrame("one") + body1.substr(0, 100));
  std::string got1;
  std::string got2;
  std::vector<std::string> frames;
  WithCore([&](ConnectionCore& core) {
    const ConnectionCore::Framing framing{4, 1024, FourByteLength};
    absl::string_view frame;
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    frames.emplace_back(frame.substr(4));
    PeerSends(body1.substr(100) + FourByteFrame("two") + body2);
    ::shutdown(peer_.get(), SHUT_WR);
    absl::Status sink;
    const auto into = [](std::string* out) {
      return [out](absl::string_view bytes) {
        out->append(bytes.data(), bytes.size());
        return absl::OkStatus();
      };
    };
    ASSERT_TRUE(
        core.ReceiveBody(body1.size(), absl::Now() + absl::Seconds(10), into(&got1), &sink));
    EXPECT_TRUE(sink.ok()) << sink;
    // The second upload came in the same read as the first body's end.
    EXPECT_EQ(core.partial_frame_bytes(), 4 + 3 + body2.size());
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    frames.emplace_back(frame.substr(4));
    ASSERT_TRUE(
        core.ReceiveBody(body2.size(), absl::Now() + absl::Seconds(10), into(&got2), &sink));
    EXPECT_FALSE(core.NextFrame(framing, &frame));  // the peer closed
    EXPECT_EQ(core.partial_frame_bytes(), 0u);
  });
  EXPECT_EQ(frames, (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(got1 == body1);
  EXPECT_EQ(got2, body2);
}

// A body lands in its file whether it is written on the thread (a small piece while the
// machine's dirty pages are low) or through the ring, each at its own offset.
TEST_P(ConnectionCoreTest, ABodyIsWrittenToItsFileInlineOrThroughTheRing) {
  testing::TempDir dir;
  UniqueFd file(
      ::open((dir.path() + "/merged").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_TRUE(file.valid());
  const std::string inline_body(3000, 'i');
  const std::string ring_body(2000, 'r');
  PeerSends(FourByteFrame("one") + inline_body + FourByteFrame("two") + ring_body);
  ::shutdown(peer_.get(), SHUT_WR);
  WithCore([&](ConnectionCore& core) {
    const ConnectionCore::Framing framing{4, 1024, FourByteLength};
    absl::string_view frame;
    absl::Status sink;
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    ASSERT_TRUE(core.ReceiveBodyToFile(inline_body.size(), absl::Now() + absl::Seconds(10),
                                       file.get(), 0, /*write_inline=*/true, &sink));
    EXPECT_TRUE(sink.ok()) << sink;
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    ASSERT_TRUE(core.ReceiveBodyToFile(ring_body.size(), absl::Now() + absl::Seconds(10),
                                       file.get(), static_cast<int64_t>(inline_body.size()),
                                       /*write_inline=*/false, &sink));
    EXPECT_TRUE(sink.ok()) << sink;
  });
  std::string got(inline_body.size() + ring_body.size() + 1, '\0');
  ASSERT_EQ(::pread(file.get(), got.data(), got.size(), 0), static_cast<ssize_t>(got.size() - 1));
  got.pop_back();
  EXPECT_TRUE(got == inline_body + ring_body);
}

// Held answers wait in the connection and go out in one send: at PushHeld(), or ahead
// of the next answer that is not held; past 16 KiB held they go at once.
TEST_P(ConnectionCoreTest, HeldAnswersGoOutTogether) {
  const auto peer_has = [&] {
    char buf[64 << 10];
    const ssize_t n = ::recv(peer_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    return std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0)));
  };
  const auto peer_waits_for = [&](size_t bytes) {
    std::string got;
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (got.size() < bytes && absl::Now() < give_up) {
      char buf[64 << 10];
      const ssize_t n = ::recv(peer_.get(), buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  };
  WithCore([&](ConnectionCore& core) {
    ASSERT_TRUE(core.SendBytes("ra", /*hold=*/true));
    ASSERT_TRUE(core.SendBytes("rb", /*hold=*/true));
    EXPECT_EQ(peer_has(), "");  // nothing sent yet
    core.PushHeld();
    EXPECT_EQ(peer_waits_for(4), "rarb");
    ASSERT_TRUE(core.SendBytes("rc", /*hold=*/true));
    ASSERT_TRUE(core.SendBytes("rd"));
    EXPECT_EQ(peer_waits_for(4), "rcrd");
    const std::string big(12 << 10, 'x');
    ASSERT_TRUE(core.SendBytes(big, /*hold=*/true));
    EXPECT_EQ(peer_has(), "");
    ASSERT_TRUE(core.SendBytes(big, /*hold=*/true));  // past 16 KiB: both go
    EXPECT_EQ(peer_waits_for(2 * big.size()).size(), 2 * big.size());
    core.PushHeld();  // nothing held: nothing sent
    EXPECT_EQ(peer_has(), "");
  });
}

// Answers held for pipelined requests stay held while the peer's next requests are
// here already, even when reading them takes more reads (three frames of 3,000 bytes
// do not fit the base buffer), and go out together once the connection would wait on
// its peer.
TEST_P(ConnectionCoreTest, HeldAnswersGoOutWhenTheConnectionWouldWait) {
  PeerSends(FourByteFrame("a" + std::string(2999, '.')) +
            FourByteFrame("b" + std::string(2999, '.')) +
            FourByteFrame("c" + std::string(2999, '.')));
  std::string first_read;
  std::thread peer([&] {
    // The first bytes the peer gets: every answer at once, then it closes.
    pollfd p{peer_.get(), POLLIN, 0};
    if (::poll(&p, 1, 10000) == 1) {
      char buf[256];
      const ssize_t n = ::recv(peer_.get(), buf, sizeof(buf), 0);
      first_read.assign(buf, static_cast<size_t>(std::max<ssize_t>(n, 0)));
    }
    ::shutdown(peer_.get(), SHUT_WR);
  });
  WithCore([&](ConnectionCore& core) {
    const ConnectionCore::Framing framing{4, 4096, FourByteLength};
    absl::string_view frame;
    while (core.NextFrame(framing, &frame)) {
      ASSERT_TRUE(core.SendBytes(absl::StrCat("r", frame.substr(4, 1)), /*hold=*/true));
    }
  });
  peer.join();
  EXPECT_EQ(first_read, "rarbrc");
}

// A peer that keeps the buffer full (pipelined small requests) is read up to
// kReadAheadBytes at a time, charged to the budget, which gets it all back.
TEST_P(ConnectionCoreTest, ReadsGrowWhileThePeerKeepsTheBufferFull) {
  std::string frames;
  for (int i = 0; i < 400; ++i) frames += FourByteFrame(std::string(100, 'p'));
  PeerSends(frames);
  ::shutdown(peer_.get(), SHUT_WR);
  uint64_t most = 0;
  int served = 0;
  WithCore([&](ConnectionCore& core) {
    const ConnectionCore::Framing framing{4, 1024, FourByteLength};
    absl::string_view frame;
    while (core.NextFrame(framing, &frame)) {
      ++served;
      most = std::max(most, budget_.used());
    }
  });
  EXPECT_EQ(served, 400);
  EXPECT_GT(most, 0u);
  EXPECT_LE(most, ConnectionCore::kReadAheadBytes - ConnectionCore::kBaseBufferBytes);
  EXPECT_EQ(budget_.used(), 0u);
}

TEST_P(ConnectionCoreTest, ALargeFrameGrowsTheBufferAgainstTheBudgetAndGivesItBack) {
  const std::string body(200000, 'x');
  PeerSends(FourByteFrame(body) + FourByteFrame("small"));
  uint64_t charged = 0;
  WithCore([&](ConnectionCore& core) {
    const ConnectionCore::Framing framing{4, 1 << 20, FourByteLength};
    absl::string_view frame;
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    EXPECT_EQ(frame.substr(4), body);
    charged = budget_.used();
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    EXPECT_EQ(frame.substr(4), "small");
    ::shutdown(peer_.get(), SHUT_WR);
    EXPECT_FALSE(core.NextFrame(framing, &frame));
    // Waiting with nothing held, the buffer is back to its base size.
    EXPECT_EQ(budget_.used(), 0u);
  });
  // Grown with the bytes that arrived, to at least the frame, past the base buffer.
  EXPECT_GE(charged, body.size() + 4 - ConnectionCore::kBaseBufferBytes);
  EXPECT_LE(charged, 2 * (body.size() + 4));
  EXPECT_EQ(budget_.used(), 0u);
}

TEST_P(ConnectionCoreTest, AFrameThatDoesNotFitTheBudgetEndsTheConnection) {
  ClientBudget small(64 << 10, 64 << 10, "request bytes");
  control_.request_buffers = &small;
  PeerSends(FourByteFrame(std::string(300000, 'y')));
  WithCore([&](ConnectionCore& core) {
    absl::string_view frame;
    EXPECT_FALSE(core.NextFrame({4, 1 << 20, FourByteLength}, &frame));
  });
  EXPECT_EQ(small.used(), 0u);
}

TEST_P(ConnectionCoreTest, BadAndOversizedFramesEndTheConnection) {
  PeerSends(
      std::string("\x02"
                  "ok"
                  "\xff",
                  4));
  WithCore([&](ConnectionCore& core) {
    absl::string_view frame;
    const ConnectionCore::Framing framing{1, 256, OneByteLength};
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    EXPECT_FALSE(core.NextFrame(framing, &frame));  // the protocol's error
  });
  SetUp();
  PeerSends(std::string("\x00\x10\x00\x00", 4));  // 1 MiB announced, 64 KiB taken
  WithCore([&](ConnectionCore& core) {
    absl::string_view frame;
    EXPECT_FALSE(core.NextFrame({4, 64 << 10, FourByteLength}, &frame));
  });
  EXPECT_EQ(budget_.used(), 0u);
}

TEST_P(ConnectionCoreTest, APeerThatClosesMidFrameLeavesItsPartialBytes) {
  PeerSends(
      std::string("\x05"
                  "ab",
                  3));
  ::shutdown(peer_.get(), SHUT_WR);
  WithCore([&](ConnectionCore& core) {
    absl::string_view frame;
    EXPECT_FALSE(core.NextFrame({1, 256, OneByteLength}, &frame));
    EXPECT_EQ(core.partial_frame_bytes(), 3u);
  });
}

TEST_P(ConnectionCoreTest, ASilentNewConnectionIsDroppedAtTheFirstRequestTimeout) {
  options_.first_request_timeout = absl::Milliseconds(100);
  const absl::Time start = absl::Now();
  WithCore([&](ConnectionCore& core) {
    absl::string_view frame;
    EXPECT_FALSE(core.NextFrame({1, 256, OneByteLength}, &frame));
  });
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_P(ConnectionCoreTest, ADrainingConnectionServesWhatArrivedAndDoesNotWait) {
  PeerSends(
      std::string("\x01"
                  "a"
                  "\x01"
                  "b",
                  4));
  draining_ = true;
  std::vector<std::string> frames;
  WithCore([&](ConnectionCore& core) {
    absl::string_view frame;
    const ConnectionCore::Framing framing{1, 256, OneByteLength};
    while (core.NextFrame(framing, &frame)) frames.emplace_back(frame);
  });
  // The peer never closed: the core stopped on its own once the bytes were served.
  EXPECT_EQ(frames, (std::vector<std::string>{"\x01"
                                              "a",
                                              "\x01"
                                              "b"}));
}

TEST_P(ConnectionCoreTest, ABlockGoesOutWhileItsFileHoldsItAndFailsInFrameOnceItShrank) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/data";
  const std::string content(100000, 'z');
  // The block that is sent, and one of a copy of its file that shrinks. (Not one file:
  // spliced pages still on their way would show the truncation.)
  const std::string copy = dir.path() + "/copy";
  StreamBlock block;
  block.file = DataFileOf(path, content, "app/data");
  block.offset = 1000;
  block.length = 50000;
  std::shared_ptr<DataFile> other = DataFileOf(copy, content, "app/copy");
  std::string got;
  std::thread read = PeerReadsAll(&got);
  WithCore([&](ConnectionCore& core) {
    core.BeginRequest();
    bool in_frame = false;
    ASSERT_TRUE(core.SendBlock(
                        "HEAD", block, 10, [] { return std::string("b"); }, &in_frame)
                    .ok());
    EXPECT_FALSE(in_frame);
    core.EndRequest(absl::OkStatus());
    StreamBlock shrinking = block;
    shrinking.file = other;
    ASSERT_EQ(::truncate(copy.c_str(), 20000), 0);
    const absl::Status shrunk = core.SendBlock(
        "HEAD", shrinking, 0, [] { return std::string("block b"); }, &in_frame);
    EXPECT_TRUE(absl::IsDataLoss(shrunk)) << shrunk;
    EXPECT_TRUE(in_frame);
    EXPECT_NE(shrunk.message().find("block b"), absl::string_view::npos) << shrunk;
    core.EndRequest(shrunk);
  });
  read.join();
  ASSERT_EQ(got.size(), 4u + 49990u);
  EXPECT_TRUE(got == "HEAD" + content.substr(1010, 49990));
  EXPECT_EQ(metrics_.bytes(FrontDoor::kSpark), 49990u);
  EXPECT_EQ(metrics_.blocks(FrontDoor::kSpark), 1u);
  EXPECT_EQ(metrics_.requests(FrontDoor::kSpark, static_cast<size_t>(absl::StatusCode::kOk)), 1u);
  EXPECT_EQ(metrics_.requests(FrontDoor::kSpark, static_cast<size_t>(absl::StatusCode::kDataLoss)),
            1u);
  EXPECT_EQ(metrics_.requests(FrontDoor::kFerry, static_cast<size_t>(absl::StatusCode::kOk)), 0u);
}

// A toy security layer: records of a length byte (1 to 255) and that many bytes, each
// XOR 0x5a. A record of length 0 does not open.
class XorLayer final : public SecurityLayer {
 public:
  static std::string SealOf(absl::string_view plain) {
    std::string wire;
    while (!plain.empty()) {
      const size_t n = std::min<size_t>(plain.size(), 255);
      wire.push_back(static_cast<char>(n));
      for (size_t i = 0; i < n; ++i) wire.push_back(static_cast<char>(plain[i] ^ 0x5a));
      plain.remove_prefix(n);
    }
    return wire;
  }
  absl::Status Seal(absl::string_view plain, std::string* wire) override {
    *wire += SealOf(plain);
    return absl::OkStatus();
  }
  absl::Status Open(absl::string_view wire, std::string* plain) override {
    for (char c : wire) {
      if (left_ == 0) {
        left_ = static_cast<uint8_t>(c);
        if (left_ == 0) return absl::DataLossError("an empty record");
        continue;
      }
      plain->push_back(static_cast<char>(c ^ 0x5a));
      --left_;
    }
    return absl::OkStatus();
  }

 private:
  size_t left_ = 0;  // of the record being read
};

// Once secured, what arrives is opened (the bytes after the frame that negotiated the
// layer too), and what goes out, frames and blocks, is sealed; a record that does not
// open ends the connection.
TEST_P(ConnectionCoreTest, ASecuredConnectionOpensAndSealsEveryByte) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/data";
  const std::string content(100000, 'q');
  {
    UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_EQ(::write(out.get(), content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
  }
  auto file = std::make_shared<DataFile>();
  file->path = "app/data";
  file->fd.Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  StreamBlock block;
  block.file = file;
  block.length = 70000;
  // The negotiating frame in clear, and in the same send a record with two frames.
  PeerSends(std::string("\x03"
                        "abc",
                        4) +
            XorLayer::SealOf(std::string("\x02"
                                         "de"
                                         "\x01"
                                         "f",
                                         5)));
  std::vector<std::string> frames;
  std::string got;
  std::thread read([&] {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(peer_.get(), buf, sizeof(buf), 0);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
  });
  WithCore([&](ConnectionCore& core) {
    const ConnectionCore::Framing framing{1, 256, OneByteLength};
    absl::string_view frame;
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    frames.emplace_back(frame);
    ASSERT_TRUE(core.SendBytes("ok"));  // the answer that agreed to the layer, in clear
    ASSERT_TRUE(core.Secure(std::make_unique<XorLayer>()));
    while (frames.size() < 3 && core.NextFrame(framing, &frame)) frames.emplace_back(frame);
    ASSERT_TRUE(core.SendBytes("sealed"));
    bool in_frame = false;
    ASSERT_TRUE(core.SendBlock(
                        "HEAD", block, 0, [] { return std::string("b"); }, &in_frame)
                    .ok());
    // A record cut in two sends opens whole; then one that does not open at all.
    const std::string record =
        XorLayer::SealOf(std::string("\x02"
                                     "gh",
                                     3));
    PeerSends(record.substr(0, 2));
    PeerSends(record.substr(2));
    ASSERT_TRUE(core.NextFrame(framing, &frame));
    frames.emplace_back(frame);
    PeerSends(std::string(1, '\0'));
    EXPECT_FALSE(core.NextFrame(framing, &frame));
    ::shutdown(peer_.get(), SHUT_RDWR);
  });
  read.join();
  EXPECT_EQ(frames, (std::vector<std::string>{"\x03"
                                              "abc",
                                              "\x02"
                                              "de",
                                              "\x01"
                                              "f",
                                              "\x02"
                                              "gh"}));
  ASSERT_GE(got.size(), 2u);
  EXPECT_EQ(got.substr(0, 2), "ok");
  XorLayer peer;
  std::string plain;
  ASSERT_TRUE(peer.Open(absl::string_view(got).substr(2), &plain).ok());
  EXPECT_TRUE(plain ==
              "sealed"
              "HEAD" +
                  content.substr(0, 70000));
  EXPECT_EQ(got.find("qqqqqqqq"), std::string::npos);  // no block byte in clear
}

INSTANTIATE_TEST_SUITE_P(Engines, ConnectionCoreTest,
                         ::testing::Values(IoEngine::kInline, IoEngine::kUring),
                         [](const ::testing::TestParamInfo<IoEngine>& param) {
                           return param.param == IoEngine::kInline ? "inline" : "uring";
                         });

}  // namespace
}  // namespace ferry
