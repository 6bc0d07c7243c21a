// Attacks on the Spark front door of a running server (in-process: real sockets on
// loopback, real files), each a defect found by attacking ferry_server with
// raw frames, scaled to run in seconds, and the bound that now stops it
// (docs/security.md).
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/control_client.h"
#include "common/shuffle_files.h"
#include "common/shuffle_writer.h"
#include "common/spark/layout.h"
#include "common/spark/wire.h"
#include "gtest/gtest.h"
#include "server/ferry_server.h"
#include "server/spark/apps/handed_off_apps.h"
#include "tests/e2e/spark_raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/small_tmpfs.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::Reply;
using ::ferry::testing::SparkClient;
using ::ferry::testing::StreamHandleOf;
namespace sw = ::ferry::spark;

constexpr char kApp[] = "victim";
constexpr char kExec[] = "1";
constexpr int kSubdirs = 8;
constexpr char kShuffleManager[] = "org.apache.spark.shuffle.sort.SortShuffleManager";

using ::ferry::testing::WaitFor;

class SparkAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* d : {"a", "b", "c"}) {
      dirs_.push_back(absl::StrCat(roots_.path(), "/", d));
      ASSERT_EQ(::mkdir(dirs_.back().c_str(), 0755), 0);
    }
    options_ = testing::TestServerOptions(data_dir_.path(), {});
    options_.spark.address = "127.0.0.1:0";
    options_.spark.executors.dir_roots = {roots_.path()};
    Write({dirs_[0], dirs_[1]}, 3, 1000, {10, 20, 30});
  }

  void Write(const std::vector<std::string>& dirs, int32_t shuffle, int64_t map,
             const std::vector<size_t>& sizes) {
    ASSERT_TRUE(testing::WriteSparkMapOutput(dirs, kSubdirs, shuffle, map, sizes).ok());
  }

  void Start() { server_ = testing::StartServer(options_); }
  // A YARN hand-off dir (--spark-yarn-dir) as Ferry's aux service lays it out, and an
  // application's service data handed over in it, written whole by rename.
  void MakeHandOffDir() {
    for (const char* sub : {"/apps", "/stopped"}) {
      ASSERT_EQ(::mkdir((handoff_.path() + sub).c_str(), 0750), 0);
    }
  }
  void HandOver(const std::string& app, const std::string& data) {
    const std::string path = handoff_.path() + "/apps/" + app;
    std::ofstream(path + ".tmp") << data;
    ASSERT_EQ(::chmod((path + ".tmp").c_str(), 0640), 0);
    ASSERT_EQ(::rename((path + ".tmp").c_str(), path.c_str()), 0);
  }
  uint16_t port() const { return server_->spark_port(); }

  static std::string Registration(const std::string& app, const std::string& exec,
                                  std::vector<std::string> dirs,
                                  std::string manager = kShuffleManager) {
    return sw::EncodeRegisterExecutor({app, exec, {std::move(dirs), kSubdirs, std::move(manager)}});
  }
  std::string VictimRegistration() const { return Registration(kApp, kExec, {dirs_[0], dirs_[1]}); }
  static std::string Fetch(const std::string& app, const std::string& exec,
                           std::vector<int64_t> maps, std::vector<int32_t> reduces) {
    std::vector<std::vector<int32_t>> per_map(maps.size(), reduces);
    return sw::EncodeFetchShuffleBlocks({app, exec, 3, std::move(maps), per_map, false});
  }
  // Fetches partition 1 of map 1000 as (app, exec) and returns its bytes, or the failure.
  std::string FetchOne(SparkClient& client, const std::string& app, const std::string& exec) {
    return testing::FetchFirstChunk(client, Fetch(app, exec, {1000}, {1}));
  }

  testing::TempDir roots_;
  testing::TempDir data_dir_;
  std::vector<std::string> dirs_;
  testing::TempDir state_;
  testing::TempDir handoff_;
  FerryServerOptions options_;
  testing::FakeClock clock_;  // the server's, where a case sets options_.clock
  std::unique_ptr<FerryServer> server_;
};

// GetLocalDirsForExecutors naming one executor a million times built a reply of
// a copy per name on the fiber thread (OOM-killed at 5 MB of request). Spark answers
// with a map of executors: each is named once, and a request may name at most
// spark::kMaxLocalDirsExecutors.
TEST_F(SparkAttackTest, ALocalDirsRequestNamesEachExecutorOnceAndIsBounded) {
  Start();
  SparkClient client(port());
  ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
  const std::vector<std::string> repeated(sw::kMaxLocalDirsExecutors, kExec);
  Reply dirs = client.Call(sw::EncodeGetLocalDirsForExecutors({kApp, repeated}));
  ASSERT_EQ(dirs.type, sw::MessageType::kRpcResponse) << dirs.text;
  EXPECT_EQ(dirs.body, sw::EncodeLocalDirsForExecutors({kExec}, {2}, {dirs_[0], dirs_[1]}));
  const std::vector<std::string> too_many(200000, kExec);
  Reply refused = client.Call(sw::EncodeGetLocalDirsForExecutors({kApp, too_many}));
  EXPECT_EQ(refused.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(refused.text.find("200000 strings, over the limit of 16384"), std::string::npos)
      << refused.text;
  EXPECT_EQ(FetchOne(client, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
}

// A registration whose local dir was deleted while the server was down (its app
// ended) made the server exit at start with DATA_LOSS, for every application.
TEST_F(SparkAttackTest, ARegistrationWhoseDirsWereDeletedDoesNotStopARestart) {
  options_.spark.executors.state_dir = state_.path();
  Start();
  {
    SparkClient client(port());
    ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
    ASSERT_EQ(client.Call(Registration("ended", "0", {dirs_[2]})).type,
              sw::MessageType::kRpcResponse);
  }
  server_.reset();
  ASSERT_EQ(::rmdir(dirs_[2].c_str()), 0);
  auto restarted = FerryServer::Start(options_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  server_ = *std::move(restarted);
  EXPECT_EQ(server_->spark_door()->executors()->size(), 1u);
  SparkClient client(port());
  EXPECT_EQ(FetchOne(client, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
}

// Registering `evil/1` with a running app's local dir and removing evil with
// --delete-local-dirs deleted the victim's files; re-registering the victim's executor
// onto another dir sent its reducers that dir's bytes. Through such a registration
// evil also read the victim's files. Another app's registration naming them is refused.
TEST_F(SparkAttackTest, AnotherAppCannotClaimDeleteOrRedirectAnExecutorsDirs) {
  Write({dirs_[2]}, 3, 1000, {99, 99, 99});  // other bytes under the same name
  Start();
  SparkClient client(port());
  ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
  const Reply claimed = client.Call(Registration("evil", "1", {dirs_[0], dirs_[1]}));
  EXPECT_EQ(claimed.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(claimed.text.find("another application"), std::string::npos) << claimed.text;
  EXPECT_NE(FetchOne(client, "evil", "1"), testing::PartitionBytes(3, 1000, 1, 20));
  ControlClient control;
  ferry::v1::RemoveSparkAppRequest remove;
  remove.set_app_id("evil");
  remove.set_delete_local_dirs(true);
  auto removed = control.RemoveSparkApp(server_->control_target(), remove);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->executors_removed(), 0u);
  EXPECT_EQ(removed->local_dirs_deleted(), 0u);
  EXPECT_EQ(FetchOne(client, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));

  Reply moved = client.Call(Registration(kApp, kExec, {dirs_[2]}));
  EXPECT_EQ(moved.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(moved.text.find("registered already, with other local dirs"), std::string::npos)
      << moved.text;
  EXPECT_EQ(FetchOne(client, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
}

// With the journal just under its compaction threshold, `ferry remove-app` of an
// app of 40 executors was acknowledged, and the compacted file still held them: after a
// restart the app was registered again. The compaction now follows the change.
TEST_F(SparkAttackTest, ARemovalThatCompactsTheJournalStaysRemovedAfterARestart) {
  options_.spark.executors.state_dir = state_.path();
  options_.spark.service.registrations.per_client = options_.spark.service.registrations.total;
  Start();
  SparkClient client(port());
  for (int i = 0; i < 80; ++i) {
    ASSERT_EQ(
        client.Call(Registration("appC", absl::StrCat(i, "-", std::string(120, 'c')), {dirs_[2]}))
            .type,
        sw::MessageType::kRpcResponse);
  }
  const std::string journal = state_.path() + "/spark-executors";
  const auto gap = [&] {
    struct stat st;
    if (::stat(journal.c_str(), &st) != 0) return int64_t{-1};
    return static_cast<int64_t>(2 * server_->spark_door()->executors()->bytes() + (1 << 20)) -
           static_cast<int64_t>(st.st_size);
  };
  // One executor re-registered with another shuffle manager until the journal is within
  // the removal's records (~12 KB) of the threshold.
  for (int i = 0; i < 1000 && gap() >= 9000; ++i) {
    const std::string manager = absl::StrCat(i % 10, std::string(4000, i % 2 ? 'a' : 'b'));
    ASSERT_EQ(client.Call(Registration(kApp, kExec, {dirs_[0], dirs_[1]}, manager)).type,
              sw::MessageType::kRpcResponse);
  }
  ASSERT_GT(gap(), 0);
  ControlClient control;
  ferry::v1::RemoveSparkAppRequest remove;
  remove.set_app_id("appC");
  auto removed = control.RemoveSparkApp(server_->control_target(), remove);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->executors_removed(), 80u);
  server_.reset();
  Start();
  EXPECT_EQ(server_->spark_door()->executors()->size(), 1u);
  SparkClient after(port());
  EXPECT_EQ(FetchOne(after, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
}

// With less free space than the journal's size (12 KiB free, 30 KiB journal) the
// server exited at start with RESOURCE_EXHAUSTED, because opening always rewrote the
// file. It starts and serves what it has; a change it cannot write is refused.
TEST_F(SparkAttackTest, AFullStateDiskDoesNotKeepTheServerFromStarting) {
  auto tmpfs = testing::SmallTmpfs::Mount(state_.path() + "/disk", 256 << 10);
  if (!tmpfs.ok()) GTEST_SKIP() << tmpfs.status();
  const std::string disk = (*tmpfs)->path();
  options_.spark.executors.state_dir = disk;
  Start();
  {
    SparkClient client(port());
    ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
    for (int i = 0; i < 60; ++i) {
      ASSERT_EQ(
          client.Call(Registration("other", absl::StrCat(i), {dirs_[2]}, std::string(400, 'm')))
              .type,
          sw::MessageType::kRpcResponse);
    }
  }
  ControlClient control;
  ferry::v1::RemoveSparkAppRequest remove;
  remove.set_app_id("other");
  remove.set_exec_id("0");  // a forget record: a compaction at start would be worth it
  ASSERT_TRUE(control.RemoveSparkApp(server_->control_target(), remove).ok());
  server_.reset();
  ASSERT_TRUE((*tmpfs)->Fill().ok());
  Start();
  ASSERT_NE(server_, nullptr);
  EXPECT_EQ(server_->spark_door()->executors()->size(), 60u);
  SparkClient client(port());
  EXPECT_EQ(FetchOne(client, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
  const Reply refused =
      client.Call(Registration("other", "new", {dirs_[2]}, std::string(4096, 'n')));
  EXPECT_EQ(refused.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(refused.text.find("No space left on device"), std::string::npos) << refused.text;
  server_.reset();
  ASSERT_TRUE((*tmpfs)->Unfill().ok());
  Start();
  EXPECT_EQ(server_->spark_door()->executors()->size(), 60u);
  SparkClient after(port());
  EXPECT_EQ(FetchOne(after, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
}

// A task made a 1,501-deep chain of dirs in its own local dir, and registrations
// naming it 64 times took 5.3 s of server CPU each (an lstat of every prefix of every
// dir), on the pool that opens streams. A dir is one openat2, at most 16 levels deep.
TEST_F(SparkAttackTest, DeepDirChainsCostARegistrationNothing) {
  options_.spark.executors.state_dir = state_.path();
  Start();
  std::string chain = dirs_[2];
  std::string at_limit;
  for (int depth = 2; depth <= 1501; ++depth) {
    chain += "/d";
    ASSERT_EQ(::mkdir(chain.c_str(), 0755), 0);
    if (depth == ExecutorRegistry::kMaxDirDepth) at_limit = chain;
  }
  SparkClient client(port());
  const absl::Time start = absl::Now();
  for (int i = 0; i < 4; ++i) {
    const Reply deep =
        client.Call(Registration("evil", absl::StrCat(i), std::vector<std::string>(64, chain)));
    EXPECT_EQ(deep.type, sw::MessageType::kRpcFailure);
    EXPECT_NE(deep.text.find("more than 16 levels below its root"), std::string::npos) << deep.text;
  }
  ASSERT_EQ(client.Call(Registration("evil", "ok", std::vector<std::string>(64, at_limit))).type,
            sw::MessageType::kRpcResponse);
  std::printf("4 registrations of a 1,501-deep dir and one of 64 16-deep ones: %s\n",
              absl::FormatDuration(absl::Now() - start).c_str());
  EXPECT_EQ(FetchOne(client, kApp, kExec), FetchOne(client, kApp, kExec));
  server_.reset();
  Start();
  EXPECT_TRUE(server_->spark_door()->executors()->Find("evil", "ok").ok());
}

// 64 connections re-registering in a loop with an alternating shuffle manager made
// 3,500-5,000 fdatasynced appends a second, and another client's stream opens waited
// behind them. Registrations that write are bounded per client and in all, and run on a
// thread of their own.
TEST_F(SparkAttackTest, ReRegistrationFloodsAreBoundedAndOthersFetchMeanwhile) {
  options_.spark.executors.state_dir = state_.path();
  options_.spark.service.registrations.per_client = {.per_second = 20, .burst = 20};
  options_.spark.service.registrations.max_wait = absl::Milliseconds(200);
  Start();
  const std::string journal = state_.path() + "/spark-executors";
  const auto journal_bytes = [&] {
    struct stat st;
    return ::stat(journal.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  };
  int64_t record = 0;  // each flooder's registration's record
  {
    // From another address: the flooders' bucket starts full.
    SparkClient client(port(), "127.0.0.3");
    ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
    const int64_t before = journal_bytes();
    for (int t = 0; t < 8; ++t) {
      ASSERT_EQ(client.Call(Registration("flood", absl::StrCat(t), {dirs_[2]}, "manager-b")).type,
                sw::MessageType::kRpcResponse);
    }
    record = (journal_bytes() - before) / 8;
  }
  const int64_t before = journal_bytes();
  std::atomic<int> refused{0};
  std::vector<std::thread> flooders;
  const absl::Time start = absl::Now();
  for (int t = 0; t < 8; ++t) {
    flooders.emplace_back([&, t] {
      SparkClient client(port());
      for (int i = 0; i < 12; ++i) {
        const Reply reply = client.Call(
            Registration("flood", absl::StrCat(t), {dirs_[2]}, i % 2 ? "manager-a" : "manager-b"));
        if (reply.type != sw::MessageType::kRpcResponse) refused++;
      }
    });
  }
  // Another client address meanwhile: every fetch is served.
  SparkClient victim(port(), "127.0.0.2");
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(FetchOne(victim, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
  }
  for (std::thread& flooder : flooders) flooder.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const int64_t writes = (journal_bytes() - before) / record;
  std::printf("in %.2f s: %ld re-registrations written, %d refused as busy\n", seconds,
              static_cast<long>(writes), refused.load());
  // At most the burst and 20 a second, admitted up to max_wait ahead of their turn.
  EXPECT_LE(writes, 20 + 20 * (seconds + 0.2) + 1);
  EXPECT_GE(writes, 20);
  EXPECT_GT(refused, 0);
}

// Bytes this process has written with write(2) and friends, files and sockets alike.
uint64_t BytesWritten() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

// Each registration rewrote and fsynced the whole state file under the lock that
// lookups on the fiber threads take: 300 registrations of 64 KiB made every request of
// both front doors wait 200 ms. Registrations append their record; lookups never wait
// on the file.
TEST_F(SparkAttackTest, ARegistrationWritesItsRecordNotTheWholeStateFile) {
  options_.spark.executors.state_dir = state_.path();
  options_.spark.service.registrations.per_client = options_.spark.service.registrations.total;
  Start();
  SparkClient client(port());
  const std::string manager(sw::kMaxShuffleManagerBytes - 100, 'm');
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(client.Call(Registration(kApp, absl::StrCat(i), {dirs_[0]}, manager)).type,
              sw::MessageType::kRpcResponse);
  }
  const uint64_t before = BytesWritten();
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(client.Call(Registration(kApp, "7", {dirs_[0]}, absl::StrCat(manager, i))).type,
              sw::MessageType::kRpcResponse);
  }
  // About 8 KiB each (the request sent, the record appended); rewriting the 1.2 MB file
  // each time would be 120 MB.
  EXPECT_LT(BytesWritten() - before, uint64_t{4} << 20);
}

// 1,000 connections each sending one DiagnoseCorruption of a 512 MiB partition and
// closing queued 988 jobs that all ran, and a victim's FetchShuffleBlocks waited 30 s. At
// most max_diagnoses run at once; the rest are refused as busy at once.
TEST_F(SparkAttackTest, DiagnosesAreBoundedAndOthersFetchMeanwhile) {
  // A sparse 512 MiB partition with an ADLER32 checksum on record.
  Write({dirs_[0], dirs_[1]}, 5, 1, {1});
  const uint64_t big = uint64_t{512} << 20;
  auto path = [&](const std::string& name) {
    return *sw::ExecutorFilePath({dirs_[0], dirs_[1]}, kSubdirs, name);
  };
  ASSERT_EQ(::truncate(path(DataFileName(5, 1)).c_str(), static_cast<off_t>(big)), 0);
  std::string index(16, '\0');
  for (int i = 0; i < 8; ++i) index[8 + i] = static_cast<char>(big >> (56 - 8 * i));
  std::ofstream(path(IndexFileName(5, 1)), std::ios::binary | std::ios::trunc) << index;
  Start();
  SparkClient registrar(port());
  ASSERT_EQ(registrar.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
  std::vector<std::unique_ptr<SparkClient>> diagnosers;
  for (int i = 0; i < 8; ++i) {
    diagnosers.push_back(std::make_unique<SparkClient>(port()));
    diagnosers.back()->Send(sw::EncodeRpcRequest(
        i, sw::EncodeDiagnoseCorruption({kApp, kExec, 5, 1, 0, 12345, "ADLER32"})));
  }
  SparkClient victim(port());
  EXPECT_EQ(FetchOne(victim, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
  int busy = 0;
  for (auto& d : diagnosers) {
    std::optional<Reply> reply = d->Read();
    ASSERT_TRUE(reply.has_value());
    if (reply->type == sw::MessageType::kRpcFailure &&
        reply->text.find("server busy") != std::string::npos) {
      ++busy;
    }
  }
  EXPECT_GE(busy, 8 - static_cast<int>(options_.spark.service.max_diagnoses));
}

// Four connections each holding a stream of 2^20 chunks held every open chunk of
// the server, so that everyone else's fetches were refused. Each client address has a
// share, and a stream's chunks are let go of when its lifetime ends.
TEST_F(SparkAttackTest, OneClientCannotHoldEveryOpenChunkNorHoldThemForever) {
  options_.spark.service.max_open_chunks = 1000;
  options_.spark.service.max_open_chunks_per_client = 400;
  options_.spark.service.stream_lifetime = absl::Hours(1);
  options_.clock = &clock_;
  Start();
  SparkClient attacker(port());
  ASSERT_EQ(attacker.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
  StreamHandleOf(attacker.Call(Fetch(kApp, kExec, {1000}, std::vector<int32_t>(400, 0))));
  SparkClient again(port());
  again.Send(sw::EncodeRpcRequest(1, Fetch(kApp, kExec, {1000}, {0})));
  EXPECT_TRUE(again.Closed());  // busy: Spark's client retries a closed connection
  SparkClient other(port(), "127.0.0.2");
  EXPECT_EQ(FetchOne(other, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
  // Within its lifetime the stream holds its share; past it (on the server's clock) the
  // stream is closed at its next frame, and its share is free again.
  attacker.Send(sw::EncodeChunkFetchRequest({0, 0}));
  ASSERT_TRUE(attacker.Read().has_value());
  EXPECT_EQ(server_->spark_door()->service()->open_chunks(), 400u);
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  EXPECT_TRUE(WaitFor([&] {
    attacker.Send(sw::EncodeChunkFetchRequest({0, 0}));
    return attacker.Read().has_value() && server_->spark_door()->service()->open_chunks() == 0;
  }));
  EXPECT_EQ(FetchOne(attacker, kApp, kExec), testing::PartitionBytes(3, 1000, 1, 20));
}

// Failed chunks cost 586 bytes each, each with a message of its own. A stream
// keeps a cause's message once.
TEST_F(SparkAttackTest, FailedChunksShareTheirMessages) {
  Start();
  SparkClient client(port());
  ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
  constexpr int kChunks = 200000;
  std::vector<int64_t> maps(kChunks);
  for (int i = 0; i < kChunks; ++i) maps[i] = 5000000 + i;  // none of them exists
  const std::string request = Fetch(kApp, kExec, maps, {0});
  const size_t before = ::mallinfo2().uordblks;
  auto [stream, chunks] = StreamHandleOf(client.Call(request));
  const size_t held = ::mallinfo2().uordblks - before;
  ASSERT_EQ(chunks, kChunks);
  EXPECT_LT(held / kChunks, 160u) << held << " bytes for " << kChunks << " failed chunks";
  client.Send(sw::EncodeChunkFetchRequest({stream, 7}));
  client.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  client.Read();
  std::optional<Reply> failed = client.Read();
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->type, sw::MessageType::kChunkFetchFailure);
  EXPECT_NE(failed->text.find("shuffle_3_5000000_0"), std::string::npos) << failed->text;
}

// Sixteen connections each announcing a 16 MiB frame and sending nothing more
// were given 16 MiB buffers at once, spending the shared 256 MiB budget, so that every
// other client's request over 4 KiB was reset. Buffers grow with the bytes that arrive.
TEST_F(SparkAttackTest, AnAnnouncedFrameHoldsNoMemoryUntilItsBytesArrive) {
  Start();
  std::vector<std::unique_ptr<SparkClient>> announcers;
  const std::string header = std::string("\x00\x00\x00\x00\x01\x00\x00\x00\x03", 9);
  for (int i = 0; i < 20; ++i) {
    announcers.push_back(std::make_unique<SparkClient>(port()));
    announcers.back()->Send(header);
  }
  SparkClient client(port());
  ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
  std::vector<int64_t> maps(1000, 1000);
  const std::string request = Fetch(kApp, kExec, maps, {1});
  ASSERT_GT(request.size(), 16000u);
  const auto [stream, chunks] = StreamHandleOf(client.Call(request));
  EXPECT_EQ(chunks, 1000);
}

// Registrations carried 64 KiB shuffle managers and millions of empty
// local dirs, decoded before any check (6.7 GB from 256 MiB of requests), and were never
// forgotten. Fields are bounded as they are decoded, and a registration whose dirs are
// gone is forgotten by the sweep.
TEST_F(SparkAttackTest, RegistrationsAreBoundedAsDecodedAndForgottenWhenTheirDirsGo) {
  options_.sweep_interval = absl::Milliseconds(50);
  Start();
  SparkClient client(port());
  Reply big_manager = client.Call(Registration(kApp, "9", {dirs_[0]}, std::string(65536, 'x')));
  EXPECT_EQ(big_manager.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(big_manager.text.find("shuffleManager: 65536 bytes, over the limit of 4096"),
            std::string::npos)
      << big_manager.text;
  Reply many_dirs = client.Call(Registration(kApp, "9", std::vector<std::string>(1 << 20)));
  EXPECT_EQ(many_dirs.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(many_dirs.text.find("localDirs: 1048576 strings, over the limit of 64"),
            std::string::npos)
      << many_dirs.text;
  Reply nul = client.Call(Registration(kApp, "9", {dirs_[0] + std::string("\0/x", 3)}));
  EXPECT_EQ(nul.type, sw::MessageType::kRpcFailure);  // 18.12
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);

  ASSERT_EQ(client.Call(Registration("ended", "0", {dirs_[2]})).type,
            sw::MessageType::kRpcResponse);
  ASSERT_EQ(client.Call(VictimRegistration()).type, sw::MessageType::kRpcResponse);
  ASSERT_EQ(::rmdir(dirs_[2].c_str()), 0);
  EXPECT_TRUE(WaitFor([&] { return server_->spark_door()->executors()->size() == 1; }));
  EXPECT_FALSE(server_->spark_door()->executors()->Find("ended", "0").ok());
}

// Round five, 1: a YARN application's service data was parsed at every handshake, before
// authentication, on a data-plane thread: nested 30,000 deep (60 KB), one unauthenticated
// first SASL message naming the application cost 31.8 s of server CPU while another
// client's handshake on that thread timed out. Now the file is parsed once, bounded, off
// those threads: 400 first messages naming it or the largest flat payload, from two
// clients, cost little, and another
// application's handshakes go through meanwhile.
TEST_F(SparkAttackTest, AnApplicationsServiceDataCostsAHandshakeNothing) {
  ASSERT_NO_FATAL_FAILURE(MakeHandOffDir());
  const std::string deep =
      absl::StrCat(R"({"x":)", std::string(30000, '['), std::string(30000, ']'), "}");
  HandOver("application_1_0666", deep);
  // And the largest flat payload: 11.8 ms of CPU per first message, parsed each time.
  std::string flat = R"({"secret":"s","pad":")";
  flat += std::string(HandedOffApps::kMaxServiceDataBytes - flat.size() - 2, 'x') + R"("})";
  HandOver("application_1_0667", flat);
  HandOver("application_1_0001", R"({"secret":"the victim's secret"})");
  options_.spark.apps.yarn_dir = handoff_.path();
  options_.spark.auth.yarn = true;
  options_.data.threads = 1;  // the attackers' and the victim's connections share it
  Start();

  constexpr int kPerAttacker = 200;
  std::atomic<int> answered{0};
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  const absl::Time start = absl::Now();
  std::vector<std::thread> attackers;
  for (const char* named : {"application_1_0666", "application_1_0667"}) {
    attackers.emplace_back([&, named] {
      for (int i = 0; i < kPerAttacker; ++i) {
        SparkClient client(port());
        const Reply reply = client.Call(sw::EncodeSaslMessage({named, std::string()}));
        if (reply.type == sw::MessageType::kRpcResponse ||
            reply.type == sw::MessageType::kRpcFailure) {
          answered++;
        }
      }
    });
  }
  std::vector<double> victim_ms;
  for (int i = 0; i < 20; ++i) {
    SparkClient victim(port(), "127.0.0.2");
    const absl::Time began = absl::Now();
    ASSERT_TRUE(
        testing::AuthenticateWithAuthEngine(victim, "application_1_0001", "the victim's secret", 2)
            .ok());
    victim_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - began));
  }
  for (std::thread& attacker : attackers) attacker.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  const auto cpu = [](const rusage& r) {
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  std::sort(victim_ms.begin(), victim_ms.end());
  const double per_message_us = (cpu(after) - cpu(before)) * 1e6 / (2 * kPerAttacker);
  std::printf(
      "%d first SASL messages naming a 60 KB service data nested 30,000 deep, or a flat 64 KiB "
      "one, in %.2f s: %.0f us "
      "of CPU each (server and clients); the victim's AuthEngine handshake meanwhile: median "
      "%.2f ms, max %.2f ms\n",
      2 * kPerAttacker, seconds, per_message_us, victim_ms[victim_ms.size() / 2], victim_ms.back());
  EXPECT_EQ(answered, 2 * kPerAttacker);
  // Was 31.8 s of CPU each, and the victim timed out.
  EXPECT_LT(per_message_us, 20000);
  EXPECT_LT(victim_ms.back(), 2000);
}

// Round six, 9: service data nested 33 deep authenticated with neither its inner
// secret nor its bytes. Now it is read as Spark's service (Jackson, 1000 deep) reads
// it: the inner secret; deeper, the whole bytes, with a warning.
TEST_F(SparkAttackTest, DeepServiceDataAuthenticatesAsSparksServiceReadsIt) {
  ASSERT_NO_FATAL_FAILURE(MakeHandOffDir());
  HandOver("application_1_0033", absl::StrCat(R"({"secret":"d33","a":)", std::string(32, '['),
                                              std::string(32, ']'), "}"));
  const std::string too_deep = absl::StrCat(R"({"secret":"d1001","a":)", std::string(1000, '['),
                                            std::string(1000, ']'), "}");
  HandOver("application_1_1001", too_deep);
  options_.spark.apps.yarn_dir = handoff_.path();
  options_.spark.auth.yarn = true;
  Start();
  SparkClient d33(port());
  EXPECT_TRUE(testing::AuthenticateWithAuthEngine(d33, "application_1_0033", "d33", 2).ok());
  SparkClient whole(port());
  EXPECT_TRUE(testing::AuthenticateWithAuthEngine(whole, "application_1_1001", too_deep, 2).ok());
}

// Round five, 4: the registration budget was per address, so every executor of a node
// shared one: an application re-registering from 128 connections (or registering dirs
// that are not there) kept another application's new executors on that host from
// registering at all (0 of 24). Now it is the application's (the authenticated one),
// an invalid registration costs nothing, and changes never delay new executors.
TEST_F(SparkAttackTest, OneApplicationsRegistrationsNeverSpendAnothers) {
  testing::TempDir secrets;
  std::ofstream(secrets.path() + "/bob") << "bob's secret";
  std::ofstream(secrets.path() + "/alice") << "alice's secret";
  options_.spark.auth.secrets_dir = secrets.path();
  options_.spark.service.registrations.per_client = {.per_second = 20, .burst = 20};
  options_.spark.service.registrations.max_wait = absl::Milliseconds(200);
  Start();
  const auto authenticated = [&](const std::string& app, const std::string& secret) {
    auto client = std::make_unique<SparkClient>(port());
    EXPECT_TRUE(testing::AuthenticateWithAuthEngine(*client, app, secret, 2).ok());
    return client;
  };
  std::atomic<int> refused{0};
  std::vector<std::thread> flooders;
  for (int t = 0; t < 16; ++t) {
    flooders.emplace_back([&, t] {
      auto client = authenticated("bob", "bob's secret");
      for (int i = 0; i < 12; ++i) {
        // A dir that is not there, then a change to a registered executor.
        client->Call(Registration("bob", absl::StrCat(t), {roots_.path() + "/missing"}));
        const Reply reply = client->Call(
            Registration("bob", absl::StrCat(t), {dirs_[2]}, i % 2 ? "manager-a" : "manager-b"));
        if (reply.type != sw::MessageType::kRpcResponse) refused++;
      }
    });
  }
  // alice's new executors, from the same host meanwhile: every one registers.
  auto alice = authenticated("alice", "alice's secret");
  int registered = 0;
  for (int e = 0; e < 16; ++e) {
    registered += alice->Call(Registration("alice", absl::StrCat(e), {dirs_[0]})).type ==
                  sw::MessageType::kRpcResponse;
  }
  for (std::thread& flooder : flooders) flooder.join();
  std::printf(
      "alice registered %d of 16 new executors while bob's 16 connections were refused "
      "%d of 192 changes\n",
      registered, refused.load());
  EXPECT_EQ(registered, 16);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace ferry
