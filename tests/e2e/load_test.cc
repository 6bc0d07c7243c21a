// ferry_server (the real binary) under load: many idle connections beside full-speed
// fetchers, 10,000 streams, and a soak of mixed clients with random disconnects. Every
// byte fetched is verified; the server's descriptors come back to where they were and
// its memory stays bounded.
//
// The soak runs FERRY_SOAK_SECONDS (8 by default, so the suite stays quick):
//   bazel test //tests/e2e:load_test --test_env=FERRY_SOAK_SECONDS=180 --test_timeout=600
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/shuffle_client.h"
#include "gtest/gtest.h"
#include "tests/e2e/raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/loopback.h"
#include "tests/testing/server_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::ServerProcess;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-load";
constexpr char kServerBinary[] = "server/ferry_server";
constexpr size_t kBigBlock = size_t{16} << 20;
// The server's splice pipes in all (--max-pipes): they stay open in the threads' pools
// once made, and no more are ever made.
constexpr int kMaxPipes = 8;

// Waits (up to `timeout`) until the server's data-plane connections number `want`;
// returns the last count seen.
int WaitForDataConnections(const ServerProcess& server, int want, absl::Duration timeout) {
  int n = -1;
  testing::WaitFor([&] { return (n = server.DataConnections()) == want; }, timeout);
  return n;
}

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::RaiseFdLimit(8192);  // the server inherits it
    data_dir_ = dir_.path() + "/data";
    ASSERT_EQ(::mkdir(data_dir_.c_str(), 0755), 0);
    // Two map outputs of 8 partitions from 1 byte to 1.5 MiB, and one 16 MiB partition.
    for (int64_t map = 0; map < 2; ++map) {
      data_.AddMapOutput(data_dir_, kApp, 0, map,
                         {1, 1000, 65536, 300000, 1 << 20, 0, 1536 << 10, 7777});
    }
    data_.AddMapOutput(data_dir_, kApp, 1, 0, {kBigBlock});
  }

  void StartServer(std::vector<std::string> args) {
    args.push_back("--threads=2");
    args.push_back(absl::StrCat("--max-pipes=", kMaxPipes));
    auto started =
        ServerProcess::Start(kServerBinary, data_dir_, args, dir_.path() + "/server.log");
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    baseline_fds_ = server_->OpenFdCount();
    baseline_pipes_ = server_->PipeCount();
  }

  // Every data-plane connection is gone; the pipes are at most the pools' bound (two
  // descriptors each), and the descriptor total is back but for them, give or take the
  // control plane's few gRPC connections, which come and go.
  void ExpectNothingLeaked(absl::Duration timeout) {
    EXPECT_EQ(WaitForDataConnections(*server_, 0, timeout), 0);
    const int pipe_fds = server_->PipeCount() - baseline_pipes_;
    EXPECT_LE(pipe_fds, 2 * kMaxPipes);
    EXPECT_LE(server_->OpenFdCount(), baseline_fds_ + pipe_fds + 8)
        << "at start: " << baseline_fds_;
  }

  // Fetches every small partition through a ShuffleClient and compares every byte.
  absl::Status FetchAndVerify(ShuffleClient& client, uint64_t* bytes) {
    const std::vector<BlockLocation> blocks = data_.AllPartitions(server_->control_target());
    std::vector<BlockLocation> small;
    for (const BlockLocation& b : blocks) {
      if (b.block.shuffle_id == 0) small.push_back(b);
    }
    auto fetched = client.FetchToBuffers(kApp, small);
    if (!fetched.ok()) return fetched.status();
    for (size_t i = 0; i < small.size(); ++i) {
      const BlockId& b = small[i].block;
      if ((*fetched)[i] !=
          data_.Expected(b.shuffle_id, b.map_id, b.start_reduce_id, b.end_reduce_id)) {
        return absl::DataLossError(absl::StrCat("block ", i, " differs from the file"));
      }
      *bytes += (*fetched)[i].size();
    }
    return absl::OkStatus();
  }

  // Exits 0 on SIGTERM: the load left the server in a state it can stop from.
  void ExpectCleanExit() {
    absl::StatusOr<int> status = server_->SignalAndWait(SIGTERM, absl::Seconds(30));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  }

  TempDir dir_;
  std::string data_dir_;
  DataSet data_;
  std::unique_ptr<ServerProcess> server_;
  int baseline_fds_ = 0;
  int baseline_pipes_ = 0;
};

TEST_F(LoadTest, ThousandIdleConnectionsBesideSixteenFullSpeedFetchers) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--max-connections=2000", "--max-connections-per-client=2000",
                   "--first-request-timeout=120s"}));
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 1000; ++i) idle.push_back(testing::ConnectLoopback(server_->data_port()));
  // Accepted and parked: a socket each, and no pipe yet.
  EXPECT_EQ(WaitForDataConnections(*server_, 1000, absl::Seconds(10)), 1000);
  EXPECT_EQ(server_->PipeCount(), baseline_pipes_);
  const double rss_idle = server_->RssMiB();

  std::atomic<uint64_t> bytes{0};
  std::vector<absl::Status> results(16);
  const absl::Time start = absl::Now();
  std::vector<std::thread> fetchers;
  for (int t = 0; t < 16; ++t) {
    fetchers.emplace_back([&, t] {
      ShuffleClient client;
      uint64_t mine = 0;
      for (int round = 0; round < 4 && results[t].ok(); ++round) {
        results[t] = FetchAndVerify(client, &mine);
      }
      bytes += mine;
    });
  }
  for (std::thread& f : fetchers) f.join();
  const absl::Duration took = absl::Now() - start;
  for (int t = 0; t < 16; ++t)
    EXPECT_TRUE(results[t].ok()) << "fetcher " << t << ": " << results[t];
  EXPECT_EQ(bytes.load(),
            16u * 4u * 2u * (1 + 1000 + 65536 + 300000 + (1 << 20) + (1536 << 10) + 7777));
  std::printf(
      "16 fetchers beside 1,000 idle connections: %.1f MiB verified in %s (%.0f MiB/s); "
      "server RSS %.1f MiB idle, %.1f MiB after\n",
      static_cast<double>(bytes.load()) / (1 << 20), absl::FormatDuration(took).c_str(),
      static_cast<double>(bytes.load()) / (1 << 20) / absl::ToDoubleSeconds(took), rss_idle,
      server_->RssMiB());

  idle.clear();
  ExpectNothingLeaked(absl::Seconds(10));
  ExpectCleanExit();
}

// Under AddressSanitizer freed memory sits in a quarantine (256 MiB by default) before it
// can be reused, so a second round would grow the heap however well the server frees.
// The server started while this lives gets a quarantine far below the test's 16 MiB
// tolerance; the environment is as it was again afterwards.
class SmallQuarantineForChildren {
 public:
#if defined(__SANITIZE_ADDRESS__)
  SmallQuarantineForChildren() {
    const char* options = std::getenv("ASAN_OPTIONS");
    if (options != nullptr) saved_ = options;
    ::setenv("ASAN_OPTIONS",
             absl::StrCat(saved_, saved_.empty() ? "" : ":", "quarantine_size_mb=4").c_str(), 1);
  }
  ~SmallQuarantineForChildren() {
    if (saved_.empty()) {
      ::unsetenv("ASAN_OPTIONS");
    } else {
      ::setenv("ASAN_OPTIONS", saved_.c_str(), 1);
    }
  }

 private:
  std::string saved_;
#endif
};

TEST_F(LoadTest, TenThousandStreamsOpenedAndClosedLeaveNothingBehind) {
  {
    [[maybe_unused]] SmallQuarantineForChildren quarantine;
    ASSERT_NO_FATAL_FAILURE(StartServer({}));
  }
  ControlClient control;
  const std::string target = server_->control_target();
  const std::vector<BlockId> blocks = {{0, 0, 0, 8}, {0, 1, 2, 3}, {1, 0, 0, 1}};
  double rss_after_first = 0;
  for (int round = 0; round < 2; ++round) {
    // 10,000 streams open at once, from 4 threads, then all closed.
    std::vector<std::vector<std::string>> tickets(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 2500; ++i) {
          auto handle = control.OpenStream(target, kApp, blocks);
          if (!handle.ok()) {
            ADD_FAILURE() << handle.status();
            return;
          }
          tickets[t].push_back(handle->ticket());
        }
      });
    }
    for (std::thread& t : threads) t.join();
    threads.clear();
    // One of them still serves, byte for byte.
    ASSERT_FALSE(tickets[3].empty());
    UniqueFd fd = testing::Dial(server_->data_port());
    testing::SendRequest(fd.get(), testing::TicketOf(tickets[3].back()), 2, 1, kBigBlock - 100);
    const std::string got = testing::ReadBytes(fd.get(), kResponseHeaderBytes + 100);
    ASSERT_EQ(got.size(), kResponseHeaderBytes + 100);
    EXPECT_EQ(got.substr(kResponseHeaderBytes), data_.Expected(1, 0, 0, 1).substr(kBigBlock - 100));
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (const std::string& ticket : tickets[t]) {
          if (absl::Status s = control.CloseStream(target, ticket); !s.ok()) {
            ADD_FAILURE() << s;
            return;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    // A closed ticket is dead at once.
    testing::SendRequest(fd.get(), testing::TicketOf(tickets[3].back()), 2, 1, 0);
    EXPECT_EQ(testing::Header(testing::ReadUntilClose(fd.get())).kind, FrameKind::kError);
    if (round == 0) rss_after_first = server_->RssMiB();
    std::printf("round %d: 10,000 streams opened and closed; server RSS %.1f MiB\n", round,
                server_->RssMiB());
  }
  // The second 10,000 reuse what the first freed.
  EXPECT_LT(server_->RssMiB(), rss_after_first + 16) << "first round " << rss_after_first;
  ExpectNothingLeaked(absl::Seconds(10));
  ExpectCleanExit();
}

absl::Duration SoakDuration() {
  const char* env = std::getenv("FERRY_SOAK_SECONDS");
  const int seconds = env != nullptr ? std::atoi(env) : 8;
  return absl::Seconds(std::max(1, seconds));
}

TEST_F(LoadTest, SoakOfMixedClientsWithRandomDisconnects) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--idle-timeout=2s", "--io-timeout=5s", "--ticket-ttl=3s"}));
  const absl::Duration duration = SoakDuration();
  const absl::Time end = absl::Now() + duration;
  const std::string target = server_->control_target();
  std::atomic<uint64_t> verified{0};
  std::atomic<int> fetches{0};
  std::atomic<int> vanished{0};
  std::atomic<int> garbage{0};
  std::vector<std::thread> workers;
  double rss_warm = 0;

  // Verified fetchers: every byte compared with the files.
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      ShuffleClient client;
      for (int i = 0; i < 100000 && absl::Now() < end; ++i) {
        uint64_t bytes = 0;
        absl::Status s = FetchAndVerify(client, &bytes);
        if (!s.ok()) {
          ADD_FAILURE() << "fetcher " << t << " round " << i << ": " << s;
          return;
        }
        verified += bytes;
        ++fetches;
      }
    });
  }
  // Vanishing clients: ask for the 16 MiB block, read a random part of it, then close
  // (half of them with a reset); half never close their stream, which expires.
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      ControlClient control;
      for (int i = 0; i < 100000 && absl::Now() < end; ++i) {
        auto handle = control.OpenStream(target, kApp, {{1, 0, 0, 1}});
        if (!handle.ok()) {
          ADD_FAILURE() << handle.status();
          return;
        }
        UniqueFd fd = testing::Dial(server_->data_port());
        testing::SendRequest(fd.get(), testing::TicketOf(handle->ticket()), 0, 1, 0);
        const size_t want = std::uniform_int_distribution<size_t>(0, kBigBlock)(rng);
        const std::string got = testing::ReadBytes(fd.get(), want);
        if (got.size() != want) {
          ADD_FAILURE() << "vanisher " << t << " read " << got.size() << " of " << want;
          return;
        }
        if (rng() % 2 == 0) {
          linger reset{.l_onoff = 1, .l_linger = 0};
          ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        }
        fd = UniqueFd();
        if (rng() % 2 == 0) (void)control.CloseStream(target, handle->ticket());
        ++vanished;
      }
    });
  }
  // Garbage and stalls: random bytes where a request belongs get an ERROR frame or a
  // close; a client that sends half a request and waits is dropped at the idle timeout.
  workers.emplace_back([&] {
    std::mt19937_64 rng(7);
    std::vector<UniqueFd> stalled;
    for (int i = 0; i < 100000 && absl::Now() < end; ++i) {
      UniqueFd fd = testing::Dial(server_->data_port());
      std::string junk(kRequestBytes, '\0');
      for (char& c : junk) c = static_cast<char>(rng());
      const size_t len = i % 4 == 0 ? kRequestBytes / 2 : kRequestBytes;
      ASSERT_EQ(::send(fd.get(), junk.data(), len, MSG_NOSIGNAL), static_cast<ssize_t>(len));
      if (len < kRequestBytes) {
        if (stalled.size() < 50) stalled.push_back(std::move(fd));
      } else {
        const std::string answer = testing::ReadUntilClose(fd.get(), 8192);
        if (!answer.empty()) {
          EXPECT_EQ(testing::Header(answer).kind, FrameKind::kError);
        }
      }
      ++garbage;
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  absl::SleepFor(std::min(duration / 4, absl::Seconds(10)));
  rss_warm = server_->RssMiB();
  for (std::thread& w : workers) w.join();

  std::printf(
      "soak of %s: %d verified fetches (%.1f MiB), %d vanished clients, %d garbage "
      "or stalled connections; server RSS %.1f MiB warm, %.1f MiB at the end\n",
      absl::FormatDuration(duration).c_str(), fetches.load(),
      static_cast<double>(verified.load()) / (1 << 20), vanished.load(), garbage.load(), rss_warm,
      server_->RssMiB());
  EXPECT_GT(fetches.load(), 0);
  EXPECT_GT(vanished.load(), 0);
  EXPECT_LT(server_->RssMiB(), rss_warm + 64);
  // Every connection is gone once the stalled ones pass the idle timeout.
  ExpectNothingLeaked(absl::Seconds(15));
  // And the server still serves.
  ShuffleClient after;
  uint64_t bytes = 0;
  EXPECT_TRUE(FetchAndVerify(after, &bytes).ok());
  ExpectCleanExit();
}

}  // namespace
}  // namespace ferry
