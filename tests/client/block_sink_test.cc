// The sinks with several blocks arriving at once, as they do from several servers: each
// connection's fiber parks mid-block while the others receive, so no block may share a
// buffer or a pipe with another. Real sockets; the sender interleaves the blocks' bytes
// so that every receive is parked while the others take bytes.
#include "client/block_sink.h"

#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/io/scheduler.h"
#include "common/io/sync.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "proto/ferry.pb.h"
#include "tests/testing/run_fiber.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::RunInFiber;
using ::ferry::testing::TempDir;

constexpr int kBlocks = 3;
constexpr size_t kBlockBytes = 3 << 20;
constexpr size_t kPiece = 64 << 10;

std::string BlockBytes(int block) {
  std::string bytes(kBlockBytes, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 31 + block * 7) >> 3);
  return bytes;
}

// Receives kBlocks blocks into `sink` at once, one connection each, and returns what
// each Receive said.
std::vector<absl::Status> ReceiveAtOnce(BlockSink& sink) {
  std::vector<UniqueFd> ours, theirs;
  for (int b = 0; b < kBlocks; ++b) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    ours.emplace_back(fds[0]);
    theirs.emplace_back(fds[1]);
  }
  // Round robin, a piece at a time: blocking writes, so each block's reader must have
  // drained its socket before the next piece goes to it.
  std::thread sender([&] {
    std::vector<std::string> blocks;
    for (int b = 0; b < kBlocks; ++b) blocks.push_back(BlockBytes(b));
    for (size_t at = 0; at < kBlockBytes; at += kPiece) {
      for (int b = 0; b < kBlocks; ++b) {
        size_t sent = 0;
        while (sent < kPiece) {
          const ssize_t n = ::write(theirs[b].get(), blocks[b].data() + at + sent, kPiece - sent);
          if (n < 0 && errno == EINTR) continue;
          ASSERT_GT(n, 0);
          sent += static_cast<size_t>(n);
        }
      }
    }
  });
  std::vector<absl::Status> results(kBlocks);
  const ferry::v1::BlockInfo info;  // no checksums
  const std::string name = "a block";
  RunInFiber([&] {
    WaitGroup done;
    done.Add(kBlocks);
    for (int b = 0; b < kBlocks; ++b) {
      ASSERT_TRUE(FiberScheduler::Current()
                      ->Spawn([&, b] {
                        BlockVerifier verifier(info, name);
                        results[b] = sink.Receive(BlockSource{ours[b].get()}, b, 0, kBlockBytes,
                                                  verifier, name, absl::Now() + absl::Seconds(30));
                        done.Done();
                      })
                      .ok());
    }
    done.Wait();
  });
  sender.join();
  return results;
}

TEST(BlockSinkTest, CallbackSinkGivesEachOfBlocksReceivedAtOnceItsOwnBytes) {
  std::vector<std::string> got(kBlocks);
  CallbackSink sink([&](size_t index, absl::string_view bytes) {
    got[index] = std::string(bytes);
    return absl::OkStatus();
  });
  for (const absl::Status& s : ReceiveAtOnce(sink)) EXPECT_TRUE(s.ok()) << s;
  for (int b = 0; b < kBlocks; ++b) EXPECT_TRUE(got[b] == BlockBytes(b)) << "block " << b;
}

TEST(BlockSinkTest, FilesSinkSplicesEachOfBlocksReceivedAtOnceThroughItsOwnPipe) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int b = 0; b < kBlocks; ++b) paths.push_back(dir.path() + "/block" + std::to_string(b));
  FilesSink sink(paths, 64 << 10);
  for (const absl::Status& s : ReceiveAtOnce(sink)) EXPECT_TRUE(s.ok()) << s;
  for (int b = 0; b < kBlocks; ++b) {
    std::ifstream in(paths[b], std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    EXPECT_TRUE(bytes.str() == BlockBytes(b)) << "block " << b;
  }
}

TEST(BlockSinkTest, DiscardSinkCountsBlocksReceivedAtOnce) {
  DiscardSink sink;
  for (const absl::Status& s : ReceiveAtOnce(sink)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(sink.bytes(), kBlocks * kBlockBytes);
}

// Sends `bytes` on a fresh connection and closes it; what one Receive of `length` bytes
// into `sink` (from `offset`) says.
absl::Status ReceiveOnce(BlockSink& sink, const std::string& bytes, uint64_t offset,
                         uint64_t length) {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  UniqueFd ours(fds[0]);
  std::thread sender([fd = fds[1], &bytes] {
    UniqueFd theirs(fd);
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::write(theirs.get(), bytes.data() + sent, bytes.size() - sent);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  });
  absl::Status result;
  const ferry::v1::BlockInfo info;
  const std::string name = "block 0";
  RunInFiber([&] {
    BlockVerifier verifier(info, name);
    result = sink.Receive(BlockSource{ours.get()}, 0, offset, length, verifier, name,
                          absl::Now() + absl::Seconds(30));
  });
  sender.join();
  return result;
}

// A block cut off mid-way (the connection closed after 1 MiB of 3), then its rest from
// that byte on another connection: the sink holds the whole block.
void ExpectContinued(BlockSink& sink, const std::function<std::string()>& contents) {
  const std::string block = BlockBytes(0);
  const uint64_t cut = 1 << 20;
  const absl::Status cut_off = ReceiveOnce(sink, block.substr(0, cut), 0, block.size());
  EXPECT_TRUE(absl::IsUnavailable(cut_off)) << cut_off;
  ASSERT_EQ(sink.Kept(0), cut);
  // Asked to continue past what it kept, it refuses.
  EXPECT_TRUE(absl::IsInvalidArgument(ReceiveOnce(sink, "", cut + 1, block.size() - cut - 1)));
  const absl::Status rest = ReceiveOnce(sink, block.substr(cut), cut, block.size() - cut);
  EXPECT_TRUE(rest.ok()) << rest;
  EXPECT_EQ(sink.Kept(0), 0u);
  EXPECT_TRUE(contents() == block);
}

TEST(BlockSinkTest, BuffersSinkContinuesACutOffBlockFromTheByteReached) {
  BuffersSink sink(1);
  ExpectContinued(sink, [&] { return sink.blocks()[0]; });
}

TEST(BlockSinkTest, FilesSinkContinuesACutOffBlockFromTheByteReached) {
  TempDir dir;
  const std::string path = dir.path() + "/block";
  FilesSink sink({path}, 64 << 10);
  ExpectContinued(sink, [&] {
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  });
}

TEST(BlockSinkTest, SinksThatKeepNothingRefuseToContinueABlock) {
  CallbackSink callback([](size_t, absl::string_view) { return absl::OkStatus(); });
  DiscardSink discard;
  for (BlockSink* sink : std::vector<BlockSink*>{&callback, &discard}) {
    const std::string block = BlockBytes(0);
    EXPECT_TRUE(absl::IsUnavailable(ReceiveOnce(*sink, block.substr(0, 1000), 0, block.size())));
    EXPECT_EQ(sink->Kept(0), 0u);
    EXPECT_TRUE(absl::IsInvalidArgument(ReceiveOnce(*sink, "", 1000, block.size() - 1000)));
  }
}

}  // namespace
}  // namespace ferry
