// The fetch path end to end, in both data-plane modes: every byte the client receives
// is compared with what the writer put in the files.
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/frame_header.h"
#include "gtest/gtest.h"
#include "tests/e2e/corrupting_proxy.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/loopback.h"
#include "tests/testing/server_process.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-20261130_0001";

class FetchTest : public ::testing::TestWithParam<testing::ServerConfig> {
 protected:
  void StartServer() { server_ = testing::StartServer(dir_.path(), GetParam()); }
  std::string target() const { return server_->control_target(); }

  TempDir dir_;
  DataSet data_;
  std::unique_ptr<FerryServer> server_;
  ShuffleClient client_;
};

TEST_P(FetchTest, EveryPartitionMatchesTheFilesIncludingEmptyAndOneByte) {
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, {0, 1, 1000, 0, 65536, 1});
  data_.AddMapOutput(dir_.path(), kApp, 0, 1, {3, 0, 0, 77777, 2, 0});
  data_.AddMapOutput(dir_.path(), kApp, 2, 5, {1, 1, 1, 1});
  StartServer();
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  auto fetched = client_.FetchToBuffers(kApp, blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_EQ(fetched->size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockId& b = blocks[i].block;
    EXPECT_EQ((*fetched)[i],
              data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id))
        << "block " << i;
  }
}

TEST_P(FetchTest, ContiguousReduceRangeIsOneVerifiedSegment) {
  data_.AddMapOutput(dir_.path(), kApp, 1, 3, {10, 0, 300000, 5, 0, 7});
  StartServer();
  std::vector<BlockLocation> blocks = {{target(), {1, 3, 0, 6}}, {target(), {1, 3, 2, 4}}};
  auto fetched = client_.FetchToBuffers(kApp, blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[0], data_.Expected(1, 3, 0, 6));
  EXPECT_EQ((*fetched)[1], data_.Expected(1, 3, 2, 4));
}

TEST_P(FetchTest, ServerThatPollsBeforeItSleepsServesEveryByte) {
  // --idle-poll: small blocks one per round trip (the case polling is for), then a
  // 16 MiB block whose sends wait on a full socket between polls.
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, std::vector<size_t>(200, 1024));
  data_.AddMapOutput(dir_.path(), kApp, 0, 1, {size_t{16} << 20});
  FerryServerOptions options = testing::TestServerOptions(dir_.path(), GetParam());
  options.data.idle_poll = absl::Microseconds(200);
  server_ = testing::StartServer(options);
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  FetchOptions one_at_a_time;
  one_at_a_time.max_bytes_in_flight = 1;
  auto fetched = client_.FetchToBuffers(kApp, blocks, one_at_a_time);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_EQ(fetched->size(), 201u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockId& b = blocks[i].block;
    ASSERT_EQ((*fetched)[i],
              data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id))
        << "block " << i;
  }
}

TEST_P(FetchTest, BothPlanesServeOverIpv6) {
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, {1000, 0, size_t{3} << 20});
  FerryServerOptions options = testing::TestServerOptions(dir_.path(), GetParam());
  options.control_address = "[::1]:0";
  options.data_address = "[::1]:0";
  server_ = testing::StartServer(options);
  EXPECT_EQ(target().rfind("[::1]:", 0), 0u) << target();
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  auto fetched = client_.FetchToBuffers(kApp, blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  ASSERT_EQ(fetched->size(), 3u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockId& b = blocks[i].block;
    EXPECT_TRUE((*fetched)[i] ==
                data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id))
        << "block " << i;
  }
}

TEST_P(FetchTest, BlocksLargerThanThePipe) {
  // 16 MiB and 100 MiB, against a 1 MiB pipe and a 256 KiB copy buffer.
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, {size_t{16} << 20, 5, size_t{100} << 20});
  StartServer();
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  int checked = 0;
  CallbackSink sink([&](size_t index, absl::string_view bytes) {
    const BlockId& b = blocks[index].block;
    EXPECT_TRUE(bytes == data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id))
        << "block " << index;
    ++checked;
    return absl::OkStatus();
  });
  auto stats = client_.Fetch(kApp, blocks, sink);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(checked, 3);
  EXPECT_EQ(stats->bytes, (uint64_t{116} << 20) + 5);
}

TEST_P(FetchTest, ThousandsOfSmallBlocks) {
  std::vector<size_t> sizes(4000);
  for (size_t r = 0; r < sizes.size(); ++r) sizes[r] = (r * 37) % 200;
  data_.AddMapOutput(dir_.path(), kApp, 4, 9, sizes);
  StartServer();
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  FetchOptions options;
  options.max_bytes_in_flight = 16 << 10;  // many request frames, pipelined
  auto fetched = client_.FetchToBuffers(kApp, blocks, options);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ((*fetched)[i],
              data_.Expected(4, 9, static_cast<int32_t>(i), static_cast<int32_t>(i) + 1));
  }
}

TEST_P(FetchTest, SeveralConcurrentClients) {
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, {100000, 200000, 300000, 0, 1});
  data_.AddMapOutput(dir_.path(), kApp, 0, 1, {400000, 1, 2, 3});
  StartServer();
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(6);
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      ShuffleClient client;
      for (int round = 0; round < 3 && results[t].ok(); ++round) {
        auto fetched = client.FetchToBuffers(kApp, blocks);
        if (!fetched.ok()) {
          results[t] = fetched.status();
          break;
        }
        for (size_t i = 0; i < blocks.size(); ++i) {
          const BlockId& b = blocks[i].block;
          if ((*fetched)[i] !=
              data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id)) {
            results[t] = absl::DataLossError(absl::StrCat("client ", t, " block ", i));
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST_P(FetchTest, FilesSinkWritesEachBlockToItsFile) {
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, {5 << 20, 0, 12345});
  StartServer();
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  TempDir out;
  std::vector<std::string> paths;
  for (size_t i = 0; i < blocks.size(); ++i) paths.push_back(absl::StrCat(out.path(), "/b", i));
  FilesSink sink(paths);
  auto stats = client_.Fetch(kApp, blocks, sink);
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::ifstream in(paths[i], std::ios::binary);
    std::stringstream contents;
    contents << in.rdbuf();
    const BlockId& b = blocks[i].block;
    EXPECT_TRUE(contents.str() ==
                data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id))
        << paths[i];
  }
}

TEST_P(FetchTest, FetchesFromTwoServersAtOnce) {
  TempDir second_dir;
  DataSet second;
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, {1 << 20, 2 << 20});
  second.AddMapOutput(second_dir.path(), kApp, 0, 1, {3 << 20, 1});
  StartServer();
  auto other = testing::StartServer(second_dir.path(), GetParam());
  std::vector<BlockLocation> blocks = data_.AllPartitions(target());
  for (const BlockLocation& b : second.AllPartitions(other->control_target())) blocks.push_back(b);
  auto fetched = client_.FetchToBuffers(kApp, blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[0], data_.Expected(0, 0, 0, 1));
  EXPECT_EQ((*fetched)[1], data_.Expected(0, 0, 1, 2));
  EXPECT_EQ((*fetched)[2], second.Expected(0, 1, 0, 1));
  EXPECT_EQ((*fetched)[3], second.Expected(0, 1, 1, 2));
}

TEST_P(FetchTest, BytesChangedOnDiskAreReportedAsCorruptionNamingTheBlock) {
  data_.AddMapOutput(dir_.path(), kApp, 3, 8, {1000, 2000});
  StartServer();
  // Flip one byte of partition 1 behind the server's back.
  const std::string path = absl::StrCat(dir_.path(), "/", kApp, "/shuffle_3_8_0.data");
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, 1500), 1);
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, 1500), 1);
  ::close(fd);
  auto fetched = client_.FetchToBuffers(kApp, data_.AllPartitions(target()));
  ASSERT_EQ(fetched.status().code(), absl::StatusCode::kDataLoss) << fetched.status();
  EXPECT_NE(fetched.status().message().find("shuffle 3 map 8 reduce 1"), std::string::npos)
      << fetched.status();
  EXPECT_NE(fetched.status().message().find(target()), std::string::npos);
  // The server rereads the partition: the disk no longer matches what was stored.
  EXPECT_NE(fetched.status().message().find("the disk is to blame"), std::string::npos)
      << fetched.status();

  FetchOptions unverified;
  unverified.verify_checksums = false;
  EXPECT_TRUE(client_.FetchToBuffers(kApp, data_.AllPartitions(target()), unverified).ok());
}

TEST_P(FetchTest, BytesDamagedInTransferAreDiagnosedAsSuchAndRefetched) {
  data_.AddMapOutput(dir_.path(), kApp, 3, 8, {1000, 200000});
  // The data plane is reached through a relay that flips a bit 5,000 bytes into
  // partition 1's payload, on its first two connections.
  testing::CorruptingProxy proxy(2 * kResponseHeaderBytes + 1000 + 5000, 2);
  FerryServerOptions options = testing::TestServerOptions(dir_.path(), GetParam());
  options.advertise_data_address = absl::StrCat("127.0.0.1:", proxy.port());
  server_ = testing::StartServer(options);
  proxy.SetUpstream(server_->data_port());
  const std::vector<BlockLocation> blocks = data_.AllPartitions(target());

  FetchOptions once;
  once.max_attempts = 1;
  auto failed = client_.FetchToBuffers(kApp, blocks, once);
  ASSERT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
  EXPECT_NE(failed.status().message().find("shuffle 3 map 8 reduce 1"), std::string::npos)
      << failed.status();
  EXPECT_NE(failed.status().message().find("the transfer is to blame"), std::string::npos)
      << failed.status();

  // Damage in transfer is worth a refetch: the second connection is damaged too, the
  // third is clean, and every byte arrives as written.
  auto fetched = client_.FetchToBuffers(kApp, blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[0], data_.Expected(3, 8, 0, 1));
  EXPECT_EQ((*fetched)[1], data_.Expected(3, 8, 1, 2));
  EXPECT_EQ(proxy.connections(), 3);
}

TEST_P(FetchTest, DataFileTruncatedAfterOpenStreamGivesAnErrorNamingTheBlock) {
  data_.AddMapOutput(dir_.path(), kApp, 0, 0, {4096, 4096});
  StartServer();
  const std::string path = absl::StrCat(dir_.path(), "/", kApp, "/shuffle_0_0_0.data");
  int fetched_blocks = 0;
  CallbackSink sink([&](size_t, absl::string_view) {
    // The first block arrived; now the file shrinks under the open stream.
    if (++fetched_blocks == 1) {
      EXPECT_EQ(::truncate(path.c_str(), 5000), 0);
    }
    return absl::OkStatus();
  });
  FetchOptions one_at_a_time;
  one_at_a_time.max_bytes_in_flight = 1;  // block 1 is requested after block 0 arrives
  auto stats = client_.Fetch(kApp, data_.AllPartitions(target()), sink, one_at_a_time);
  ASSERT_EQ(stats.status().code(), absl::StatusCode::kDataLoss) << stats.status();
  EXPECT_NE(stats.status().message().find("shuffle 0 map 0 reduce 1"), std::string::npos)
      << stats.status();
  // The server is still serving.
  data_.AddMapOutput(dir_.path(), kApp, 1, 0, {10});
  EXPECT_TRUE(client_.FetchToBuffers(kApp, {{target(), {1, 0, 0, 1}}}).ok());
}

INSTANTIATE_TEST_SUITE_P(Configs, FetchTest, ::testing::ValuesIn(testing::AllServerConfigs()),
                         [](const ::testing::TestParamInfo<testing::ServerConfig>& config) {
                           return testing::ConfigName(config.param);
                         });

}  // namespace
}  // namespace ferry
