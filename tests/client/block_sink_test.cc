// The sinks with several blocks arriving at once, as they do from several servers: each
// connection's fiber parks mid-block while the others receive, so no block may share a
// buffer or a pipe with another. Real sockets; the sender interleaves the blocks' bytes
// so that every receive is parked while the others take bytes.
#include "client/block_sink.h"

#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
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
                        results[b] = sink.Receive(BlockSource{ours[b].get()}, b, kBlockBytes,
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

}  // namespace
}  // namespace ferry
