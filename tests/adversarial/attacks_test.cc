// Attacks on a running server (in-process: real gRPC, real sockets on 127.0.0.1, real
// files), each a defect found by attacking ferry_server and the limit that now stops it
// (docs/security.md). tests/adversarial/binary_test.cc has those that need the binary.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/control_client.h"
#include "client/shuffle_client.h"
#include "gtest/gtest.h"
#include "tests/e2e/raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using testing::DataSet;
using testing::TempDir;
using testing::WaitFor;

constexpr char kApp[] = "app-0";

std::vector<BlockId> OneBlock(int64_t map = 0) { return {{0, map, 0, 1}}; }

class AttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = dir_.path() + "/data";
    ASSERT_EQ(::mkdir(data_dir_.c_str(), 0755), 0);
    data_.AddMapOutput(data_dir_, kApp, 0, 0, {100, 200, 300});
    data_.AddMapOutput(data_dir_, kApp, 0, 1, {400, 500, 600});
    options_ = testing::TestServerOptions(data_dir_, {});
  }

  void Start() {
    server_ = testing::StartServer(options_);
    target_ = server_->control_target();
  }

  TempDir dir_;
  std::string data_dir_;
  DataSet data_;
  FerryServerOptions options_;
  std::unique_ptr<FerryServer> server_;
  std::string target_;
  ControlClient control_;
};

// Expired streams were swept only inside Register(), which the full check
// stopped from running: once at the cap, the server refused every stream until restart.
TEST_F(AttackTest, StreamCapRecoversWhenStreamsExpire) {
  options_.tickets.max_streams = 3;
  options_.control.ticket_ttl = absl::Milliseconds(500);
  options_.sweep_interval = absl::Hours(1);  // only the registry's own sweep may help
  testing::FakeClock clock;
  options_.clock = &clock;
  Start();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(control_.OpenStream(target_, kApp, OneBlock()).ok());
  auto full = control_.OpenStream(target_, kApp, OneBlock());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  clock.Advance(absl::Milliseconds(600));
  EXPECT_EQ(server_->tickets().size(), 0u);
  auto after = control_.OpenStream(target_, kApp, OneBlock());
  EXPECT_TRUE(after.ok()) << after.status();
}

TEST_F(AttackTest, OneClientCannotTakeEveryStream) {
  options_.tickets.max_streams_per_client = 2;
  Start();
  auto first = control_.OpenStream(target_, kApp, OneBlock());
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(control_.OpenStream(target_, kApp, OneBlock()).ok());
  auto third = control_.OpenStream(target_, kApp, OneBlock());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("client ipv4:127.0.0.1 has 2 streams open"),
            std::string::npos)
      << third.status();
  ASSERT_TRUE(control_.CloseStream(target_, first->ticket()).ok());
  EXPECT_TRUE(control_.OpenStream(target_, kApp, OneBlock()).ok());
}

TEST_F(AttackTest, BlocksAcrossOpenStreamsAreBounded) {
  options_.tickets.max_blocks = 10;
  Start();
  const std::vector<BlockId> six(6, BlockId{0, 0, 0, 1});
  auto first = control_.OpenStream(target_, kApp, six);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = control_.OpenStream(target_, kApp, six);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_EQ(server_->tickets().blocks(), 6u);
}

// A request naming one 3-partition block 400,000 times asks for a handle of
// 1.2 million partition checksums; it is refused before anything is resolved.
TEST_F(AttackTest, OpenStreamCoveringTooManyPartitionsIsRefusedUpFront) {
  Start();
  const std::vector<BlockId> many(400000, BlockId{0, 0, 0, 3});
  auto handle = control_.OpenStream(target_, kApp, many);
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument) << handle.status();
  EXPECT_NE(handle.status().message().find("split the fetch"), std::string::npos);
  EXPECT_EQ(server_->tickets().size(), 0u);
  EXPECT_EQ(server_->store().cached_map_outputs(), 0u);  // nothing was even looked up
}

// Handles over gRPC's default 4 MiB were built, registered, then refused by
// the client, leaving streams no one could close. 16 map outputs x 40,000 partitions in
// 16 batch blocks make a 6.5 MB handle.
TEST_F(AttackTest, BatchFetchWithAHandleOverFourMiBWorksAndLeavesNoStream) {
  for (int64_t map = 0; map < 16; ++map) {
    data_.AddMapOutput(data_dir_, "wide", 0, map, std::vector<size_t>(40000, 1));
  }
  Start();
  std::vector<BlockLocation> blocks;
  for (int64_t map = 0; map < 16; ++map) blocks.push_back({target_, {0, map, 0, 40000}});
  ShuffleClient client;
  auto fetched = client.FetchToBuffers("wide", blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  for (int64_t map = 0; map < 16; ++map) {
    EXPECT_EQ((*fetched)[static_cast<size_t>(map)], data_.Expected(0, map, 0, 40000));
  }
  EXPECT_EQ(server_->tickets().size(), 0u);
}

// Deleting an app left its files open in the cache, and re-creating it
// served the deleted bytes as verified.
TEST_F(AttackTest, DeletedAppIsLetGoAndARecreatedOneServedFresh) {
  options_.sweep_interval = absl::Milliseconds(50);
  Start();
  ShuffleClient client;
  ASSERT_TRUE(client.FetchToBuffers(kApp, data_.AllPartitions(target_)).ok());
  EXPECT_EQ(server_->store().open_files(), 2u);
  ASSERT_EQ(std::system(absl::StrCat("rm -rf ", data_dir_, "/", kApp).c_str()), 0);
  EXPECT_TRUE(WaitFor([&] { return server_->store().open_files() == 0; }))
      << server_->store().open_files() << " data files still open";

  DataSet fresh;
  fresh.AddMapOutput(data_dir_, kApp, 0, 0, {7, 8, 9});
  fresh.AddMapOutput(data_dir_, kApp, 0, 1, {10, 11, 12});
  auto list = control_.ListShuffles(target_, kApp);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->shuffles(0).map_outputs(0).data_bytes(), 24u);
  auto fetched = client.FetchToBuffers(kApp, fresh.AllPartitions(target_));
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[0], fresh.Expected(0, 0, 0, 1));
}

// With one file cached, a map output rewritten in place (a map task run
// again) paired the old cached index with the new data file.
TEST_F(AttackTest, MapOutputRewrittenInPlaceIsServedWhole) {
  options_.store.max_cached_map_outputs = 1;
  Start();
  ShuffleClient client;
  ASSERT_TRUE(client.FetchToBuffers(kApp, data_.AllPartitions(target_)).ok());
  DataSet again;
  again.AddMapOutput(data_dir_, kApp, 0, 0, {300, 1, 2000});
  const std::vector<BlockLocation> blocks = {{target_, {0, 0, 0, 1}}, {target_, {0, 0, 2, 3}}};
  auto fetched = client.FetchToBuffers(kApp, blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[0], again.Expected(0, 0, 0, 1));
  EXPECT_EQ((*fetched)[1], again.Expected(0, 0, 2, 3));
}

// The app directory was checked, then files opened by full path; swapping
// it for a symlink in between served files from outside the data dir.
TEST_F(AttackTest, SymlinkSwappedForTheAppDirNeverLeadsOutside) {
  const std::string outside = dir_.path() + "/outside";
  ASSERT_EQ(::mkdir(outside.c_str(), 0755), 0);
  // Map output 9's bytes under map output 0's names: what the data dir's app-x serves
  // for map 0 differs from what the outside one would.
  DataSet secret;
  secret.AddMapOutput(outside, "app-x", 0, 9, {64, 64, 64});
  for (const char* suffix : {".data", ".index", ".checksum.CRC32C"}) {
    const std::string from = absl::StrCat(outside, "/app-x/shuffle_0_9_0", suffix);
    const std::string to = absl::StrCat(outside, "/app-x/shuffle_0_0_0", suffix);
    ASSERT_EQ(::rename(from.c_str(), to.c_str()), 0) << from;
  }
  const std::string secret_bytes = secret.Expected(0, 9, 0, 1);
  DataSet mine;
  mine.AddMapOutput(data_dir_, "app-x", 0, 0, {64, 64, 64});
  const std::string link = data_dir_ + "/app-link";
  ASSERT_EQ(::symlink((outside + "/app-x").c_str(), link.c_str()), 0);
  Start();

  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const std::string app = data_dir_ + "/app-x";
    for (int i = 0; i < 1000000 && !stop.load(); ++i) {
      (void)::renameat2(AT_FDCWD, app.c_str(), AT_FDCWD, link.c_str(), RENAME_EXCHANGE);
    }
  });
  ShuffleClient client;
  FetchOptions once;
  once.max_attempts = 1;
  int served = 0;
  int escaped = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(4);
  for (int i = 0; i < 3000 && absl::Now() < deadline; ++i) {
    auto fetched = client.FetchToBuffers("app-x", {{target_, {0, 0, 0, 1}}}, once);
    if (!fetched.ok()) continue;  // NOT_FOUND while the link is in place
    ++served;
    if ((*fetched)[0] == secret_bytes) ++escaped;
    EXPECT_EQ((*fetched)[0], mine.Expected(0, 0, 0, 1));
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(escaped, 0) << "served a file from outside the data dir";
  EXPECT_GT(served, 0);
}

// A FIFO named as an index, checksum or data file hung a gRPC thread on
// open() forever.
TEST_F(AttackTest, FifoInPlaceOfAShuffleFileIsRefusedAtOnce) {
  Start();
  ControlClient quick(absl::Seconds(5));
  const std::vector<std::string> names = {"shuffle_0_5_0.index", "shuffle_0_6_0.data",
                                          "shuffle_0_7_0.checksum.CRC32C"};
  data_.AddMapOutput(data_dir_, kApp, 0, 6, {10});
  data_.AddMapOutput(data_dir_, kApp, 0, 7, {10});
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(data_dir_, "/", kApp, "/", name);
    ::unlink(path.c_str());
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << path;
  }
  for (int64_t map : {5, 6, 7}) {
    auto handle = quick.OpenStream(target_, kApp, OneBlock(map));
    EXPECT_EQ(handle.status().code(), absl::StatusCode::kDataLoss) << handle.status();
    EXPECT_NE(handle.status().message().find("is not a regular file"), std::string::npos)
        << handle.status();
    // Relative to the data dir: a peer never learns where that is.
    EXPECT_EQ(handle.status().message().find(data_dir_), std::string::npos) << handle.status();
  }
}

// Silent sockets kept their slots for the whole idle timeout, and the
// client gave up on "busy" after 0.7 s.
TEST_F(AttackTest, SilentPeersLoseTheirSlotsAndClientsWaitThemOut) {
  options_.data.max_connections = 20;
  options_.connection.first_request_timeout = absl::Seconds(1);
  Start();
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(testing::ConnectLoopback(server_->data_port()));
  ASSERT_TRUE(WaitFor([&] { return server_->data_server().connections_open() == 20; }));
  ShuffleClient client;
  auto fetched = client.FetchToBuffers(kApp, data_.AllPartitions(target_));
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_GT(server_->data_server().connections_refused(), 0u);
  EXPECT_EQ((*fetched)[4], data_.Expected(0, 1, 1, 2));
}

TEST_F(AttackTest, OneClientAddressCannotTakeEveryConnection) {
  options_.data.max_connections_per_client = 4;
  Start();
  std::vector<UniqueFd> mine;
  for (int i = 0; i < 4; ++i) mine.push_back(testing::ConnectLoopback(server_->data_port()));
  ASSERT_TRUE(WaitFor([&] { return server_->data_server().connections_open() == 4; }));
  UniqueFd fifth = testing::ConnectLoopback(server_->data_port());
  const std::string reply = testing::ReadUntilClose(fifth.get(), 4096);
  ASSERT_GE(reply.size(), kResponseHeaderBytes);
  const ResponseHeader header = testing::Header(reply);
  EXPECT_EQ(header.kind, FrameKind::kError);
  EXPECT_EQ(header.status, static_cast<uint16_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(reply.find("4 connections open from 127.0.0.1"), std::string::npos) << reply;
}

}  // namespace
}  // namespace ferry
