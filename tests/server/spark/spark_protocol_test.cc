// The Spark front door's answers frame by frame, over a real loopback socket to a real
// FerryServer: what Spark's client sends in the normal case, and what a broken or
// hostile peer can send. Frames are built with common/spark/wire.h, whose encoders are
// checked against Spark's own golden frames (tests/common/spark/wire_test.cc).
#include "server/spark/spark_protocol.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/dir_entries.h"
#include "common/shuffle_files.h"
#include "common/shuffle_writer.h"
#include "common/spark/bitmap.h"
#include "common/spark/layout.h"
#include "common/spark/merge_dirs.h"
#include "common/spark/sasl.h"
#include "common/spark/wire.h"
#include "gtest/gtest.h"
#include "server/ferry_server.h"
#include "server/spark/push/push_merger.h"
#include "tests/e2e/spark_raw_client.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/certificate.h"
#include "tests/testing/loopback.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/small_tmpfs.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::Reply;
using ::ferry::testing::SparkClient;
using ::ferry::testing::StreamHandleOf;
using ::ferry::testing::TempDir;
namespace sw = ::ferry::spark;

constexpr char kApp[] = "app-1";
constexpr char kExec[] = "0";
constexpr int kSubdirs = 8;

class SparkProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    local_dirs_ = {absl::StrCat(roots_.path(), "/a"), absl::StrCat(roots_.path(), "/b")};
    for (const std::string& d : local_dirs_) ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
    Write(3, 1000, {0, 10, 70000, 5});
    Write(3, 1007, {1, 2, 3, 4});
  }

  void Write(int32_t shuffle, int64_t map, const std::vector<size_t>& sizes) {
    ASSERT_TRUE(testing::WriteSparkMapOutput(local_dirs_, kSubdirs, shuffle, map, sizes).ok());
  }

  void Start(SparkShuffleService::Options spark = {},
             absl::Duration first_request_timeout = absl::Seconds(10)) {
    FerryServerOptions options = testing::TestServerOptions(data_dir_.path(), {});
    options.connection.first_request_timeout = first_request_timeout;
    options.connection.mode = mode_;
    options.spark.address = "127.0.0.1:0";
    options.spark.executors.dir_roots = {roots_.path()};
    options.spark.service = spark;
    options.spark.auth = auth_;
    options.spark.tls = tls_;
    options.spark.push = push_;
    options.spark.executors.state_dir = state_dir_;
    if (request_buffer_budget_ > 0) options.data.max_request_buffer_bytes = request_buffer_budget_;
    server_ = testing::StartServer(options);
  }

  // spark.authenticate with `shared` as every application's secret, and a dir where
  // an application may have its own.
  void StartWithSecrets(const std::string& shared) {
    if (!shared.empty()) {
      auth_.secret_file = absl::StrCat(secrets_.path(), "/shared");
      std::ofstream(auth_.secret_file) << shared << "\n";
    }
    auth_.secrets_dir = absl::StrCat(secrets_.path(), "/apps");
    ASSERT_EQ(::mkdir(auth_.secrets_dir.c_str(), 0700), 0);
    Start();
  }
  // TLS on the front door with a certificate made for this test; *ca is the file a
  // client trusts.
  void UseTls(std::string* ca) {
    absl::StatusOr<testing::CertificateFiles> cert =
        testing::MakeSelfSignedCertificate(certs_.path());
    ASSERT_TRUE(cert.ok()) << cert.status();
    tls_.cert_file = cert->cert;
    tls_.key_file = cert->key;
    *ca = cert->cert;
  }
  void WriteAppSecret(const std::string& app, const std::string& secret) {
    std::ofstream(absl::StrCat(auth_.secrets_dir, "/", app)) << secret;
  }

  std::string Registration() const {
    return sw::EncodeRegisterExecutor(
        {kApp, kExec, {local_dirs_, kSubdirs, "org.apache.spark.shuffle.sort.SortShuffleManager"}});
  }
  static std::string Fetch(int64_t map, std::vector<int32_t> reduces, bool batch = false) {
    return sw::EncodeFetchShuffleBlocks({kApp, kExec, 3, {map}, {std::move(reduces)}, batch});
  }
  std::string PathOf(const std::string& name) const {
    return *sw::ExecutorFilePath(local_dirs_, kSubdirs, name);
  }
  // Registers the executor on `client` and reads a block as a chunk and one as a stream
  // (a StreamResponse, then the block after it), checking their bytes.
  void RegisterAndFetchBothWays(SparkClient& client) {
    EXPECT_EQ(client.Call(Registration()).type, sw::MessageType::kRpcResponse);
    EXPECT_EQ(testing::FetchFirstChunk(client, Fetch(1000, {2})),
              testing::PartitionBytes(3, 1000, 2, 70000));
    const auto [stream, chunks] = StreamHandleOf(client.Call(Fetch(1007, {3})));
    ASSERT_EQ(chunks, 1);
    client.Send(sw::EncodeStreamRequest(absl::StrCat(stream, "_0")));
    std::optional<Reply> streamed = client.Read();
    ASSERT_TRUE(streamed.has_value());
    ASSERT_EQ(streamed->type, sw::MessageType::kStreamResponse) << streamed->text;
    EXPECT_EQ(streamed->body, testing::PartitionBytes(3, 1007, 3, 4));
  }

  TempDir roots_;
  TempDir data_dir_;
  TempDir secrets_;
  TempDir certs_;
  SparkSecrets::Options auth_;
  SparkTls::Options tls_;
  PushMerger::Options push_;
  std::string state_dir_;               // none when empty
  uint64_t request_buffer_budget_ = 0;  // the server's default when 0
  DataPlaneMode mode_ = DataPlaneMode::kSplice;
  std::vector<std::string> local_dirs_;
  std::unique_ptr<FerryServer> server_;
};

// spark.authenticate's SASL exchange on `client` as `app`, as Spark's SaslClientBootstrap
// runs it: OK, or the server's refusal.
absl::Status Authenticate(SparkClient& client, const std::string& app, const std::string& secret) {
  absl::StatusOr<std::unique_ptr<sw::SaslClient>> sasl = sw::SaslClient::Create(secret);
  if (!sasl.ok()) return sasl.status();
  absl::StatusOr<std::string> token = (*sasl)->Start();
  while (token.ok() && !(*sasl)->complete()) {
    const Reply reply = client.Call(sw::EncodeSaslMessage({app, *token}));
    if (reply.type != sw::MessageType::kRpcResponse) {
      return absl::PermissionDeniedError(reply.text);
    }
    token = (*sasl)->Step(reply.body);
  }
  return token.status();
}

TEST_F(SparkProtocolTest, RegisterFetchAndPipelinedChunksCarryTheBytes) {
  Start();
  SparkClient client(server_->spark_port());
  const Reply registered = client.Call(Registration());
  EXPECT_EQ(registered.type, sw::MessageType::kRpcResponse) << registered.text;
  EXPECT_EQ(registered.body, "");
  const auto [stream, chunks] = StreamHandleOf(client.Call(Fetch(1000, {1, 2, 0, 3})));
  ASSERT_EQ(chunks, 4);
  std::string pipelined;
  for (int32_t i = 0; i < 4; ++i) pipelined += sw::EncodeChunkFetchRequest({stream, i});
  client.Send(pipelined);
  const int32_t reduces[] = {1, 2, 0, 3};
  for (int32_t i = 0; i < 4; ++i) {
    std::optional<Reply> chunk = client.Read();
    ASSERT_TRUE(chunk.has_value());
    EXPECT_EQ(chunk->type, sw::MessageType::kChunkFetchSuccess) << chunk->text;
    EXPECT_EQ(chunk->id, stream);
    EXPECT_EQ(chunk->chunk_index, i);
    const size_t sizes[] = {0, 10, 70000, 5};
    EXPECT_EQ(chunk->body, testing::PartitionBytes(3, 1000, reduces[i], sizes[reduces[i]]));
  }
  // The stream closed with its last chunk.
  client.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  std::optional<Reply> gone = client.Read();
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->type, sw::MessageType::kChunkFetchFailure);
  EXPECT_EQ(gone->text,
            absl::StrCat("Requested chunk not available since streamId ", stream, " is closed"));
}

TEST_F(SparkProtocolTest, BatchRangesAndStreamRequestsServeWholeRanges) {
  Start();
  SparkClient client(server_->spark_port());
  client.Call(Registration());
  const auto [stream, chunks] = StreamHandleOf(client.Call(Fetch(1000, {1, 4}, true)));
  ASSERT_EQ(chunks, 1);
  client.Send(sw::EncodeStreamRequest(absl::StrCat(stream, "_0")));
  std::optional<Reply> reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, sw::MessageType::kStreamResponse) << reply->text;
  EXPECT_EQ(reply->stream_id, absl::StrCat(stream, "_0"));
  EXPECT_EQ(reply->body, testing::PartitionBytes(3, 1000, 1, 10) +
                             testing::PartitionBytes(3, 1000, 2, 70000) +
                             testing::PartitionBytes(3, 1000, 3, 5));
  client.Send(sw::EncodeStreamRequest("not-a-stream"));
  reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, sw::MessageType::kStreamFailure);
  EXPECT_NE(reply->text.find("is not <streamId>_<chunkIndex>"), std::string::npos);
}

TEST_F(SparkProtocolTest, ChunksOutOfOrderOrOfAnotherConnectionFailAndTheConnectionGoesOn) {
  Start();
  SparkClient client(server_->spark_port());
  client.Call(Registration());
  const auto [stream, chunks] = StreamHandleOf(client.Call(Fetch(1007, {0, 1})));
  ASSERT_EQ(chunks, 2);
  client.Send(sw::EncodeChunkFetchRequest({stream, 1}));
  std::optional<Reply> reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, sw::MessageType::kChunkFetchFailure);
  EXPECT_EQ(reply->text, "Received out-of-order chunk index 1 (expected 0)");

  SparkClient other(server_->spark_port());
  other.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  reply = other.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, sw::MessageType::kChunkFetchFailure);
  EXPECT_NE(reply->text.find("is closed"), std::string::npos);

  client.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, sw::MessageType::kChunkFetchSuccess);
  EXPECT_EQ(reply->body, testing::PartitionBytes(3, 1007, 0, 1));
}

TEST_F(SparkProtocolTest, BlocksThatCannotBeServedFailTheirChunksAlone) {
  Start();
  SparkClient client(server_->spark_port());
  // Not registered yet: each chunk fails with Spark's words.
  auto [stream, chunks] = StreamHandleOf(client.Call(Fetch(1000, {0})));
  client.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  std::optional<Reply> reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_NE(reply->text.find("Executor is not registered (appId=app-1, execId=0)"),
            std::string::npos)
      << reply->text;

  client.Call(Registration());
  // A map output that is not there, a reduce id past the output's partitions, and an
  // index whose data file is gone (Spark's commit renames the index first).
  ASSERT_EQ(::unlink(PathOf(DataFileName(3, 1007)).c_str()), 0);
  std::tie(stream, chunks) = StreamHandleOf(client.Call(sw::EncodeFetchShuffleBlocks(
      {kApp, kExec, 3, {4242, 1000, 1007, 1000}, {{0}, {9}, {0}, {2}}, false})));
  ASSERT_EQ(chunks, 4);
  for (int32_t i = 0; i < 4; ++i) client.Send(sw::EncodeChunkFetchRequest({stream, i}));
  const std::string expected[] = {"has no map output 4242 of shuffle 3", "past the map output's",
                                  "is missing but its index", ""};
  for (int32_t i = 0; i < 4; ++i) {
    reply = client.Read();
    ASSERT_TRUE(reply.has_value());
    if (i == 3) {
      EXPECT_EQ(reply->type, sw::MessageType::kChunkFetchSuccess) << reply->text;
      EXPECT_EQ(reply->body, testing::PartitionBytes(3, 1000, 2, 70000));
      continue;
    }
    EXPECT_EQ(reply->type, sw::MessageType::kChunkFetchFailure);
    EXPECT_NE(reply->text.find(expected[i]), std::string::npos) << i << ": " << reply->text;
  }
}

TEST_F(SparkProtocolTest, UnsupportedAndMalformedRpcsGetRpcFailuresAndTheConnectionGoesOn) {
  Start();
  SparkClient client(server_->spark_port());
  // spark.authenticate's AuthMessage, push-based shuffle's FinalizeShuffleMerge, an
  // unknown type, a truncated FetchShuffleBlocks, a FetchShuffleBlocks whose arrays
  // disagree, and an rdd block.
  const std::pair<std::string, std::string> cases[] = {
      {std::string("\xFB\x00\x00\x00\x01x", 6), "spark.authenticate is not enabled"},
      {sw::EncodeFinalizeShuffleMerge({kApp, 0, 3, 0}),
       "not served here: ferry_server --spark-push-merge"},
      {std::string("\x63", 1), "Unexpected message"},
      {Fetch(1000, {0}).substr(0, 12), "FetchShuffleBlocks"},
      {sw::EncodeFetchShuffleBlocks({kApp, kExec, 3, {1000, 1007}, {{0}}, false}),
       "2 map ids but 1 lists"},
      {sw::EncodeOpenBlocks({kApp, kExec, {"rdd_1_2"}}),
       "served only with ferry_server --spark-rdd-blocks"},
  };
  for (const auto& [body, expected] : cases) {
    const Reply reply = client.Call(body);
    EXPECT_EQ(reply.type, sw::MessageType::kRpcFailure);
    EXPECT_NE(reply.text.find(expected), std::string::npos) << reply.text;
  }
  // Still serving; a one-way message gets no reply.
  client.Send(sw::EncodeOneWayMessage(std::string("\x13", 1)));
  EXPECT_EQ(client.Call(Registration()).type, sw::MessageType::kRpcResponse);
}

TEST_F(SparkProtocolTest, BadFramesCloseTheConnection) {
  Start();
  const std::string bad[] = {
      std::string("\x00\x00\x00\x00\x00\x00\x00\x00", 8),           // length 0
      std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8),           // negative
      std::string("\x00\x00\x00\x00\x02\x00\x00\x09", 8),           // 32 MiB
      std::string("\x00\x00\x00\x00\x00\x00\x00\x0d\x01xxxx", 13),  // a server's frame
      std::string("\x00\x00\x00\x00\x00\x00\x00\x0a\x00\x00", 10),  // short chunk request
  };
  for (const std::string& frame : bad) {
    SparkClient client(server_->spark_port());
    client.Send(frame);
    EXPECT_TRUE(client.Closed()) << absl::CEscape(frame);
  }
  // An UploadStream is refused, then the connection closes: its body follows unframed.
  SparkClient client(server_->spark_port());
  std::string upload = std::string("\x00\x00\x00\x00\x00\x00\x00\x1d\x0a", 9) +
                       std::string("\x00\x00\x00\x00\x00\x00\x00\x07", 8) +
                       std::string("\x00\x00\x00\x00", 4) +
                       std::string("\x00\x00\x00\x00\x00\x00\x00\x05", 8) + "hello";
  client.Send(upload);
  std::optional<Reply> reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, sw::MessageType::kRpcFailure);
  EXPECT_EQ(reply->id, 7);
  EXPECT_TRUE(client.Closed());
}

// A peer that trickles its first frame a byte at a time is dropped when the whole frame
// has not arrived within the first-request timeout, however often bytes come.
TEST_F(SparkProtocolTest, AFrameTrickledByteByByteIsDroppedAtItsDeadline) {
  Start({}, absl::Milliseconds(300));
  SparkClient client(server_->spark_port());
  const std::string frame = sw::EncodeRpcRequest(1, Registration());
  const absl::Time start = absl::Now();
  size_t sent = 0;
  // Bounded: the frame is over 100 bytes, one every 50 ms would take over 5 s.
  for (; sent < frame.size(); ++sent) {
    if (::send(client.fd(), frame.data() + sent, 1, MSG_NOSIGNAL) != 1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LT(sent, frame.size());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(client.Closed());
}

TEST_F(SparkProtocolTest, StreamsPerConnectionAndOpenChunksAreBounded) {
  Start({.max_streams_per_connection = 2, .max_open_chunks = 6});
  SparkClient client(server_->spark_port());
  client.Call(Registration());
  const auto first = StreamHandleOf(client.Call(Fetch(1000, {0, 1})));
  StreamHandleOf(client.Call(Fetch(1000, {2})));
  Reply third = client.Call(Fetch(1000, {3}));
  EXPECT_EQ(third.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(third.text.find("2 streams are open on this connection"), std::string::npos);
  // Fetching a stream's chunks closes it and makes room.
  client.Send(sw::EncodeChunkFetchRequest({first.first, 0}) +
              sw::EncodeChunkFetchRequest({first.first, 1}));
  ASSERT_TRUE(client.Read().has_value());
  ASSERT_TRUE(client.Read().has_value());
  StreamHandleOf(client.Call(Fetch(1000, {3})));
  // Past the server-wide bound on open chunks (2 held, 6 allowed), the connection is
  // closed: Spark's client retries that, and an RpcFailure it would not.
  SparkClient other(server_->spark_port());
  other.Send(sw::EncodeRpcRequest(1, Fetch(1007, {0, 1, 2, 3, 0})));
  EXPECT_TRUE(other.Closed());
}

TEST_F(SparkProtocolTest, ABlockAboveTheFrameLimitFailsAsAChunkButGoesAsAStream) {
  Start();
  // A sparse 3 GiB partition: too big for a ChunkFetchSuccess frame.
  Write(5, 1, {1});
  const uint64_t big = uint64_t{3} << 30;
  const std::string data = PathOf(DataFileName(5, 1));
  ASSERT_EQ(::truncate(data.c_str(), static_cast<off_t>(big)), 0);
  std::string index(16, '\0');
  for (int i = 0; i < 8; ++i) index[8 + i] = static_cast<char>(big >> (56 - 8 * i));
  const std::string index_path = PathOf(IndexFileName(5, 1));
  const int fd = ::open(index_path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, index.data(), index.size()), 16);
  ::close(fd);
  ::unlink(PathOf(ChecksumFileName(5, 1, ChecksumAlgorithm::kAdler32)).c_str());
  SparkClient client(server_->spark_port());
  client.Call(Registration());
  const auto [stream, chunks] = StreamHandleOf(
      client.Call(sw::EncodeFetchShuffleBlocks({kApp, kExec, 5, {1}, {{0}}, false})));
  client.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  std::optional<Reply> reply = client.Read();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type, sw::MessageType::kChunkFetchFailure);
  EXPECT_NE(reply->text.find("more than a Spark frame can hold"), std::string::npos) << reply->text;
}

TEST_F(SparkProtocolTest, LocalDirsDiagnosisAndRddRemoval) {
  Start();
  SparkClient client(server_->spark_port());
  client.Call(Registration());
  Reply dirs = client.Call(sw::EncodeGetLocalDirsForExecutors({kApp, {kExec}}));
  EXPECT_EQ(dirs.body, sw::EncodeLocalDirsForExecutors({kExec}, {2}, local_dirs_));
  Reply unknown = client.Call(sw::EncodeGetLocalDirsForExecutors({kApp, {kExec, "9"}}));
  EXPECT_EQ(unknown.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(unknown.text.find("Executor is not registered (appId=app-1, execId=9)"),
            std::string::npos);

  // Partition 2 of map 1000: its stored ADLER32, a wrong one, an unknown algorithm, then
  // the same after the bytes on disk changed.
  Checksum adler(ChecksumAlgorithm::kAdler32);
  adler.Update(testing::PartitionBytes(3, 1000, 2, 70000));
  auto diagnose = [&](int64_t checksum, const std::string& algorithm) {
    const Reply reply =
        client.Call(sw::EncodeDiagnoseCorruption({kApp, kExec, 3, 1000, 2, checksum, algorithm}));
    EXPECT_EQ(reply.type, sw::MessageType::kRpcResponse) << reply.text;
    return reply.body;
  };
  EXPECT_EQ(diagnose(adler.Value(), "ADLER32"), sw::EncodeCorruptionCause(3));
  EXPECT_EQ(diagnose(adler.Value() + 1, "ADLER32"), sw::EncodeCorruptionCause(1));
  EXPECT_EQ(diagnose(adler.Value(), "MD5"), sw::EncodeCorruptionCause(4));
  EXPECT_EQ(diagnose(adler.Value(), "CRC32"), sw::EncodeCorruptionCause(2));
  const int fd = ::open(PathOf(DataFileName(3, 1000)).c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "!", 1, 20), 1);
  ::close(fd);
  EXPECT_EQ(diagnose(adler.Value(), "ADLER32"), sw::EncodeCorruptionCause(0));

  // rdd_1_2 is a file in the hashed layout.
  const std::string rdd = PathOf("rdd_1_2");
  ::mkdir(rdd.substr(0, rdd.rfind('/')).c_str(), 0755);
  ASSERT_EQ(::close(::open(rdd.c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  Reply removed = client.Call(
      sw::EncodeRemoveBlocks({kApp, kExec, {"rdd_1_2", "rdd_1_3", "shuffle_3_1000_0"}}));
  EXPECT_EQ(removed.body, sw::EncodeBlocksRemoved(1));
  EXPECT_NE(::access(rdd.c_str(), F_OK), 0);

  // The driver removing shuffle 3 (spark.shuffle.service.removeShuffle) names each map
  // output's index and data files; nothing else of the shuffle is deleted.
  const std::string checksum = PathOf("shuffle_3_1000_0.checksum.ADLER32");
  ASSERT_EQ(::access(checksum.c_str(), F_OK), 0);
  for (const char* name : {"shuffle_3_1000_0.data", "shuffle_3_1000_0.index"}) {
    ASSERT_EQ(::access(PathOf(name).c_str(), F_OK), 0) << name;
  }
  removed = client.Call(sw::EncodeRemoveBlocks(
      {kApp,
       kExec,
       {"shuffle_3_1000_0.index", "shuffle_3_1000_0.data", "shuffle_3_1000_0.checksum.ADLER32",
        "shuffle_3_999_0.data", "../shuffle_3_1000_0.data"}}));
  EXPECT_EQ(removed.body, sw::EncodeBlocksRemoved(2));
  for (const char* name : {"shuffle_3_1000_0.data", "shuffle_3_1000_0.index"}) {
    EXPECT_NE(::access(PathOf(name).c_str(), F_OK), 0) << name;
  }
  EXPECT_EQ(::access(checksum.c_str(), F_OK), 0);
}

// --- cached RDD blocks (spark.shuffle.service.fetch.rdd.enabled) ---------------------

// (Without --spark-rdd-blocks an rdd id is refused: UnsupportedAndMalformedRpcs...)
// With --spark-rdd-blocks, OpenBlocks of rdd_<rdd>_<split> serves the executor's file of
// that name in its hashed dirs, whole, as chunks and as streams; a block it has not, a
// symlink in its place, or an unregistered executor fails that chunk only.
TEST_F(SparkProtocolTest, CachedRddBlocksAreServedFromTheExecutorsDirs) {
  SparkShuffleService::Options spark;
  spark.serve_rdd_blocks = true;
  Start(spark);
  const auto put = [&](const std::string& name, const std::string& bytes) {
    const std::string path = PathOf(name);
    ::mkdir(path.substr(0, path.rfind('/')).c_str(), 0755);
    std::ofstream(path, std::ios::binary) << bytes;
  };
  const std::string first(70000, 'r');
  const std::string second = "a small cached partition";
  put("rdd_1_2", first);
  put("rdd_1_4", second);
  const std::string outside = absl::StrCat(roots_.path(), "/outside");
  std::ofstream(outside) << "not the executor's";
  const std::string link = PathOf("rdd_1_5");
  ::mkdir(link.substr(0, link.rfind('/')).c_str(), 0755);
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);

  SparkClient client(server_->spark_port());
  client.Call(Registration());
  const auto [stream, chunks] = StreamHandleOf(client.Call(
      sw::EncodeOpenBlocks({kApp, kExec, {"rdd_1_2", "rdd_1_3", "rdd_1_4", "rdd_1_5"}})));
  ASSERT_EQ(chunks, 4);
  std::vector<Reply> got;
  for (int32_t i = 0; i < chunks; ++i) {
    client.Send(sw::EncodeChunkFetchRequest({stream, i}));
    std::optional<Reply> reply = client.Read();
    ASSERT_TRUE(reply.has_value());
    got.push_back(*reply);
  }
  EXPECT_EQ(got[0].type, sw::MessageType::kChunkFetchSuccess);
  EXPECT_EQ(got[0].body, first);
  EXPECT_EQ(got[1].type, sw::MessageType::kChunkFetchFailure);
  EXPECT_NE(got[1].text.find("rdd_1_3: NOT_FOUND: the executor has no cached block rdd_1_3"),
            std::string::npos)
      << got[1].text;
  EXPECT_EQ(got[2].body, second);
  EXPECT_EQ(got[3].type, sw::MessageType::kChunkFetchFailure);
  EXPECT_EQ(got[3].text.find("not the executor's"), std::string::npos);
  // Fetched to disk: a StreamResponse and the file after it.
  const auto [to_disk, one] =
      StreamHandleOf(client.Call(sw::EncodeOpenBlocks({kApp, kExec, {"rdd_1_4"}})));
  ASSERT_EQ(one, 1);
  client.Send(sw::EncodeStreamRequest(absl::StrCat(to_disk, "_0")));
  std::optional<Reply> streamed = client.Read();
  ASSERT_TRUE(streamed.has_value());
  EXPECT_EQ(streamed->type, sw::MessageType::kStreamResponse) << streamed->text;
  EXPECT_EQ(streamed->body, second);

  const Reply mixed =
      client.Call(sw::EncodeOpenBlocks({kApp, kExec, {"rdd_1_2", "shuffle_3_1000_1"}}));
  EXPECT_EQ(mixed.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(mixed.text.find("mixes rdd and shuffle block ids"), std::string::npos) << mixed.text;
  EXPECT_EQ(testing::FetchFirstChunk(client, sw::EncodeOpenBlocks({kApp, "9", {"rdd_1_2"}})),
            "chunk failure: rdd_1_2: NOT_FOUND: Executor is not registered (appId=app-1, "
            "execId=9)");
  // Removed, it is served no more.
  EXPECT_EQ(client.Call(sw::EncodeRemoveBlocks({kApp, kExec, {"rdd_1_2"}})).body,
            sw::EncodeBlocksRemoved(1));
  EXPECT_NE(testing::FetchFirstChunk(client, sw::EncodeOpenBlocks({kApp, kExec, {"rdd_1_2"}}))
                .find("no cached block"),
            std::string::npos);
}

// --- TLS (spark.ssl.rpc.enabled) ----------------------------------------------------

// TLS from the first byte: a client that trusts the certificate is served every way; a
// plain client's connection closes, having reached no handler;
// one that trusts another certificate refuses the server itself.
TEST_F(SparkProtocolTest, TlsFromTheFirstByte) {
  std::string ca;
  ASSERT_NO_FATAL_FAILURE(UseTls(&ca));
  TempDir other;
  absl::StatusOr<testing::CertificateFiles> stranger =
      testing::MakeSelfSignedCertificate(other.path());
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  Start();
  {
    SparkClient plain(server_->spark_port());
    plain.Send(sw::EncodeRpcRequest(1, Registration()));
    std::string got;
    char buf[256];
    for (ssize_t n; (n = ::recv(plain.fd(), buf, sizeof(buf), 0)) > 0;) got.append(buf, n);
    // The connection closes (after a TLS alert record, when OpenSSL sends one): no frame.
    EXPECT_TRUE(got.empty() || got[0] == '\x15') << absl::CEscape(got);
  }
  {
    SparkClient distrustful(server_->spark_port());
    EXPECT_FALSE(distrustful.StartTls(stranger->cert).ok());
  }
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
  SparkClient client(server_->spark_port());
  ASSERT_TRUE(client.StartTls(ca).ok());
  RegisterAndFetchBothWays(client);
  const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_tls_handshakes_total", "outcome", "completed"),
            1);
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_tls_handshakes_total", "outcome", "failed"),
            2);
}

// An idle TLS connection held 67 KiB (76 after a request) that no budget was
// charged with, bounded only by --max-connections. It is charged where the request
// buffers are: past the budget a new TLS connection is closed, and one closing makes room.
TEST_F(SparkProtocolTest, TlsConnectionsAreChargedToTheRequestBufferBudget) {
  std::string ca;
  ASSERT_NO_FATAL_FAILURE(UseTls(&ca));
  request_buffer_budget_ = 3 * (uint64_t{240} << 10) + (uint64_t{100} << 10);
  Start();
  ::signal(SIGPIPE, SIG_IGN);  // the refused connection's handshake writes to a closed socket
  std::vector<std::unique_ptr<SparkClient>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<SparkClient>(server_->spark_port()));
    ASSERT_TRUE(clients.back()->StartTls(ca).ok()) << i;
    ASSERT_EQ(clients.back()->Call(Registration()).type, sw::MessageType::kRpcResponse) << i;
  }
  {
    SparkClient over(server_->spark_port());
    const absl::Status started = over.StartTls(ca);
    EXPECT_TRUE(!started.ok() || over.Closed()) << started;
  }
  clients.front().reset();
  // Once the server has seen the close (its lease is given back), a new one fits.
  EXPECT_TRUE(testing::WaitFor([&] {
    SparkClient again(server_->spark_port());
    return again.StartTls(ca).ok() &&
           testing::FetchFirstChunk(again, Fetch(1000, {2})).size() == 70000;
  }));
}

// With spark.authenticate too: SASL inside TLS; the AuthEngine is declined without
// closing, so that Spark's client falls back to SASL as it does over TLS.
TEST_F(SparkProtocolTest, SparkAuthenticateRunsInsideTls) {
  std::string ca;
  ASSERT_NO_FATAL_FAILURE(UseTls(&ca));
  StartWithSecrets("inside");
  SparkClient client(server_->spark_port());
  ASSERT_TRUE(client.StartTls(ca).ok());
  absl::StatusOr<sw::AuthEngineClient> engine =
      sw::AuthEngineClient::Create(kApp, Secret("inside"), 2);
  ASSERT_TRUE(engine.ok());
  const Reply declined = client.Call(sw::EncodeAuthMessage(*engine->Challenge()));
  EXPECT_EQ(declined.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(declined.text.find("TLS already"), std::string::npos) << declined.text;
  EXPECT_NE(client.Call(Registration()).text.find("Expected SaslMessage"), std::string::npos);
  // Declines are bounded: a peer cannot keep an unauthenticated connection by asking.
  {
    SparkClient asking(server_->spark_port());
    ASSERT_TRUE(asking.StartTls(ca).ok());
    for (int i = 0; i < 4; ++i) {
      EXPECT_NE(asking.Call(sw::EncodeAuthMessage(*engine->Challenge())).text.find("TLS already"),
                std::string::npos);
    }
    EXPECT_NE(asking.Call(sw::EncodeAuthMessage(*engine->Challenge())).text.find("more than 4"),
              std::string::npos);
    EXPECT_TRUE(asking.Closed());
  }
  SparkClient again(server_->spark_port());
  ASSERT_TRUE(again.StartTls(ca).ok());
  ASSERT_TRUE(Authenticate(again, kApp, "inside").ok());
  EXPECT_EQ(again.Call(Registration()).type, sw::MessageType::kRpcResponse);
}

// --- spark.authenticate -------------------------------------------------------------

// Before authenticating, a connection may only run the handshake: anything else gets
// Spark's words and the connection closes, having reached no handler.
TEST_F(SparkProtocolTest, AuthenticationComesFirstAndAnythingElseClosesTheConnection) {
  StartWithSecrets("the cluster's secret");
  {
    SparkClient client(server_->spark_port());
    const Reply reply = client.Call(Registration());
    EXPECT_EQ(reply.type, sw::MessageType::kRpcFailure);
    EXPECT_NE(reply.text.find("Expected SaslMessage, received something else"), std::string::npos)
        << reply.text;
    EXPECT_TRUE(client.Closed());
  }
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
  for (const std::string& frame :
       {sw::EncodeChunkFetchRequest({1, 0}), sw::EncodeStreamRequest("1_0"),
        sw::EncodeOneWayMessage(std::string("\x13", 1))}) {
    SparkClient client(server_->spark_port());
    client.Send(frame);
    EXPECT_TRUE(client.Closed()) << absl::CEscape(frame);
  }
  // After the handshake the connection is served.
  SparkClient client(server_->spark_port());
  ASSERT_TRUE(Authenticate(client, kApp, "the cluster's secret").ok());
  EXPECT_EQ(client.Call(Registration()).type, sw::MessageType::kRpcResponse);
  EXPECT_EQ(testing::FetchFirstChunk(client, Fetch(1000, {1})).size(), 10u);
  const Reply again = client.Call(sw::EncodeSaslMessage({kApp, ""}));
  EXPECT_EQ(again.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(again.text.find("authenticated already"), std::string::npos) << again.text;
}

// As Spark's ExternalBlockHandler.checkAuth: a connection acts for the application it
// authenticated as, and no other.
TEST_F(SparkProtocolTest, AnAuthenticatedConnectionActsOnlyForItsApplication) {
  StartWithSecrets("shared");
  SparkClient owner(server_->spark_port());
  ASSERT_TRUE(Authenticate(owner, kApp, "shared").ok());
  ASSERT_EQ(owner.Call(Registration()).type, sw::MessageType::kRpcResponse);

  SparkClient other(server_->spark_port());
  ASSERT_TRUE(Authenticate(other, "app-2", "shared").ok());
  const std::string requests[] = {
      Registration(),
      Fetch(1000, {1}),
      sw::EncodeOpenBlocks({kApp, kExec, {"shuffle_3_1000_1"}}),
      sw::EncodeRemoveBlocks({kApp, kExec, {"rdd_1_2"}}),
      sw::EncodeGetLocalDirsForExecutors({kApp, {kExec}}),
      sw::EncodeDiagnoseCorruption({kApp, kExec, 3, 1000, 1, 0, "ADLER32"}),
  };
  for (const std::string& request : requests) {
    const Reply reply = other.Call(request);
    EXPECT_EQ(reply.type, sw::MessageType::kRpcFailure);
    EXPECT_NE(reply.text.find("Client for app-2 not authorized for application app-1."),
              std::string::npos)
        << reply.text;
  }
  // Its own application it may act for (which has no executor registered here).
  EXPECT_EQ(other.Call(sw::EncodeGetLocalDirsForExecutors({"app-2", {kExec}}))
                .text.find("not authorized"),
            std::string::npos);
  EXPECT_EQ(testing::FetchFirstChunk(owner, Fetch(1000, {2})).size(), 70000u);
}

// With an application's own secret, bob was refused alice's app, but
// registered an executor of his own app naming alice's block-manager dir, fetched all of
// her map output through it and deleted her files with RemoveBlocks. A dir belongs to the
// application whose live registration names it.
TEST_F(SparkProtocolTest, AnApplicationCannotRegisterAnothersDirsAsItsOwn) {
  StartWithSecrets("");
  WriteAppSecret(kApp, "alice's secret");
  WriteAppSecret("bob", "bob's secret");
  SparkClient alice(server_->spark_port());
  ASSERT_TRUE(Authenticate(alice, kApp, "alice's secret").ok());
  ASSERT_EQ(alice.Call(Registration()).type, sw::MessageType::kRpcResponse);

  SparkClient bob(server_->spark_port());
  ASSERT_TRUE(Authenticate(bob, "bob", "bob's secret").ok());
  // Her dirs, one of them among his own, and a hashed subdir inside hers.
  const std::string bobs_own = absl::StrCat(roots_.path(), "/bob");
  ASSERT_EQ(::mkdir(bobs_own.c_str(), 0755), 0);
  std::string inside = PathOf("shuffle_3_1000_0.data");
  inside = inside.substr(0, inside.rfind('/'));
  for (const std::vector<std::string>& dirs :
       std::vector<std::vector<std::string>>{local_dirs_, {bobs_own, local_dirs_[1]}, {inside}}) {
    const Reply claimed = bob.Call(sw::EncodeRegisterExecutor(
        {"bob", "evil", {dirs, kSubdirs, "org.apache.spark.shuffle.sort.SortShuffleManager"}}));
    EXPECT_EQ(claimed.type, sw::MessageType::kRpcFailure);
    EXPECT_NE(claimed.text.find("PERMISSION_DENIED"), std::string::npos) << claimed.text;
    EXPECT_NE(claimed.text.find("another application"), std::string::npos) << claimed.text;
  }
  const std::string through_bob = testing::FetchFirstChunk(
      bob, sw::EncodeFetchShuffleBlocks({"bob", "evil", 3, {1000}, {{2}}, false}));
  EXPECT_NE(through_bob.find("Executor is not registered"), std::string::npos) << through_bob;
  const Reply removed = bob.Call(sw::EncodeRemoveBlocks({"bob", "evil", {"shuffle_3_1000_0"}}));
  EXPECT_NE(removed.body, sw::EncodeBlocksRemoved(1));
  struct stat st;
  EXPECT_EQ(::stat(PathOf("shuffle_3_1000_0.data").c_str(), &st), 0);
  EXPECT_EQ(::stat(PathOf("shuffle_3_1000_0.index").c_str(), &st), 0);
  // His own dir is his.
  EXPECT_EQ(bob.Call(sw::EncodeRegisterExecutor({"bob", "1", {{bobs_own}, kSubdirs, "sort"}})).type,
            sw::MessageType::kRpcResponse);
  EXPECT_EQ(testing::FetchFirstChunk(alice, Fetch(1000, {2})),
            testing::PartitionBytes(3, 1000, 2, 70000));
}

TEST_F(SparkProtocolTest, WrongSecretsReplaysAndHandshakesOutOfTurnAreRefused) {
  StartWithSecrets("right");
  {
    SparkClient client(server_->spark_port());
    absl::Status wrong = Authenticate(client, kApp, "wrong");
    EXPECT_EQ(wrong.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_NE(wrong.message().find("SASL authentication of application app-1 failed"),
              std::string::npos)
        << wrong;
    EXPECT_EQ(wrong.message().find("right"), std::string::npos) << wrong;
    EXPECT_TRUE(client.Closed());
  }
  // A response recorded on one connection does not answer another's challenge.
  std::string recorded;
  {
    SparkClient client(server_->spark_port());
    auto sasl = sw::SaslClient::Create("right");
    ASSERT_TRUE(sasl.ok());
    const Reply challenge = client.Call(sw::EncodeSaslMessage({kApp, *(*sasl)->Start()}));
    ASSERT_EQ(challenge.type, sw::MessageType::kRpcResponse);
    recorded = *(*sasl)->Step(challenge.body);
    EXPECT_EQ(client.Call(sw::EncodeSaslMessage({kApp, recorded})).type,
              sw::MessageType::kRpcResponse);
  }
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(sw::EncodeSaslMessage({kApp, ""})).type, sw::MessageType::kRpcResponse);
    EXPECT_EQ(client.Call(sw::EncodeSaslMessage({kApp, recorded})).type,
              sw::MessageType::kRpcFailure);
    EXPECT_TRUE(client.Closed());
  }
  // A handshake that changes application half-way, and one that starts over.
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(sw::EncodeSaslMessage({kApp, ""})).type, sw::MessageType::kRpcResponse);
    const Reply switched = client.Call(sw::EncodeSaslMessage({"app-2", "x"}));
    EXPECT_NE(switched.text.find("went on for application app-2"), std::string::npos)
        << switched.text;
    EXPECT_TRUE(client.Closed());
  }
  {
    // DIGEST-MD5 takes one challenge: a second empty first token is refused.
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(sw::EncodeSaslMessage({kApp, ""})).type, sw::MessageType::kRpcResponse);
    EXPECT_EQ(client.Call(sw::EncodeSaslMessage({kApp, ""})).type, sw::MessageType::kRpcFailure);
    EXPECT_TRUE(client.Closed());
  }
  // A handshake cut short, and a malformed SaslMessage: the server goes on serving.
  {
    SparkClient client(server_->spark_port());
    client.Send(sw::EncodeRpcRequest(1, sw::EncodeSaslMessage({kApp, ""})));
  }
  {
    SparkClient client(server_->spark_port());
    EXPECT_EQ(client.Call(std::string("\xEA\x00\x00", 3)).type, sw::MessageType::kRpcFailure);
    EXPECT_TRUE(client.Closed());
  }
  SparkClient client(server_->spark_port());
  EXPECT_TRUE(Authenticate(client, kApp, "right").ok());
}

// The plaintext of the next `n` bytes the server sends on a connection sealed by `sasl`.
std::string ReadSealed(SparkClient& client, sw::SaslCipher& sasl, size_t n) {
  std::string plain;
  char buf[8192];
  while (plain.size() < n) {
    const ssize_t got = ::recv(client.fd(), buf, sizeof(buf), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    const absl::Status opened = sasl.Open(absl::string_view(buf, static_cast<size_t>(got)), &plain);
    EXPECT_TRUE(opened.ok()) << opened;
  }
  return plain;
}

// SASL's auth-conf (spark.authenticate.enableSaslEncryption): after the handshake every
// frame either way, and every block, travels in sealed records.
TEST_F(SparkProtocolTest, AuthConfSealsEveryFrameAndBlock) {
  StartWithSecrets("shared");
  SparkClient client(server_->spark_port());
  auto sasl = sw::SaslClient::Create("shared", /*encrypt=*/true);
  ASSERT_TRUE(sasl.ok());
  absl::StatusOr<std::string> token = (*sasl)->Start();
  while (token.ok() && !(*sasl)->complete()) {
    const Reply reply = client.Call(sw::EncodeSaslMessage({kApp, *token}));
    ASSERT_EQ(reply.type, sw::MessageType::kRpcResponse) << reply.text;
    token = (*sasl)->Step(reply.body);
  }
  ASSERT_TRUE(token.ok()) << token.status();
  std::unique_ptr<sw::SaslCipher> cipher = (*sasl)->TakeCipher();
  ASSERT_NE(cipher, nullptr);

  // RegisterExecutor and FetchShuffleBlocks pipelined in one sealed write; their
  // replies and the chunk come back sealed: frameLen, type, and (the chunk) the block.
  std::string requests;
  ASSERT_TRUE(cipher
                  ->Seal(sw::EncodeRpcRequest(1, Registration()) +
                             sw::EncodeRpcRequest(2, Fetch(1000, {2})),
                         &requests)
                  .ok());
  client.Send(requests);
  const std::string replies = ReadSealed(client, *cipher, 21 + 34);
  ASSERT_EQ(replies.size(), 21u + 34u);
  EXPECT_EQ(static_cast<sw::MessageType>(replies[8]), sw::MessageType::kRpcResponse);
  EXPECT_EQ(static_cast<sw::MessageType>(replies[21 + 8]), sw::MessageType::kRpcResponse);
  Reply handle;
  handle.type = sw::MessageType::kRpcResponse;
  handle.body = replies.substr(21 + 21);
  const auto [stream, chunks] = StreamHandleOf(handle);
  ASSERT_EQ(chunks, 1);
  std::string chunk_request;
  ASSERT_TRUE(cipher->Seal(sw::EncodeChunkFetchRequest({stream, 0}), &chunk_request).ok());
  client.Send(chunk_request);
  const std::string chunk = ReadSealed(client, *cipher, 21 + 70000);
  ASSERT_EQ(chunk.size(), 21u + 70000u);
  EXPECT_EQ(static_cast<sw::MessageType>(chunk[8]), sw::MessageType::kChunkFetchSuccess);
  std::ifstream in(PathOf("shuffle_3_1000_0.data"), std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(chunk.substr(21) == data.substr(10, 70000));  // not printed: 70,000 bytes

  EXPECT_EQ(testing::MetricSum(server_->CollectMetrics(), "ferry_spark_authentications_total",
                               "outcome", "encrypted"),
            1);
  // A record changed on the way ends the connection.
  std::string tampered;
  ASSERT_TRUE(cipher->Seal(sw::EncodeRpcRequest(3, Registration()), &tampered).ok());
  tampered[tampered.size() / 2] ^= 0x40;
  client.Send(tampered);
  EXPECT_TRUE(client.Closed());
}

// YARN's way: a secret per application, from a file named by its id; the shared secret
// for applications without one.
TEST_F(SparkProtocolTest, PerApplicationSecretsComeFromTheirFilesOrTheSharedOne) {
  StartWithSecrets("");
  WriteAppSecret(kApp, "app-1's own\n");
  {
    SparkClient client(server_->spark_port());
    EXPECT_TRUE(Authenticate(client, kApp, "app-1's own").ok());
  }
  for (const std::string& app :
       {std::string("app-2"), std::string("../apps/app-1"), std::string(".."), std::string()}) {
    SparkClient client(server_->spark_port());
    absl::Status refused = Authenticate(client, app, "app-1's own");
    EXPECT_NE(refused.message().find("non-registered app"), std::string::npos)
        << app << ": " << refused;
    EXPECT_TRUE(client.Closed());
  }
  // A file written after the server started counts at the next handshake.
  WriteAppSecret("app-2", "two");
  SparkClient client(server_->spark_port());
  EXPECT_TRUE(Authenticate(client, "app-2", "two").ok());
}

// --- spark.authenticate with Spark's AuthEngine (spark.network.crypto.enabled) ---------

// Either AuthEngine version authenticates, and then every byte either way is AES-CTR:
// the client's frames only mean something decrypted, and the blocks it reads back
// decrypt to the files' bytes. Each session's version is told from its first frame.
TEST_F(SparkProtocolTest, TheAuthEngineEncryptsEveryByteInEitherVersion) {
  StartWithSecrets("engine secret");
  const SparkSecrets& secrets = *server_->spark_door()->secrets();
  for (int version : {1, 2}) {
    SCOPED_TRACE(version);
    SparkClient client(server_->spark_port());
    ASSERT_TRUE(testing::AuthenticateWithAuthEngine(client, kApp, "engine secret", version).ok());
    RegisterAndFetchBothWays(client);
    EXPECT_EQ(secrets.auth_engine_sessions(version), 1u);
  }
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kEncrypted), 2u);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kRefused), 0u);
}

// --spark-auth-engine-v1=false: a version-1 client authenticates (the handshake is the
// same) but its first frame, under the other key, is no frame: the connection closes
// before anything is served.
TEST_F(SparkProtocolTest, VersionOneClientsAreRefusedWhenOnlyVersionTwoIsServed) {
  auth_.auth_engine_v1 = false;
  StartWithSecrets("s");
  {
    SparkClient client(server_->spark_port());
    ASSERT_TRUE(testing::AuthenticateWithAuthEngine(client, kApp, "s", 1).ok());
    client.Send(sw::EncodeRpcRequest(1, Registration()));
    EXPECT_TRUE(client.Closed());
  }
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
  SparkClient client(server_->spark_port());
  ASSERT_TRUE(testing::AuthenticateWithAuthEngine(client, kApp, "s", 2).ok());
  EXPECT_EQ(client.Call(Registration()).type, sw::MessageType::kRpcResponse);
}

TEST_F(SparkProtocolTest, AuthEngineRefusalsCloseTheConnection) {
  StartWithSecrets("right");
  const auto refused = [&](const std::string& body, const std::string& words) {
    SparkClient client(server_->spark_port());
    const Reply reply = client.Call(body);
    EXPECT_EQ(reply.type, sw::MessageType::kRpcFailure);
    EXPECT_NE(reply.text.find(words), std::string::npos) << reply.text;
    EXPECT_EQ(reply.text.find("right"), std::string::npos) << reply.text;
    EXPECT_TRUE(client.Closed());
  };
  absl::StatusOr<sw::AuthEngineClient> wrong =
      sw::AuthEngineClient::Create(kApp, Secret("wrong"), 2);
  absl::StatusOr<sw::AuthEngineClient> right =
      sw::AuthEngineClient::Create(kApp, Secret("right"), 2);
  ASSERT_TRUE(wrong.ok() && right.ok());
  refused(sw::EncodeAuthMessage(*wrong->Challenge()), "does not open with its secret");
  sw::AuthMessage challenge = *right->Challenge();
  // Another application's name on a challenge sealed for app-1.
  sw::AuthMessage renamed = challenge;
  renamed.app_id = "app-2";
  refused(sw::EncodeAuthMessage(renamed), "does not open with its secret");
  sw::AuthMessage cut = challenge;
  cut.ciphertext.resize(30);
  refused(sw::EncodeAuthMessage(cut), "does not open with its secret");
  const std::string whole = sw::EncodeAuthMessage(challenge);
  refused(whole.substr(0, whole.size() - 7), "AuthMessage");
  refused(whole + "x", "AuthMessage");
  {
    // An AuthMessage in the middle of a SASL exchange is not a handshake.
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(sw::EncodeSaslMessage({kApp, ""})).type, sw::MessageType::kRpcResponse);
    EXPECT_EQ(client.Call(whole).type, sw::MessageType::kRpcFailure);
    EXPECT_TRUE(client.Closed());
  }
  // A recorded challenge replayed: the server answers it with a fresh key, which the
  // replayer cannot derive, so what it sends next is no frame and closes the connection.
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(whole).type, sw::MessageType::kRpcResponse);
    client.Send(sw::EncodeRpcRequest(1, Registration()));
    EXPECT_TRUE(client.Closed());
  }
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
  // A client that authenticated but encrypts otherwise (as Spark's AES-GCM transport
  // cipher would) is closed at its first bytes.
  {
    SparkClient client(server_->spark_port());
    ASSERT_TRUE(testing::AuthenticateWithAuthEngine(client, kApp, "right", 2).ok());
    const sw::SessionKeys other{Secret(std::string(16, 'k')), std::string(16, 'i'),
                                std::string(16, 'o')};
    client.Encrypt(other);
    client.Send(sw::EncodeRpcRequest(1, Registration()));
    EXPECT_TRUE(client.Closed());
  }
  // The same bytes sent with the challenge, before its answer: the connection closes
  // at once rather than wait for more.
  {
    SparkClient client(server_->spark_port());
    client.Send(sw::EncodeRpcRequest(7, whole) + sw::EncodeRpcRequest(8, Registration()));
    std::optional<Reply> answer = client.Read();
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->type, sw::MessageType::kRpcResponse);
    const absl::Time start = absl::Now();
    EXPECT_TRUE(client.Closed());
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
  const SparkSecrets& secrets = *server_->spark_door()->secrets();
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kRefused), 6u);
  SparkClient client(server_->spark_port());
  ASSERT_TRUE(testing::AuthenticateWithAuthEngine(client, kApp, "right", 1).ok());
  EXPECT_EQ(client.Call(Registration()).type, sw::MessageType::kRpcResponse);
}

// Per-application secrets serve the AuthEngine as they serve SASL.
TEST_F(SparkProtocolTest, TheAuthEngineTakesPerApplicationSecrets) {
  StartWithSecrets("");
  WriteAppSecret(kApp, "app-1's own");
  {
    SparkClient client(server_->spark_port());
    EXPECT_TRUE(testing::AuthenticateWithAuthEngine(client, kApp, "app-1's own", 2).ok());
  }
  SparkClient client(server_->spark_port());
  absl::Status refused = testing::AuthenticateWithAuthEngine(client, "app-2", "app-1's own", 2);
  EXPECT_NE(refused.message().find("non-registered app"), std::string::npos) << refused;
  EXPECT_TRUE(client.Closed());
}

// Push-based shuffle: an executor registers its merge dir; map tasks push blocks as
// Spark's OneForOneBlockPusher does (an UploadStream whose meta is a PushBlockStream and
// whose body follows the frame); the driver finalizes and reads what was merged.
class SparkPushTest : public SparkProtocolTest {
 protected:
  void SetUp() override {
    SparkProtocolTest::SetUp();
    // The executor makes its merge dir beside its block-manager dirs, with sub dirs.
    const std::string merge = absl::StrCat(roots_.path(), "/merge_manager_1");
    ASSERT_EQ(::mkdir(merge.c_str(), 0750), 0);
    for (int i = 0; i < kSubdirs; ++i) {
      ASSERT_EQ(::mkdir(absl::StrFormat("%s/%02x", merge, i).c_str(), 0750), 0);
    }
    push_.enabled = true;
    push_.min_chunk_bytes = 4;
  }
  std::string PushRegistration() const {
    return sw::EncodeRegisterExecutor(
        {kApp,
         kExec,
         {local_dirs_, kSubdirs,
          R"(org.apache.spark.shuffle.sort.SortShuffleManager:{"mergeDir":"merge_manager_1","attemptId":"1"}}})"}});
  }
  // Pushes `block` and returns the server's answer.
  static sw::BlockPushReturnCode Push(SparkClient& client, int32_t map, int32_t reduce,
                                      const std::string& block, int32_t attempt = 1) {
    static int64_t next_id = 100;
    const int64_t id = next_id++;
    client.Send(sw::EncodeUploadStreamHeader(
                    id, sw::EncodePushBlockStream({kApp, attempt, 3, 0, map, reduce, 0}),
                    static_cast<int64_t>(block.size())) +
                block);
    std::optional<Reply> reply = client.Read();
    EXPECT_TRUE(reply.has_value());
    if (!reply.has_value()) return {};
    EXPECT_EQ(reply->type, sw::MessageType::kRpcResponse) << reply->text;
    EXPECT_EQ(reply->id, id);
    absl::StatusOr<sw::ShuffleReply> code = sw::DecodeShuffleReply(reply->body);
    EXPECT_TRUE(code.ok()) << code.status();
    return code.ok() ? std::get<sw::BlockPushReturnCode>(*code) : sw::BlockPushReturnCode{};
  }
  // Registers kApp's executor with push-based shuffle, pushes `block` as map 0's of reduce
  // 0 of shuffle 3 and finalizes that merge.
  void PushAndFinalize(SparkClient& client, const std::string& block) {
    ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
    ASSERT_EQ(Push(client, 0, 0, block).code, sw::PushReturnCode::kSuccess);
    ASSERT_EQ(client.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
              sw::MessageType::kRpcResponse);
  }
  // Registers "app-2"'s executor 0, with its own local dir and merge dir, through
  // `client`.
  void RegisterApp2(SparkClient& client) {
    const std::string other = absl::StrCat(roots_.path(), "/app2");
    for (const std::string& dir : {other, other + "/blockmgr-2", other + "/merge_manager_1"}) {
      ASSERT_EQ(::mkdir(dir.c_str(), 0750), 0) << dir;
    }
    for (int i = 0; i < kSubdirs; ++i) {
      ASSERT_EQ(::mkdir(absl::StrFormat("%s/merge_manager_1/%02x", other, i).c_str(), 0750), 0);
    }
    ASSERT_EQ(
        client
            .Call(sw::EncodeRegisterExecutor(
                {"app-2",
                 "0",
                 {{other + "/blockmgr-2"},
                  kSubdirs,
                  R"(org.apache.spark.shuffle.sort.SortShuffleManager:{"mergeDir":"merge_manager_1","attemptId":"1"})"}}))
            .type,
        sw::MessageType::kRpcResponse);
  }
  // Sends a push of `bytes` (of `block`'s size, or fewer: the rest is not sent).
  static void SendPush(SparkClient& client, const sw::PushBlockStream& push, int64_t size,
                       const std::string& bytes) {
    static int64_t next_id = 100000;
    client.Send(sw::EncodeUploadStreamHeader(next_id++, sw::EncodePushBlockStream(push), size) +
                bytes);
  }
  // The code of the next push reply `client` reads.
  static sw::PushReturnCode NextCode(SparkClient& client) {
    std::optional<Reply> reply = client.Read();
    EXPECT_TRUE(reply.has_value());
    if (!reply.has_value()) return sw::PushReturnCode::kBlockAppendCollisionDetected;
    EXPECT_EQ(reply->type, sw::MessageType::kRpcResponse) << reply->text;
    absl::StatusOr<sw::ShuffleReply> code = sw::DecodeShuffleReply(reply->body);
    EXPECT_TRUE(code.ok()) << code.status();
    return code.ok() ? std::get<sw::BlockPushReturnCode>(*code).code
                     : sw::PushReturnCode::kBlockAppendCollisionDetected;
  }
  static off_t FileSize(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
  }
  // As Spark's resolver places it: among the merge dirs of each local dir (here both
  // local dirs' siblings are the same dir, listed twice, as Spark lists it).
  std::string MergedFile(int32_t reduce, const char* suffix) const {
    const std::string merge = absl::StrCat(roots_.path(), "/merge_manager_1");
    return *sw::ExecutorFilePath({merge, merge}, kSubdirs,
                                 sw::MergedFileName(kApp, 3, 0, reduce, suffix));
  }
};

TEST_F(SparkPushTest, PushedBlocksMergeAndFinalizeSaysWhatWasMerged) {
  Start();
  SparkClient client(server_->spark_port());
  ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  // A block larger than the core's first read, so that it arrives in pieces.
  const std::string big(300000, 'b');
  EXPECT_EQ(Push(client, 0, 0, "aaaa").code, sw::PushReturnCode::kSuccess);
  EXPECT_EQ(Push(client, 1, 0, big).code, sw::PushReturnCode::kSuccess);
  EXPECT_EQ(Push(client, 2, 0, "cc").code, sw::PushReturnCode::kSuccess);
  EXPECT_EQ(Push(client, 0, 1, "dd").code, sw::PushReturnCode::kSuccess);
  EXPECT_EQ(Push(client, 0, 0, "dup!").code, sw::PushReturnCode::kSuccess);  // a retry
  // A second connection's push to the same partition, then the first's again.
  SparkClient other(server_->spark_port());
  EXPECT_EQ(Push(other, 3, 0, "ee").code, sw::PushReturnCode::kSuccess);

  const Reply finalized = client.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0}));
  ASSERT_EQ(finalized.type, sw::MessageType::kRpcResponse) << finalized.text;
  absl::StatusOr<sw::ShuffleReply> reply = sw::DecodeShuffleReply(finalized.body);
  ASSERT_TRUE(reply.ok()) << reply.status();
  const auto& statuses = std::get<sw::MergeStatuses>(*reply);
  ASSERT_EQ(statuses.reduce_ids.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    if (statuses.reduce_ids[i] == 0) {
      EXPECT_EQ(statuses.bitmaps[i], sw::Bitmap::Of({0, 1, 2, 3}));
      EXPECT_EQ(statuses.sizes[i], static_cast<int64_t>(4 + big.size() + 2 + 2));
    } else {
      EXPECT_EQ(statuses.bitmaps[i], sw::Bitmap::Of({0}));
      EXPECT_EQ(statuses.sizes[i], 2);
    }
  }
  EXPECT_TRUE(testing::ReadTextFile(MergedFile(0, "data")) == "aaaa" + big + "ccee");
  EXPECT_EQ(testing::ReadTextFile(MergedFile(1, "data")), "dd");

  // After the finalize: too late, naming the block; the connection goes on.
  const sw::BlockPushReturnCode late = Push(client, 9, 0, "late");
  EXPECT_EQ(late.code, sw::PushReturnCode::kTooLateBlockPush);
  EXPECT_EQ(late.failure_block_id, "shufflePush_3_0_9_0");
  EXPECT_EQ(client.Call(Registration()).type, sw::MessageType::kRpcResponse);
  // A former attempt's push is answered, then its connection closes, as Spark's does.
  EXPECT_EQ(Push(other, 4, 2, "old", /*attempt=*/0).code, sw::PushReturnCode::kTooOldAttemptPush);
  EXPECT_TRUE(other.Closed());
}

TEST_F(SparkPushTest, PushesOfAnotherApplicationOrTooLargeAreRefusedAndClose) {
  Start();
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
    // A block over the bound is not read: refused, and the connection closes.
    client.Send(sw::EncodeUploadStreamHeader(1, sw::EncodePushBlockStream({kApp, 1, 3, 0, 0, 0, 0}),
                                             int64_t{1} << 40));
    std::optional<Reply> reply = client.Read();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, sw::MessageType::kRpcFailure);
    EXPECT_TRUE(client.Closed());
  }
  {
    // An application never registered with push-based shuffle: drained, refused, and
    // the connection goes on.
    SparkClient client(server_->spark_port());
    client.Send(sw::EncodeUploadStreamHeader(
                    2, sw::EncodePushBlockStream({"app-other", 1, 3, 0, 0, 0, 0}), 3) +
                "xyz");
    std::optional<Reply> reply = client.Read();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, sw::MessageType::kRpcFailure);
    EXPECT_NE(reply->text.find("not registered with push-based shuffle"), std::string::npos)
        << reply->text;
    EXPECT_EQ(client.Call(Registration()).type, sw::MessageType::kRpcResponse);
  }
}

// Two pushes to one partition at once: the second waits for the first, which holds the
// partition's turn while its block arrives, and both merge, in the order they asked
// (Spark's resolver answers the second "collision" unless the first finishes first).
TEST_F(SparkPushTest, APushToABusyPartitionWaitsItsTurnAndMerges) {
  Start();
  SparkClient first(server_->spark_port());
  SparkClient second(server_->spark_port());
  ASSERT_EQ(first.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  const std::string a(200000, 'a');
  SendPush(first, {kApp, 1, 3, 0, 0, 0, 0}, static_cast<int64_t>(a.size()), a.substr(0, 1000));
  // The first holds the turn: its bytes go to the merged file as they come.
  ASSERT_TRUE(testing::WaitFor([&] { return FileSize(MergedFile(0, "data")) == 1000; }));
  second.Send(
      sw::EncodeUploadStreamHeader(8, sw::EncodePushBlockStream({kApp, 1, 3, 0, 1, 0, 0}), 2) +
      "bb");
  ASSERT_TRUE(testing::WaitFor([&] {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_waiting") == 1;
  }));
  first.Send(a.substr(1000));
  for (SparkClient* client : {&first, &second}) {
    std::optional<Reply> reply = client->Read();
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, sw::MessageType::kRpcResponse) << reply->text;
    EXPECT_EQ(std::get<sw::BlockPushReturnCode>(*sw::DecodeShuffleReply(reply->body)).code,
              sw::PushReturnCode::kSuccess);
  }
  ASSERT_EQ(first.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
            sw::MessageType::kRpcResponse);
  EXPECT_TRUE(testing::ReadTextFile(MergedFile(0, "data")) == a + "bb");
  const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_push_blocks_total", "outcome", "merged"), 2);
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_push_merged_bytes_total"),
            static_cast<double>(a.size() + 2));
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_push_waiting"), 0);
}

// Past the memory a client's waiting blocks may hold, a block waits on disk, in an
// unnamed file beside its partition, and merges in its turn; past the disk's bound too,
// it is a collision. Nothing is left beside the merged files.
TEST_F(SparkPushTest, ABlockPastTheMemoryBoundWaitsOnDisk) {
  push_.max_deferred_memory_per_client = 1000;
  push_.max_deferred_disk_per_client = 300000;
  Start();
  SparkClient first(server_->spark_port());
  SparkClient second(server_->spark_port());
  ASSERT_EQ(first.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  const std::string a(5000, 'a');
  SendPush(first, {kApp, 1, 3, 0, 0, 0, 0}, static_cast<int64_t>(a.size()), a.substr(0, 1000));
  ASSERT_TRUE(testing::WaitFor([&] { return FileSize(MergedFile(0, "data")) == 1000; }));
  // Past both bounds: a collision at once.
  EXPECT_EQ(Push(second, 1, 0, std::string(400000, 'x')).code,
            sw::PushReturnCode::kBlockAppendCollisionDetected);
  // A block of 200,000 bytes (more than one pipe's worth) and one of 500 (in memory).
  std::string b(200000, 'b');
  for (size_t i = 0; i < b.size(); i += 4096) b[i] = static_cast<char>('0' + i / 4096 % 10);
  second.Send(sw::EncodeUploadStreamHeader(8, sw::EncodePushBlockStream({kApp, 1, 3, 0, 2, 0, 0}),
                                           static_cast<int64_t>(b.size())) +
              b);
  ASSERT_TRUE(testing::WaitFor([&] {
    const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
    return testing::MetricSum(metrics, "ferry_spark_push_waiting") == 1 &&
           testing::MetricSum(metrics, "ferry_spark_push_deferred_bytes", "where", "disk") ==
               static_cast<double>(b.size());
  }));
  SparkClient third(server_->spark_port());
  third.Send(
      sw::EncodeUploadStreamHeader(9, sw::EncodePushBlockStream({kApp, 1, 3, 0, 3, 0, 0}), 500) +
      std::string(500, 'c'));
  ASSERT_TRUE(testing::WaitFor([&] {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_waiting") == 2;
  }));
  first.Send(a.substr(1000));
  for (SparkClient* client : {&first, &second, &third}) {
    std::optional<Reply> reply = client->Read();
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, sw::MessageType::kRpcResponse) << reply->text;
    EXPECT_EQ(std::get<sw::BlockPushReturnCode>(*sw::DecodeShuffleReply(reply->body)).code,
              sw::PushReturnCode::kSuccess);
  }
  ASSERT_EQ(first.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
            sw::MessageType::kRpcResponse);
  // In the order the turn was asked for.
  EXPECT_TRUE(testing::ReadTextFile(MergedFile(0, "data")) == a + b + std::string(500, 'c'));
  const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_push_deferred_total", "where", "disk"), 1);
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_push_deferred_total", "where", "memory"), 1);
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_push_deferred_bytes", "where", "disk"), 0);
  EXPECT_EQ(testing::MetricSum(metrics, "ferry_spark_push_blocks_total", "outcome", "collision"),
            1);
  // The merge dir holds the three merged files and nothing else.
  std::vector<std::string> names;
  for (int i = 0; i < kSubdirs; ++i) {
    const std::string dir = absl::StrFormat("%s/merge_manager_1/%02x", roots_.path(), i);
    ASSERT_TRUE(ForEachEntry(dir.c_str(), [&](const char* name) {
                  names.push_back(name);
                  return true;
                }).ok());
  }
  EXPECT_EQ(names.size(), 3) << absl::StrJoin(names, " ");
}

// In copy mode (--mode=copy) a pushed body is read and written, and a block that waited
// on disk is read back and written: the same merged bytes.
TEST_F(SparkPushTest, InCopyModeBlocksAreReadAndWritten) {
  mode_ = DataPlaneMode::kCopy;
  push_.max_deferred_memory_per_client = 0;  // a waiting block waits on disk
  Start();
  SparkClient first(server_->spark_port());
  SparkClient second(server_->spark_port());
  ASSERT_EQ(first.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  std::string a(300000, 'a');
  for (size_t i = 0; i < a.size(); i += 1000) a[i] = static_cast<char>('0' + i / 1000 % 10);
  const std::string b(150000, 'b');
  SendPush(first, {kApp, 1, 3, 0, 0, 0, 0}, static_cast<int64_t>(a.size()), a.substr(0, 100000));
  ASSERT_TRUE(testing::WaitFor([&] { return FileSize(MergedFile(0, "data")) == 100000; }));
  SendPush(second, {kApp, 1, 3, 0, 1, 0, 0}, static_cast<int64_t>(b.size()), b);
  ASSERT_TRUE(testing::WaitFor([&] {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_deferred_bytes", "where",
                              "disk") == static_cast<double>(b.size());
  }));
  first.Send(a.substr(100000));
  EXPECT_EQ(NextCode(first), sw::PushReturnCode::kSuccess);
  EXPECT_EQ(NextCode(second), sw::PushReturnCode::kSuccess);
  ASSERT_EQ(first.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
            sw::MessageType::kRpcResponse);
  EXPECT_TRUE(testing::ReadTextFile(MergedFile(0, "data")) == a + b);
}

// A reducer on the merger's host reads merged partitions from the disk: it asks for the
// merge dirs as the local dirs of executor "shuffle-push-merger", as of Spark's service.
TEST_F(SparkPushTest, TheMergeDirsAreTheLocalDirsOfTheShufflePushMerger) {
  Start();
  SparkClient client(server_->spark_port());
  ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  const std::string merge = absl::StrCat(roots_.path(), "/merge_manager_1");
  const Reply dirs =
      client.Call(sw::EncodeGetLocalDirsForExecutors({kApp, {sw::kShuffleMergerExecId, kExec}}));
  ASSERT_EQ(dirs.type, sw::MessageType::kRpcResponse) << dirs.text;
  std::vector<std::string> all = {merge, merge};
  all.insert(all.end(), local_dirs_.begin(), local_dirs_.end());
  EXPECT_EQ(dirs.body,
            sw::EncodeLocalDirsForExecutors({sw::kShuffleMergerExecId, kExec}, {2, 2}, all));
  const Reply other =
      client.Call(sw::EncodeGetLocalDirsForExecutors({"app-2", {sw::kShuffleMergerExecId}}));
  EXPECT_EQ(other.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(other.text.find("not registered with push-based shuffle"), std::string::npos)
      << other.text;
}

// A push that stops halfway holds its partition no longer than --spark-push-timeout:
// its connection is closed, its bytes are not merged, and the push waiting behind it
// merges.
TEST_F(SparkPushTest, AHalfSentPushCannotHoldItsPartition) {
  push_.push_timeout = absl::Milliseconds(500);
  Start();
  SparkClient stalled(server_->spark_port());
  SparkClient waiting(server_->spark_port());
  ASSERT_EQ(stalled.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  stalled.Send(
      sw::EncodeUploadStreamHeader(7, sw::EncodePushBlockStream({kApp, 1, 3, 0, 0, 0, 0}), 100000) +
      std::string(5000, 'x'));
  ASSERT_TRUE(testing::WaitFor([&] { return FileSize(MergedFile(0, "data")) == 5000; }));
  const sw::BlockPushReturnCode code = Push(waiting, 1, 0, "kept");
  EXPECT_EQ(code.code, sw::PushReturnCode::kSuccess);
  EXPECT_TRUE(stalled.Closed());
  ASSERT_EQ(waiting.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
            sw::MessageType::kRpcResponse);
  EXPECT_EQ(testing::ReadTextFile(MergedFile(0, "data")), "kept");
}

// The reduce side: a reducer reads a finalized partition's chunk bitmaps
// (MergedBlockMetaRequest) and its chunks (FetchShuffleBlockChunks, then a
// ChunkFetchRequest per chunk), as Spark's PushBasedFetchHelper does.
TEST_F(SparkPushTest, ReducersReadMergedChunksAndTheirBitmaps) {
  Start();
  SparkClient client(server_->spark_port());
  ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  const std::string big(300000, 'b');
  // With chunks of at least 4 bytes: [aaaa] [big] [cc ee].
  for (const auto& [map, block] :
       std::vector<std::pair<int32_t, std::string>>{{0, "aaaa"}, {1, big}, {2, "cc"}, {3, "ee"}}) {
    ASSERT_EQ(Push(client, map, 0, block).code, sw::PushReturnCode::kSuccess);
  }
  ASSERT_EQ(Push(client, 4, 1, "dddd").code, sw::PushReturnCode::kSuccess);
  // Before the finalize there is nothing to read.
  const Reply early =
      client.Call(sw::EncodeFetchShuffleBlockChunks({kApp, kExec, 3, 0, {0}, {{0}}}));
  EXPECT_EQ(early.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(early.text.find("not finalized"), std::string::npos) << early.text;
  ASSERT_EQ(client.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
            sw::MessageType::kRpcResponse);

  client.Send(sw::EncodeMergedBlockMetaRequest({77, kApp, 3, 0, 0}));
  std::optional<Reply> meta = client.Read();
  ASSERT_TRUE(meta.has_value());
  ASSERT_EQ(meta->type, sw::MessageType::kMergedBlockMetaSuccess) << meta->text;
  EXPECT_EQ(meta->id, 77);
  EXPECT_EQ(meta->chunk_index, 3);  // numChunks
  EXPECT_EQ(meta->body, sw::Bitmap::Of({0}).Serialize() + sw::Bitmap::Of({1}).Serialize() +
                            sw::Bitmap::Of({2, 3}).Serialize());

  const auto [stream, chunks] = StreamHandleOf(
      client.Call(sw::EncodeFetchShuffleBlockChunks({kApp, kExec, 3, 0, {0}, {{2, 0, 1, 7}}})));
  ASSERT_EQ(chunks, 4);
  const std::string expected[] = {"ccee", "aaaa", big};
  for (int i = 0; i < 3; ++i) {
    client.Send(sw::EncodeChunkFetchRequest({stream, i}));
    std::optional<Reply> chunk = client.Read();
    ASSERT_TRUE(chunk.has_value());
    ASSERT_EQ(chunk->type, sw::MessageType::kChunkFetchSuccess) << chunk->text;
    EXPECT_TRUE(chunk->body == expected[i]) << i;
  }
  // A chunk id past the partition's fails that chunk alone, naming it.
  client.Send(sw::EncodeChunkFetchRequest({stream, 3}));
  std::optional<Reply> missing = client.Read();
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->type, sw::MessageType::kChunkFetchFailure);
  EXPECT_NE(missing->text.find("shuffleChunk_3_0_0_7"), std::string::npos) << missing->text;
  // A partition with nothing merged, and another application's meta.
  EXPECT_EQ(client.Call(sw::EncodeFetchShuffleBlockChunks({kApp, kExec, 3, 0, {5}, {{0}}})).type,
            sw::MessageType::kRpcFailure);

  // Ferry's own C++ client reads the partition as Spark's reducer does.
  SparkShuffleClient ferry;
  const std::string address = absl::StrCat("127.0.0.1:", server_->spark_port());
  absl::StatusOr<std::vector<sw::Bitmap>> bitmaps = ferry.FetchMergedMeta(address, kApp, {3, 0, 0});
  ASSERT_TRUE(bitmaps.ok()) << bitmaps.status();
  EXPECT_EQ(*bitmaps, (std::vector<sw::Bitmap>{sw::Bitmap::Of({0}), sw::Bitmap::Of({1}),
                                               sw::Bitmap::Of({2, 3})}));
  BuffersSink sink(bitmaps->size());
  absl::StatusOr<SparkFetchStats> read = ferry.FetchMergedChunks(
      address, kApp, kExec, {3, 0, 0}, static_cast<int32_t>(bitmaps->size()), sink);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->blocks, 3);
  EXPECT_EQ(read->bytes, 8 + big.size());
  EXPECT_EQ(sink.blocks()[0], "aaaa");
  EXPECT_TRUE(sink.blocks()[1] == big);
  EXPECT_EQ(sink.blocks()[2], "ccee");
  const absl::Status unmerged = ferry.FetchMergedMeta(address, kApp, {3, 0, 5}).status();
  EXPECT_NE(unmerged.message().find("shuffleChunk_3_0_5"), std::string::npos) << unmerged;

  // Several partitions on one connection, their chunks numbered across them.
  BuffersSink both(4);
  std::vector<std::vector<sw::Bitmap>> metas;
  absl::StatusOr<SparkFetchStats> read_both =
      ferry.FetchMergedPartitions(address, kApp, kExec, {{3, 0, 1}, {3, 0, 0}}, both, &metas);
  ASSERT_TRUE(read_both.ok()) << read_both.status();
  EXPECT_EQ(read_both->blocks, 4);
  EXPECT_EQ(read_both->bytes, 12 + big.size());
  EXPECT_EQ(both.blocks()[0], "dddd");
  EXPECT_EQ(both.blocks()[1], "aaaa");
  EXPECT_TRUE(both.blocks()[2] == big);
  EXPECT_EQ(both.blocks()[3], "ccee");
  ASSERT_EQ(metas.size(), 2u);
  EXPECT_EQ(metas[0], std::vector<sw::Bitmap>{sw::Bitmap::Of({4})});
  EXPECT_EQ(metas[1].size(), 3u);
  BuffersSink none(4);
  const absl::Status missing_one =
      ferry.FetchMergedPartitions(address, kApp, kExec, {{3, 0, 0}, {3, 0, 5}}, none).status();
  EXPECT_NE(missing_one.message().find("shuffleChunk_3_0_5"), std::string::npos) << missing_one;
}

// A merged read costs what it asks for: a reduce id named a hundred thousand times is
// opened and its index read once, an index is read again only once it changes (8 MiB
// of zeros, a million empty chunks, named 2,000 times), and a request naming more reduce
// ids than a stream holds chunks is refused before any work.
TEST_F(SparkPushTest, AMergedReadCostsWhatItAsksFor) {
  SparkShuffleService::Options service;
  service.max_chunks_per_stream = 150000;
  Start(service);
  SparkClient client(server_->spark_port());
  ASSERT_NO_FATAL_FAILURE(PushAndFinalize(client, "merged"));
  const auto index_reads = [&] {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_index_reads_total");
  };
  const auto request = [&](int n, std::vector<int32_t> chunks) {
    return sw::EncodeFetchShuffleBlockChunks({kApp, kExec, 3, 0, std::vector<int32_t>(n, 0),
                                              std::vector<std::vector<int32_t>>(n, chunks)});
  };
  const auto [stream, chunks] = StreamHandleOf(client.Call(request(100000, {0})));
  EXPECT_EQ(chunks, 100000);
  EXPECT_EQ(index_reads(), 1);
  client.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  std::optional<Reply> chunk = client.Read();
  ASSERT_TRUE(chunk.has_value());
  ASSERT_EQ(chunk->type, sw::MessageType::kChunkFetchSuccess) << chunk->text;
  EXPECT_EQ(chunk->body, "merged");
  // Reduce ids with no chunk count as chunks: past the stream's bound, refused.
  const Reply refused = client.Call(request(150001, {}));
  EXPECT_EQ(refused.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(refused.text.find("150001 reduce ids"), std::string::npos) << refused.text;
  EXPECT_EQ(index_reads(), 1);

  // The index replaced by 8 MiB of zeros (a million empty chunks): read once more.
  {
    const std::string zeros(size_t{8} << 20, '\0');
    const std::string path = MergedFile(0, "index");
    ASSERT_EQ(::unlink(path.c_str()), 0);
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(zeros.data(), 1, zeros.size(), f), zeros.size());
    std::fclose(f);
  }
  const Reply zeros = client.Call(request(2000, {5}));
  ASSERT_EQ(zeros.type, sw::MessageType::kRpcResponse) << zeros.text;
  EXPECT_EQ(index_reads(), 2);
  EXPECT_EQ(client.Call(request(2000, {7})).type, sw::MessageType::kRpcResponse);
  EXPECT_EQ(index_reads(), 2);
}

// An application's end reaches its merges whatever says so: its registrations removed
// (ferry remove-app, YARN's marker) or its dirs deleted and swept. Its open partitions
// close, its merged files go, its finalized merges leave the state file, and the
// partitions it held are another application's to open.
TEST_F(SparkPushTest, AnApplicationsEndEndsItsMergesWhateverSaysSo) {
  TempDir state;
  state_dir_ = state.path();
  push_.max_open_partitions = 2;
  Start();
  SparkClient client(server_->spark_port());
  ASSERT_NO_FATAL_FAILURE(PushAndFinalize(client, "finalized"));
  for (int32_t reduce : {0, 1}) {
    SendPush(client, {kApp, 1, 4, 0, 0, reduce, 0}, 4, "open");
    ASSERT_EQ(NextCode(client), sw::PushReturnCode::kSuccess);
  }
  const auto open_partitions = [&] {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_open_partitions");
  };
  EXPECT_EQ(open_partitions(), 2);
  const std::string state_file = absl::StrCat(state.path(), "/spark-push-finalized");
  const auto kept = [&] { return PushMerger::CheckState(state_file).value_or("unreadable"); };
  EXPECT_EQ(kept(), absl::StrCat(state_file, ": 1 finalized merges"));
  // The other application is refused while every partition is held.
  RegisterApp2(client);
  SendPush(client, {"app-2", 1, 0, 0, 0, 0, 0}, 1, "x");
  std::optional<Reply> full = client.Read();
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->type, sw::MessageType::kRpcFailure);

  ASSERT_TRUE(
      server_->spark_door()->executors()->Remove(kApp, "", /*delete_local_dirs=*/false).ok());
  EXPECT_EQ(open_partitions(), 0);
  EXPECT_EQ(FileSize(MergedFile(0, "data")), -1);
  EXPECT_EQ(kept(), absl::StrCat(state_file, ": 0 finalized merges"));
  EXPECT_EQ(client.Call(sw::EncodeFetchShuffleBlockChunks({kApp, kExec, 3, 0, {0}, {{0}}})).type,
            sw::MessageType::kRpcFailure);
  SendPush(client, {"app-2", 1, 0, 0, 0, 0, 0}, 1, "x");
  EXPECT_EQ(NextCode(client), sw::PushReturnCode::kSuccess);
  EXPECT_EQ(open_partitions(), 1);

  // app-2's dirs deleted, as a Worker deletes an ended application's: the sweep ends it.
  std::error_code deleted;
  std::filesystem::remove_all(absl::StrCat(roots_.path(), "/app2"), deleted);
  ASSERT_FALSE(deleted) << deleted.message();
  absl::StatusOr<size_t> swept = server_->spark_door()->executors()->ForgetVanished();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 1u);
  EXPECT_EQ(open_partitions(), 0);
}

// Round six, 1: four requests of two million reduce ids took 43 s of the server's CPU
// and held every blocking worker, and another application's new executor could not
// register for 30 s. Now each costs its lookups (one partition opened once), and the
// other application's registrations and merged reads go on meanwhile.
TEST_F(SparkPushTest, MergedReadFloodsSpareAnotherApplication) {
  Start();
  SparkClient client(server_->spark_port());
  ASSERT_NO_FATAL_FAILURE(PushAndFinalize(client, "merged"));
  RegisterApp2(client);
  SendPush(client, {"app-2", 1, 0, 0, 0, 0, 0}, 1, "v");
  ASSERT_EQ(NextCode(client), sw::PushReturnCode::kSuccess);
  ASSERT_EQ(client.Call(sw::EncodeFinalizeShuffleMerge({"app-2", 1, 0, 0})).type,
            sw::MessageType::kRpcResponse);

  constexpr int kReduceIds = 500000;
  const std::string flood = sw::EncodeFetchShuffleBlockChunks(
      {kApp, kExec, 3, 0, std::vector<int32_t>(kReduceIds, 0),
       std::vector<std::vector<int32_t>>(kReduceIds, std::vector<int32_t>{})});
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  const absl::Time start = absl::Now();
  std::atomic<int> streams{0};
  std::vector<std::thread> attackers;
  for (int a = 0; a < 4; ++a) {
    attackers.emplace_back([&, a] {
      const std::string source = absl::StrCat("127.0.0.", 2 + a);
      SparkClient attacker(server_->spark_port(), source.c_str());
      for (int i = 0; i < 3; ++i) {
        if (attacker.Call(flood).type == sw::MessageType::kRpcResponse) streams++;
      }
    });
  }
  std::vector<double> victim_ms;
  const std::string other = absl::StrCat(roots_.path(), "/app2");
  for (int i = 0; i < 20; ++i) {
    SparkClient victim(server_->spark_port(), "127.0.0.9");
    const absl::Time began = absl::Now();
    const Reply registered = victim.Call(sw::EncodeRegisterExecutor(
        {"app-2",
         absl::StrCat("v", i),
         {{other + "/blockmgr-2"},
          kSubdirs,
          R"(org.apache.spark.shuffle.sort.SortShuffleManager:{"mergeDir":"merge_manager_1","attemptId":"1"})"}}));
    ASSERT_EQ(registered.type, sw::MessageType::kRpcResponse) << registered.text;
    victim.Send(sw::EncodeMergedBlockMetaRequest({7, "app-2", 0, 0, 0}));
    std::optional<Reply> meta = victim.Read();
    ASSERT_TRUE(meta.has_value());
    ASSERT_EQ(meta->type, sw::MessageType::kMergedBlockMetaSuccess) << meta->text;
    victim_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - began));
  }
  for (std::thread& attacker : attackers) attacker.join();
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  const auto cpu = [](const rusage& r) {
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  std::sort(victim_ms.begin(), victim_ms.end());
  std::printf(
      "12 requests of %d reduce ids (4 hosts at once) in %.2f s, %.2f s of CPU (server and "
      "clients), %d streams opened; the other application's registration and merged meta "
      "meanwhile: median %.2f ms, max %.2f ms\n",
      kReduceIds, absl::ToDoubleSeconds(absl::Now() - start), cpu(after) - cpu(before),
      streams.load(), victim_ms[victim_ms.size() / 2], victim_ms.back());
  EXPECT_GT(streams.load(), 0);
  EXPECT_EQ(testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_index_reads_total"), 2);
  // Was 30 s, the registration failed: the other application waited for the flood. Now
  // half of its calls are served at once; the slowest is bounded loosely, since on two
  // busy cores (a sanitizer's build, other tests beside it) one call in 20 waited 8 s
  // for CPU.
  EXPECT_LT(victim_ms[victim_ms.size() / 2], 1000);
  EXPECT_LT(victim_ms.back(), 20000);
}

// Round six, 3: zero-length pushes to 1,024 new reduce ids, a finalize, the next shuffle
// id, and so on, made the server keep 358,400 finalized partitions (407 MB) and 1,075,200
// files. Now a finalized partition keeps its reduce id, and an application's partitions
// and shuffles are bounded (--spark-push-max-app-partitions): past it pushes are refused.
TEST_F(SparkPushTest, AZeroLengthFloodIsBoundedByTheApplicationsShare) {
  push_.max_app_partitions = 5000;
  Start();
  SparkClient client(server_->spark_port());
  ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  const auto rss_kib = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (absl::StartsWith(line, "VmRSS:")) return std::stol(line.substr(6));
    }
    return 0L;
  };
  const long rss_before = rss_kib();
  int merged = 0;
  int refused = 0;
  for (int32_t shuffle = 10; shuffle < 20; ++shuffle) {
    for (int32_t reduce = 0; reduce < 1024; ++reduce) {
      SendPush(client, {kApp, 1, shuffle, 0, 0, reduce, 0}, 0, "");
    }
    for (int32_t reduce = 0; reduce < 1024; ++reduce) {
      std::optional<Reply> reply = client.Read();
      ASSERT_TRUE(reply.has_value());
      if (reply->type == sw::MessageType::kRpcResponse) ++merged;
      if (reply->type == sw::MessageType::kRpcFailure) {
        EXPECT_TRUE(absl::StrContains(reply->text, "--spark-push-max-app-partitions"))
            << reply->text;
        ++refused;
      }
    }
    ASSERT_EQ(client.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, shuffle, 0})).type,
              sw::MessageType::kRpcResponse);
  }
  size_t files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(
           absl::StrCat(roots_.path(), "/merge_manager_1"))) {
    if (entry.is_regular_file()) ++files;
  }
  std::printf(
      "10,240 zero-length pushes to new partitions, a finalize every 1,024: %d merged, "
      "%d refused, %zu files, RSS %+ld KiB (server and client)\n",
      merged, refused, files, rss_kib() - rss_before);
  // Each shuffle costs one, each partition one: 5,000 in all.
  EXPECT_LE(merged, 5000);
  EXPECT_GT(refused, 5000);
  EXPECT_LE(files, 3u * 5000);
}

// A merge finalized before ferry_server restarts is served after it: the registration
// kept in --state-dir gives it its dirs again and the state file says it is finalized.
TEST_F(SparkPushTest, AFinalizedMergeIsServedAfterARestart) {
  TempDir state;
  state_dir_ = state.path();
  Start();
  {
    SparkClient client(server_->spark_port());
    ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
    ASSERT_EQ(Push(client, 0, 0, "merged").code, sw::PushReturnCode::kSuccess);
    ASSERT_EQ(client.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
              sw::MessageType::kRpcResponse);
  }
  server_.reset();
  Start();
  SparkClient client(server_->spark_port());
  const auto [stream, chunks] = StreamHandleOf(
      client.Call(sw::EncodeFetchShuffleBlockChunks({kApp, kExec, 3, 0, {0}, {{0}}})));
  ASSERT_EQ(chunks, 1);
  client.Send(sw::EncodeChunkFetchRequest({stream, 0}));
  std::optional<Reply> chunk = client.Read();
  ASSERT_TRUE(chunk.has_value());
  ASSERT_EQ(chunk->type, sw::MessageType::kChunkFetchSuccess) << chunk->text;
  EXPECT_EQ(chunk->body, "merged");
  // Still finalized: a late push is too late, not the start of a new merge.
  EXPECT_EQ(Push(client, 1, 0, "late").code, sw::PushReturnCode::kTooLateBlockPush);
}

// The bounds of push-based shuffle, each pushed past: the memory for blocks waiting for
// a busy partition (past it a block is drained and answered "collision"), the partitions
// open at once, of one application and in all, and an application's merged bytes;
// neither an application's partitions nor its bytes stop another application's pushes.
TEST_F(SparkPushTest, EachPushBoundHoldsAndSparesTheOthers) {
  push_.max_deferred_memory_per_client = 1000;
  push_.max_deferred_disk_per_client = 0;
  push_.max_open_partitions = 4;
  push_.max_open_partitions_per_app = 3;
  push_.max_app_bytes = 300;
  Start();
  SparkClient first(server_->spark_port());
  SparkClient second(server_->spark_port());
  ASSERT_EQ(first.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);

  // A block of 2,000 bytes cannot wait in this client's 1,000 (nor on disk, where it
  // has none): drained, a collision, and its connection goes on.
  first.Send(
      sw::EncodeUploadStreamHeader(7, sw::EncodePushBlockStream({kApp, 1, 3, 0, 0, 0, 0}), 200) +
      std::string(100, 'a'));
  ASSERT_TRUE(testing::WaitFor([&] { return FileSize(MergedFile(0, "data")) == 100; }));
  EXPECT_EQ(Push(second, 1, 0, std::string(2000, 'b')).code,
            sw::PushReturnCode::kBlockAppendCollisionDetected);
  first.Send(std::string(100, 'a'));
  std::optional<Reply> done = first.Read();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(std::get<sw::BlockPushReturnCode>(*sw::DecodeShuffleReply(done->body)).code,
            sw::PushReturnCode::kSuccess);
  EXPECT_EQ(testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_blocks_total",
                               "outcome", "collision"),
            1);

  // The application's partitions open at once: two more fit its share, a fourth is
  // refused with an error (the body drained, the connection goes on), though the
  // service has room for one more.
  EXPECT_EQ(Push(second, 1, 1, "x").code, sw::PushReturnCode::kSuccess);
  EXPECT_EQ(Push(second, 1, 2, "x").code, sw::PushReturnCode::kSuccess);
  const auto refused_with = [](SparkClient& client, int64_t id, const sw::PushBlockStream& push,
                               const std::string& body, absl::string_view why) {
    client.Send(sw::EncodeUploadStreamHeader(id, sw::EncodePushBlockStream(push),
                                             static_cast<int64_t>(body.size())) +
                body);
    std::optional<Reply> refused = client.Read();
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->type, sw::MessageType::kRpcFailure);
    EXPECT_TRUE(absl::StrContains(refused->text, why)) << refused->text;
  };
  ASSERT_NO_FATAL_FAILURE(
      refused_with(second, 9, {kApp, 1, 3, 0, 1, 3, 0}, "x", "merged partitions open on"));
  // The application's bytes: 202 merged, 100 more would pass its 300.
  ASSERT_NO_FATAL_FAILURE(refused_with(second, 10, {kApp, 1, 3, 0, 2, 0, 0}, std::string(100, 'c'),
                                       "would pass its bound"));

  // Another application is held by neither: it opens the service's last partition and
  // merges more bytes than the first has room for; a partition past the service's bound
  // is refused.
  SparkClient app2(server_->spark_port());
  ASSERT_NO_FATAL_FAILURE(RegisterApp2(app2));
  app2.Send(sw::EncodeUploadStreamHeader(11, sw::EncodePushBlockStream({"app-2", 1, 3, 0, 0, 0, 0}),
                                         250) +
            std::string(250, 'd'));
  std::optional<Reply> merged = app2.Read();
  ASSERT_TRUE(merged.has_value());
  ASSERT_EQ(merged->type, sw::MessageType::kRpcResponse) << merged->text;
  EXPECT_EQ(std::get<sw::BlockPushReturnCode>(*sw::DecodeShuffleReply(merged->body)).code,
            sw::PushReturnCode::kSuccess);
  ASSERT_NO_FATAL_FAILURE(
      refused_with(app2, 12, {"app-2", 1, 3, 0, 0, 1, 0}, "e", "merged partitions are open"));
  // The first application's finalize gives its partitions back.
  ASSERT_EQ(second.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0})).type,
            sw::MessageType::kRpcResponse);
  EXPECT_EQ(testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_open_partitions"), 1);
  app2.Send(
      sw::EncodeUploadStreamHeader(13, sw::EncodePushBlockStream({"app-2", 1, 3, 0, 0, 1, 0}), 1) +
      "e");
  merged = app2.Read();
  ASSERT_TRUE(merged.has_value());
  ASSERT_EQ(merged->type, sw::MessageType::kRpcResponse) << merged->text;
  EXPECT_EQ(std::get<sw::BlockPushReturnCode>(*sw::DecodeShuffleReply(merged->body)).code,
            sw::PushReturnCode::kSuccess);
}

// A block that would leave the merge dirs' file system less than
// --spark-push-min-free-disk is refused with an error (its body drained), and the
// connection goes on.
TEST_F(SparkPushTest, ABlockThatWouldFillTheDiskIsRefusedAndTheConnectionGoesOn) {
  push_.min_free_disk = uint64_t{1} << 60;
  Start();
  SparkClient client(server_->spark_port());
  ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  client.Send(
      sw::EncodeUploadStreamHeader(7, sw::EncodePushBlockStream({kApp, 1, 3, 0, 0, 0, 0}), 5) +
      "12345");
  std::optional<Reply> refused = client.Read();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->type, sw::MessageType::kRpcFailure);
  EXPECT_TRUE(absl::StrContains(refused->text, "--spark-push-min-free-disk")) << refused->text;
  EXPECT_EQ(FileSize(MergedFile(0, "data")), 0);
  // The finalize finds nothing merged.
  const Reply statuses = client.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0}));
  EXPECT_EQ(statuses.type, sw::MessageType::kRpcResponse) << statuses.text;
}

// Round six, 4: the disk floor was checked per block against free space now, so 8
// pushes of 60 MiB at once into a 512 MiB file system with a 256 MiB floor all merged
// and left 31.9 MiB. Now the bytes admitted and not written yet count: while all 8 are
// in flight, 4 are admitted and 4 refused, and the floor holds once they are written.
TEST_F(SparkPushTest, ConcurrentPushesCannotTogetherPassTheDiskFloor) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  auto disk = testing::SmallTmpfs::Mount(roots_.path() + "/disk", 512 * kMiB);
  if (!disk.ok()) GTEST_SKIP() << disk.status();
  const std::string local = (*disk)->path() + "/blockmgr-3";
  const std::string merge = (*disk)->path() + "/merge_manager_1";
  for (const std::string& dir : {local, merge}) ASSERT_EQ(::mkdir(dir.c_str(), 0750), 0);
  for (int i = 0; i < kSubdirs; ++i) {
    ASSERT_EQ(::mkdir(absl::StrFormat("%s/%02x", merge, i).c_str(), 0750), 0);
  }
  push_.min_free_disk = 256 * kMiB;
  Start();
  SparkClient registrar(server_->spark_port());
  ASSERT_EQ(
      registrar
          .Call(sw::EncodeRegisterExecutor(
              {"app-3",
               "0",
               {{local},
                kSubdirs,
                R"(org.apache.spark.shuffle.sort.SortShuffleManager:{"mergeDir":"merge_manager_1","attemptId":"1"})"}}))
          .type,
      sw::MessageType::kRpcResponse);
  const auto metric = [&](const char* name, const char* label = nullptr,
                          const char* value = nullptr) {
    const std::vector<MetricFamilySamples> all = server_->CollectMetrics();
    return label == nullptr ? testing::MetricSum(all, name)
                            : testing::MetricSum(all, name, label, value);
  };
  constexpr int kPushes = 8;
  constexpr int64_t kBlock = 60 * kMiB;
  const std::string body(static_cast<size_t>(kBlock), 'p');
  std::vector<std::unique_ptr<SparkClient>> pushers;
  for (int i = 0; i < kPushes; ++i) {
    pushers.push_back(std::make_unique<SparkClient>(server_->spark_port()));
    // Each push's header and its first byte: admitted (or refused) and held in flight.
    SendPush(*pushers.back(), {"app-3", 1, 3, 0, 0, i, 0}, kBlock, body.substr(0, 1));
  }
  ASSERT_TRUE(testing::WaitFor([&] {
    return metric("ferry_spark_push_admitted_bytes") == 4 * kBlock &&
           metric("ferry_spark_push_blocks_total", "outcome", "refused") == 4;
  })) << metric("ferry_spark_push_admitted_bytes")
      << " bytes admitted, " << metric("ferry_spark_push_blocks_total", "outcome", "refused")
      << " refused";
  std::vector<std::thread> rest;
  std::vector<std::optional<Reply>> replies(kPushes);
  for (int i = 0; i < kPushes; ++i) {
    rest.emplace_back([&, i] {
      pushers[i]->Send(body.substr(1));
      replies[i] = pushers[i]->Read();
    });
  }
  for (std::thread& t : rest) t.join();
  int merged = 0;
  int refused = 0;
  for (const std::optional<Reply>& reply : replies) {
    ASSERT_TRUE(reply.has_value());
    if (reply->type == sw::MessageType::kRpcResponse) ++merged;
    if (reply->type == sw::MessageType::kRpcFailure &&
        absl::StrContains(reply->text, "--spark-push-min-free-disk")) {
      ++refused;
    }
  }
  struct statvfs after {};
  ASSERT_EQ(::statvfs((*disk)->path().c_str(), &after), 0);
  const uint64_t free_bytes = static_cast<uint64_t>(after.f_bavail) * after.f_frsize;
  std::printf(
      "8 concurrent 60 MiB pushes into 512 MiB with a 256 MiB floor: %d merged, %d "
      "refused, %.1f MiB free after\n",
      merged, refused, static_cast<double>(free_bytes) / kMiB);
  EXPECT_EQ(merged, 4);
  EXPECT_EQ(refused, 4);
  EXPECT_GE(free_bytes, 256 * kMiB);
  EXPECT_EQ(metric("ferry_spark_push_admitted_bytes"), 0);
}

// One client host (127.0.0.2) floods the service: blocks waiting for a partition it holds
// with a stalled push, past its memory and disk bounds, and thousands of tiny pushes on
// many connections. Another application's pushes from another host still wait in memory
// when they must, merge, and are read back.
TEST_F(SparkPushTest, AFloodFromOneHostSparesAnotherApplication) {
  push_.max_deferred_memory_per_client = 64 << 10;
  push_.max_deferred_disk_per_client = 64 << 10;
  Start();
  const uint16_t port = server_->spark_port();
  constexpr char kFlooder[] = "127.0.0.2";
  SparkClient registrar(port, kFlooder);
  ASSERT_EQ(registrar.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  SparkClient stalled(port, kFlooder);
  SendPush(stalled, {kApp, 1, 3, 0, 0, 0, 0}, 8192, std::string(100, 's'));
  ASSERT_TRUE(testing::WaitFor([&] { return FileSize(MergedFile(0, "data")) == 100; }));
  // 24 blocks of 8 KiB for the held partition, each on its own connection: 8 wait in
  // the host's 64 KiB of memory, 8 in its 64 KiB on disk, 8 are collisions.
  std::vector<std::unique_ptr<SparkClient>> waiting;
  for (int i = 0; i < 24; ++i) {
    waiting.push_back(std::make_unique<SparkClient>(port, kFlooder));
    SendPush(*waiting.back(), {kApp, 1, 3, 0, 1 + i, 0, 0}, 8192,
             std::string(8192, static_cast<char>('A' + i)));
  }
  ASSERT_TRUE(testing::WaitFor([&] {
    const std::vector<MetricFamilySamples> m = server_->CollectMetrics();
    return testing::MetricSum(m, "ferry_spark_push_deferred_bytes", "where", "memory") ==
               64 << 10 &&
           testing::MetricSum(m, "ferry_spark_push_deferred_bytes", "where", "disk") == 64 << 10 &&
           testing::MetricSum(m, "ferry_spark_push_blocks_total", "outcome", "collision") == 8;
  }));
  // 8 connections of 1,000 one-byte pushes each, all sent at once, into partitions 1-8.
  constexpr int kFloods = 8;
  constexpr int kTiny = 1000;
  std::vector<std::unique_ptr<SparkClient>> flood;
  for (int c = 0; c < kFloods; ++c) {
    flood.push_back(std::make_unique<SparkClient>(port, kFlooder));
    std::string all;
    for (int m = 0; m < kTiny; ++m) {
      all += sw::EncodeUploadStreamHeader(
                 m, sw::EncodePushBlockStream({kApp, 1, 3, 0, m, 1 + c, 0}), 1) +
             "x";
    }
    flood.back()->Send(all);
  }

  // Meanwhile app-2, from 127.0.0.1: a push holds its partition halfway, and the next
  // waits for it in memory, this host's.
  SparkClient app2(port);
  ASSERT_NO_FATAL_FAILURE(RegisterApp2(app2));
  SparkClient app2_first(port);
  SendPush(app2_first, {"app-2", 1, 3, 0, 0, 0, 0}, 4096, std::string(2048, 'a'));
  const std::string app2_data =
      *sw::ExecutorFilePath({absl::StrCat(roots_.path(), "/app2/merge_manager_1")}, kSubdirs,
                            sw::MergedFileName("app-2", 3, 0, 0, "data"));
  ASSERT_TRUE(testing::WaitFor([&] { return FileSize(app2_data) == 2048; }));
  SendPush(app2, {"app-2", 1, 3, 0, 1, 0, 0}, 4096, std::string(4096, 'b'));
  ASSERT_TRUE(testing::WaitFor([&] {
    return testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_deferred_bytes", "where",
                              "memory") == (64 << 10) + 4096;
  }));
  app2_first.Send(std::string(2048, 'a'));
  EXPECT_EQ(NextCode(app2_first), sw::PushReturnCode::kSuccess);
  EXPECT_EQ(NextCode(app2), sw::PushReturnCode::kSuccess);
  ASSERT_EQ(app2.Call(sw::EncodeFinalizeShuffleMerge({"app-2", 1, 3, 0})).type,
            sw::MessageType::kRpcResponse);
  SparkShuffleClient reader;
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::vector<sw::Bitmap>> bitmaps =
      reader.FetchMergedMeta(address, "app-2", {3, 0, 0});
  ASSERT_TRUE(bitmaps.ok()) << bitmaps.status();
  BuffersSink sink(bitmaps->size());
  ASSERT_TRUE(reader
                  .FetchMergedChunks(address, "app-2", "0", {3, 0, 0},
                                     static_cast<int32_t>(bitmaps->size()), sink)
                  .ok());
  EXPECT_TRUE(absl::StrJoin(sink.blocks(), "") == std::string(4096, 'a') + std::string(4096, 'b'));

  // Every tiny push merged.
  for (int c = 0; c < kFloods; ++c) {
    for (int m = 0; m < kTiny; ++m) {
      ASSERT_EQ(NextCode(*flood[static_cast<size_t>(c)]), sw::PushReturnCode::kSuccess)
          << c << " " << m;
    }
  }
  // The stalled push is cut when its connection closes, and the 16 blocks waiting merge.
  ::shutdown(stalled.fd(), SHUT_RDWR);
  int merged = 0;
  int collisions = 0;
  for (const std::unique_ptr<SparkClient>& client : waiting) {
    const sw::PushReturnCode code = NextCode(*client);
    merged += code == sw::PushReturnCode::kSuccess;
    collisions += code == sw::PushReturnCode::kBlockAppendCollisionDetected;
  }
  EXPECT_EQ(merged, 16);
  EXPECT_EQ(collisions, 8);
  const Reply finalized = registrar.Call(sw::EncodeFinalizeShuffleMerge({kApp, 1, 3, 0}));
  ASSERT_EQ(finalized.type, sw::MessageType::kRpcResponse) << finalized.text;
  absl::StatusOr<sw::ShuffleReply> statuses = sw::DecodeShuffleReply(finalized.body);
  ASSERT_TRUE(statuses.ok()) << statuses.status();
  const auto& merges = std::get<sw::MergeStatuses>(*statuses);
  ASSERT_EQ(merges.reduce_ids.size(), 1u + kFloods);
  for (size_t i = 0; i < merges.reduce_ids.size(); ++i) {
    EXPECT_EQ(merges.bitmaps[i].Cardinality(), merges.reduce_ids[i] == 0 ? 16u : kTiny);
    EXPECT_EQ(merges.sizes[i], merges.reduce_ids[i] == 0 ? 16 * 8192 : kTiny);
  }
  EXPECT_EQ(testing::MetricSum(server_->CollectMetrics(), "ferry_spark_push_deferred_bytes"), 0);
}

// With spark.authenticate, an application pushes into, finalizes and reads only its own
// merges: another's push is refused without its body read, and the connection closes.
TEST_F(SparkPushTest, AnAuthenticatedConnectionPushesOnlyForItsApplication) {
  StartWithSecrets("shared");
  SparkClient client(server_->spark_port());
  ASSERT_TRUE(Authenticate(client, kApp, "shared").ok());
  ASSERT_EQ(client.Call(PushRegistration()).type, sw::MessageType::kRpcResponse);
  EXPECT_EQ(Push(client, 0, 0, "mine").code, sw::PushReturnCode::kSuccess);
  const Reply finalize = client.Call(sw::EncodeFinalizeShuffleMerge({"app-other", 1, 3, 0}));
  EXPECT_EQ(finalize.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(finalize.text.find("not authorized for application app-other"), std::string::npos)
      << finalize.text;
  client.Send(sw::EncodeUploadStreamHeader(
                  5, sw::EncodePushBlockStream({"app-other", 1, 3, 0, 0, 0, 0}), 4) +
              "evil");
  std::optional<Reply> refused = client.Read();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->type, sw::MessageType::kRpcFailure);
  EXPECT_NE(refused->text.find("not authorized for application app-other"), std::string::npos)
      << refused->text;
  EXPECT_TRUE(client.Closed());
}

// A merge dir is its application's alone, as its local dirs are: an executor whose
// merge dir would be another application's local dir is refused.
TEST_F(SparkPushTest, AMergeDirThatIsAnotherApplicationsDirIsRefused) {
  Start();
  const std::string shared = absl::StrCat(roots_.path(), "/shared");
  for (const std::string& dir : {shared, shared + "/x", shared + "/blockmgr-2"}) {
    ASSERT_EQ(::mkdir(dir.c_str(), 0750), 0) << dir;
  }
  SparkClient client(server_->spark_port());
  // app-1 names shared/x as one of its local dirs.
  ASSERT_EQ(
      client.Call(sw::EncodeRegisterExecutor({kApp, kExec, {{shared + "/x"}, kSubdirs, "sort"}}))
          .type,
      sw::MessageType::kRpcResponse);
  // app-2's local dir is its own, but its merge dir, shared/x, is app-1's.
  const Reply refused = client.Call(sw::EncodeRegisterExecutor(
      {"app-2",
       "0",
       {{shared + "/blockmgr-2"},
        kSubdirs,
        R"(org.apache.spark.shuffle.sort.SortShuffleManager:{"mergeDir":"x","attemptId":"1"})"}}));
  EXPECT_EQ(refused.type, sw::MessageType::kRpcFailure);
  EXPECT_NE(refused.text.find("another application"), std::string::npos) << refused.text;
  // So app-2 has no merge dir here: its pushes are refused.
  client.Send(
      sw::EncodeUploadStreamHeader(3, sw::EncodePushBlockStream({"app-2", 1, 3, 0, 0, 0, 0}), 1) +
      "x");
  std::optional<Reply> push = client.Read();
  ASSERT_TRUE(push.has_value());
  EXPECT_EQ(push->type, sw::MessageType::kRpcFailure);
}

}  // namespace
}  // namespace ferry
