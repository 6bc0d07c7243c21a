// The Spark front door end to end against Spark's own client: spark-ess-fetch (Spark
// 3.5.0's ExternalBlockStoreClient and OneForOneBlockFetcher, from ../shared/spark-ess)
// registers an executor with ferry_server and fetches every block of a shuffle written
// in Spark's layout, and checks every byte against the files. Skipped, saying why, where
// spark-ess is not there.
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/control_client.h"
#include "client/shuffle_client.h"
#include "client/spark_client.h"
#include "common/shuffle_writer.h"
#include "gtest/gtest.h"
#include "server/ferry_server.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/certificate.h"
#include "tests/testing/spark_ess.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using ::ferry::testing::CommandResult;
using ::ferry::testing::ServerConfig;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-20261130233000-0000";
constexpr char kExec[] = "1";
constexpr int kSubdirs = 64;
// Spark's map ids are task attempt ids.
const std::vector<int64_t> kMaps = {1000, 1007, 1014};
// Empty partitions, one byte, a skewed one of 5 MiB, odd sizes.
const std::vector<std::vector<size_t>> kSizes = {
    {0, 1, 300000, 0, size_t{5} << 20, 17},
    {65536, 0, 0, 3, 1000, 0},
    {7, 7, 7, 7, 7, 7},
};

// A shuffle in Spark's layout under two local dirs of one executor, and a server with
// the Spark front door on over them.
class SparkLayoutTest : public ::testing::TestWithParam<ServerConfig> {
 protected:
  void SetUp() override {
    for (int k = 0; k < 2; ++k) {
      const std::string local = absl::StrCat(roots_.path(), "/local", k);
      ASSERT_EQ(::mkdir(local.c_str(), 0755), 0);
      local_dirs_.push_back(absl::StrCat(local, "/blockmgr-", kApp));
      ASSERT_EQ(::mkdir(local_dirs_.back().c_str(), 0755), 0);
    }
    for (size_t m = 0; m < kMaps.size(); ++m) {
      auto writer = ShuffleWriter::CreateInSparkLayout(local_dirs_, kSubdirs, 0, kMaps[m],
                                                       ChecksumAlgorithm::kAdler32);
      ASSERT_TRUE(writer.ok()) << writer.status();
      for (size_t r = 0; r < kSizes[m].size(); ++r) {
        ASSERT_TRUE(
            writer
                ->Write(static_cast<int32_t>(r),
                        testing::PartitionBytes(0, kMaps[m], static_cast<int32_t>(r), kSizes[m][r]))
                .ok());
      }
      ASSERT_TRUE(writer->Commit(static_cast<int32_t>(kSizes[m].size())).ok());
    }
    StartServer();
  }

  void StartServer() {
    FerryServerOptions options = testing::TestServerOptions(data_dir_.path(), GetParam());
    options.spark.address = "127.0.0.1:0";
    options.spark.executors.dir_roots = {roots_.path()};
    options.spark.executors.state_dir = state_dir_.path();
    options.spark.auth = auth_;
    options.spark.tls = tls_;
    server_ = testing::StartServer(options);
  }

  // What executor kExec of kApp registers: its local dirs.
  spark::RegisterExecutor Registration() const {
    return {
        kApp, kExec, {local_dirs_, kSubdirs, "org.apache.spark.shuffle.sort.SortShuffleManager"}};
  }
  void Register() {
    ASSERT_TRUE(server_->spark_door()->executors()->Register(Registration()).ok());
  }

  TempDir roots_;
  TempDir data_dir_;
  TempDir state_dir_;
  SparkSecrets::Options auth_;
  SparkTls::Options tls_;
  std::vector<std::string> local_dirs_;
  std::unique_ptr<FerryServer> server_;
};

// Ferry's own client reads a registered executor's blocks in place through Ferry's
// protocol: both front doors serve the same files.
TEST_P(SparkLayoutTest, FerrysClientFetchesARegisteredExecutorsBlocks) {
  Register();
  std::vector<BlockLocation> blocks;
  std::vector<std::string> expected;
  for (size_t m = 0; m < kMaps.size(); ++m) {
    for (size_t r = 0; r < kSizes[m].size(); ++r) {
      blocks.push_back({server_->control_target(),
                        {0, kMaps[m], static_cast<int32_t>(r), static_cast<int32_t>(r) + 1}});
      expected.push_back(
          testing::PartitionBytes(0, kMaps[m], static_cast<int32_t>(r), kSizes[m][r]));
    }
  }
  ShuffleClient client;
  FetchOptions options;
  options.spark_exec_id = kExec;
  absl::StatusOr<std::vector<std::string>> fetched = client.FetchToBuffers(kApp, blocks, options);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(*fetched, expected);
  // Without the executor it is Ferry's layout, where the app has nothing.
  EXPECT_EQ(client.FetchToBuffers(kApp, blocks).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(SparkLayoutTest, RemovingAnAppForgetsItsExecutorsAndCanDeleteTheirDirs) {
  Register();
  ControlClient control;
  ferry::v1::RemoveSparkAppRequest request;
  request.set_app_id(kApp);
  request.set_delete_local_dirs(true);
  absl::StatusOr<ferry::v1::RemoveSparkAppResponse> removed =
      control.RemoveSparkApp(server_->control_target(), request);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->executors_removed(), 1u);
  EXPECT_EQ(removed->local_dirs_deleted(), 2u);
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
  struct stat st;
  for (const std::string& dir : local_dirs_) EXPECT_NE(::lstat(dir.c_str(), &st), 0) << dir;
  // Gone from the state file too.
  server_->Shutdown();
  StartServer();
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
}

// Every partition of every map output, and what each holds; with `ranges`, one block
// per map output of partitions [1, 5) as well (Spark's batch ids).
std::vector<spark::ShuffleBlockId> AllBlocks(bool ranges, std::vector<std::string>* expected) {
  std::vector<spark::ShuffleBlockId> blocks;
  for (size_t m = 0; m < kMaps.size(); ++m) {
    for (size_t r = 0; r < kSizes[m].size(); ++r) {
      blocks.push_back({0, kMaps[m], static_cast<int32_t>(r), static_cast<int32_t>(r) + 1});
      expected->push_back(
          testing::PartitionBytes(0, kMaps[m], static_cast<int32_t>(r), kSizes[m][r]));
    }
  }
  if (ranges) {
    for (size_t m = 0; m < kMaps.size(); ++m) {
      blocks.push_back({0, kMaps[m], 1, 5});
      std::string range;
      for (int32_t r = 1; r < 5; ++r)
        range += testing::PartitionBytes(0, kMaps[m], r, kSizes[m][r]);
      expected->push_back(range);
    }
  }
  return blocks;
}

// Ferry's C++ client for Spark's protocol against a Spark shuffle service at `address`
// (already told about the executor): every way of fetching, every byte compared; with
// `secret`, every connection authenticates first.
// `plain`: the options of the connection's security (none by default).
void FetchEveryWay(const std::string& address, const SparkFetchOptions& plain = {}) {
  SparkShuffleClient client;
  std::vector<std::string> expected;
  const std::vector<spark::ShuffleBlockId> blocks = AllBlocks(/*ranges=*/true, &expected);
  SparkFetchOptions spread = plain;
  spread.connections = 3;
  spread.blocks_per_request = 4;
  SparkFetchOptions to_disk = plain;
  to_disk.fetch_to_disk = true;
  for (const SparkFetchOptions& options : {plain, spread, to_disk}) {
    BuffersSink sink(blocks.size());
    absl::StatusOr<SparkFetchStats> stats =
        client.Fetch(address, kApp, kExec, blocks, sink, options);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->blocks, blocks.size());
    EXPECT_EQ(sink.blocks(), expected);
  }
  // Spliced straight into files (received and decrypted, when encrypted).
  TempDir out;
  std::vector<std::string> paths;
  for (size_t i = 0; i < blocks.size(); ++i) paths.push_back(absl::StrCat(out.path(), "/", i));
  FilesSink files(paths);
  const absl::Status into_files = client.Fetch(address, kApp, kExec, blocks, files, plain).status();
  ASSERT_TRUE(into_files.ok()) << address << ": " << into_files;
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::ifstream in(paths[i], std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(got, expected[i]) << "block " << i;
  }
  // A map output that is not there fails the fetch, naming the block.
  BuffersSink sink(1);
  absl::StatusOr<SparkFetchStats> missing =
      client.Fetch(address, kApp, kExec, {{0, 4242, 0, 1}}, sink, plain);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("shuffle_0_4242_0"), std::string::npos)
      << missing.status();
}

TEST_P(SparkLayoutTest, FerrysSparkClientFetchesFromTheSparkFrontDoor) {
  const std::string address = absl::StrCat("127.0.0.1:", server_->spark_port());
  SparkShuffleClient client;
  BuffersSink sink(1);
  absl::StatusOr<SparkFetchStats> unregistered =
      client.Fetch(address, kApp, kExec, {{0, kMaps[0], 1, 2}}, sink);
  EXPECT_NE(unregistered.status().message().find("Executor is not registered"), std::string::npos)
      << unregistered.status();
  ASSERT_TRUE(client.RegisterExecutor(address, Registration()).ok());
  FetchEveryWay(address);
  // Registration refused (a dir outside the roots): the service's words come back.
  absl::Status outside = client.RegisterExecutor(
      address,
      {kApp, "2", {{"/etc"}, kSubdirs, "org.apache.spark.shuffle.sort.SortShuffleManager"}});
  EXPECT_NE(outside.message().find("is not beneath a root"), std::string::npos) << outside;
}

// The same, read by Spark 3.5.0's own client.
class SparkFrontDoorTest : public SparkLayoutTest {
 protected:
  void SetUp() override {
    std::string why;
    ess_ = testing::SparkEssDir(&why);
    if (ess_.empty()) GTEST_SKIP() << "Spark's own client is not available: " << why;
    SparkLayoutTest::SetUp();
  }

  // spark-ess-fetch of every partition of shuffle 0 from the Spark front door, with
  // `extra` flags.
  CommandResult Fetch(const std::vector<std::string>& extra,
                      const std::vector<std::string>& local_dirs = {}) {
    std::vector<std::string> maps;
    for (int64_t m : kMaps) maps.push_back(absl::StrCat(m));
    std::vector<std::string> argv = {
        absl::StrCat(ess_, "/spark-ess-fetch"),
        "--port",
        absl::StrCat(server_->spark_port()),
        "--app",
        kApp,
        "--exec-id",
        kExec,
        "--local-dirs",
        absl::StrJoin(local_dirs.empty() ? local_dirs_ : local_dirs, ","),
        "--subdirs",
        absl::StrCat(kSubdirs),
        "--shuffle",
        "0",
        "--maps",
        absl::StrJoin(maps, ","),
        "--partitions",
        absl::StrCat(kSizes[0].size()),
        "--timeout",
        "60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    absl::StatusOr<CommandResult> result = testing::RunCommand(argv, absl::Seconds(90));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  std::string ess_;
  TempDir downloads_;
};

TEST_P(SparkFrontDoorTest, SparksClientRegistersAndFetchesEveryByteEveryWay) {
  const CommandResult registered = Fetch({"--register"});
  ASSERT_EQ(registered.exit_code, 0) << registered.output;
  EXPECT_NE(registered.output.find("verified"), std::string::npos) << registered.output;
  EXPECT_EQ(server_->spark_door()->executors()->size(), 1u);
  // Batch ids (one chunk per map), the old OpenBlocks protocol, Spark's fetch-to-disk
  // path (StreamRequest), several connections, and zero-length blocks asked for anyway.
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"--batch"},
           {"--old-protocol"},
           {"--fetch-to-disk", downloads_.path()},
           {"--connections", "3", "--include-empty", "--iterations", "2"},
           {"--batch", "--request-bytes", "1"}}) {
    const CommandResult fetched = Fetch(variant);
    EXPECT_EQ(fetched.exit_code, 0) << absl::StrJoin(variant, " ") << "\n" << fetched.output;
    EXPECT_NE(fetched.output.find("OK: total 5609479 bytes"), std::string::npos)
        << absl::StrJoin(variant, " ") << "\n"
        << fetched.output;
  }
}

TEST_P(SparkFrontDoorTest, AnUnregisteredExecutorFailsEachBlockWithSparksMessage) {
  const CommandResult fetched = Fetch({});
  EXPECT_EQ(fetched.exit_code, 1) << fetched.output;
  EXPECT_NE(fetched.output.find(
                absl::StrCat("Executor is not registered (appId=", kApp, ", execId=", kExec, ")")),
            std::string::npos)
      << fetched.output;
}

TEST_P(SparkFrontDoorTest, LocalDirsOutsideTheRootsAreRefusedAtRegistration) {
  TempDir elsewhere;
  const CommandResult fetched = Fetch({"--register"}, {elsewhere.path()});
  EXPECT_NE(fetched.exit_code, 0) << fetched.output;
  EXPECT_NE(fetched.output.find("is not beneath a root this server serves"), std::string::npos)
      << fetched.output;
  EXPECT_EQ(server_->spark_door()->executors()->size(), 0u);
}

TEST_P(SparkFrontDoorTest, RegistrationsSurviveARestart) {
  ASSERT_EQ(Fetch({"--register"}).exit_code, 0);
  server_->Shutdown();
  server_.reset();
  StartServer();
  EXPECT_EQ(server_->spark_door()->executors()->size(), 1u);
  const CommandResult fetched = Fetch({"--batch"});
  EXPECT_EQ(fetched.exit_code, 0) << fetched.output;
}

// Ferry's C++ client for Spark's protocol against Spark 3.5.0's own shuffle service.
TEST_P(SparkFrontDoorTest, FerrysSparkClientFetchesFromSparksOwnService) {
  absl::StatusOr<std::unique_ptr<testing::SparkEssServer>> ess = testing::SparkEssServer::Start();
  ASSERT_TRUE(ess.ok()) << ess.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*ess)->port());
  SparkShuffleClient client;
  ASSERT_TRUE(client.RegisterExecutor(address, Registration()).ok());
  FetchEveryWay(address);
}

// spark.authenticate (SASL DIGEST-MD5, QOP auth) both ways: Spark's client against
// ferry_server with the cluster's secret, and Ferry's client against Spark's own service.
class SparkAuthTest : public SparkFrontDoorTest {
 protected:
  // Over 57 bytes, as YARN's generated secrets are: its base64 spans two of Netty's lines.
  static constexpr char kSecret[] =
      "a cluster's secret, spaces and all, long enough for two lines of base64";

  static SparkFetchOptions WithSecret(const std::string& secret, int auth_engine_version = 0) {
    SparkFetchOptions options;
    options.auth_secret = Secret(secret);
    options.auth_engine_version = auth_engine_version;
    return options;
  }
  static SparkFetchOptions Sealed(const std::string& secret) {
    SparkFetchOptions options = WithSecret(secret);
    options.sasl_encryption = true;
    return options;
  }

  // Spark's client with `mode` (its --auth-secret and --conf flags): registers over 4
  // connections, then fetches with each of `variants`; every run reads every byte.
  void FetchesEveryWay(const std::vector<std::string>& mode,
                       const std::vector<std::vector<std::string>>& variants) {
    std::vector<std::vector<std::string>> runs = {{"--register", "--connections", "4"}};
    runs.insert(runs.end(), variants.begin(), variants.end());
    for (std::vector<std::string> args : runs) {
      const std::string what = absl::StrJoin(args, " ");
      args.insert(args.end(), mode.begin(), mode.end());
      const CommandResult fetched = Fetch(args);
      EXPECT_EQ(fetched.exit_code, 0) << what << "\n" << fetched.output;
      EXPECT_NE(fetched.output.find("OK: total 5609479 bytes"), std::string::npos)
          << what << "\n"
          << fetched.output;
    }
  }

  void SetUp() override {
    auth_.secret_file = absl::StrCat(secrets_.path(), "/secret");
    std::ofstream(auth_.secret_file) << kSecret << "\n";
    SparkFrontDoorTest::SetUp();
  }

  TempDir secrets_;
};

TEST_P(SparkAuthTest, SparksClientFetchesWithTheSecretAndIsRefusedWithoutIt) {
  const CommandResult registered = Fetch({"--register", "--auth-secret", kSecret});
  ASSERT_EQ(registered.exit_code, 0) << registered.output;
  EXPECT_NE(registered.output.find("OK: total 5609479 bytes"), std::string::npos)
      << registered.output;
  // The old protocol and fetch to disk authenticate alike.
  for (const std::vector<std::string>& variant : std::vector<std::vector<std::string>>{
           {"--old-protocol", "--connections", "2"}, {"--fetch-to-disk", downloads_.path()}}) {
    std::vector<std::string> args = variant;
    args.insert(args.end(), {"--auth-secret", kSecret});
    const CommandResult fetched = Fetch(args);
    EXPECT_EQ(fetched.exit_code, 0) << absl::StrJoin(variant, " ") << "\n" << fetched.output;
    EXPECT_NE(fetched.output.find("OK: total 5609479 bytes"), std::string::npos)
        << absl::StrJoin(variant, " ") << "\n"
        << fetched.output;
  }
  EXPECT_EQ(server_->spark_door()->secrets()->handshakes(SparkSecrets::Outcome::kEncrypted), 0u);
  const CommandResult wrong = Fetch({"--auth-secret", "a guess"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("SASL authentication of application app-20261130233000-0000 failed"),
            std::string::npos)
      << wrong.output;
  const CommandResult none = Fetch({});
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("Expected SaslMessage, received something else"), std::string::npos)
      << none.output;
  // The executor the failed clients named is still the one registered.
  EXPECT_EQ(server_->spark_door()->executors()->size(), 1u);
}

// spark.authenticate.enableSaslEncryption: Spark's client negotiates auth-conf (its
// DIGEST-MD5 picks 3des) and every frame and block goes in SASL's sealed records; every
// block decrypts to the files' bytes (spark-ess-fetch checks each), in memory and to
// disk, by either protocol, over several connections.
TEST_P(SparkAuthTest, SparksClientFetchesThroughSaslEncryption) {
  FetchesEveryWay(
      {"--auth-secret", kSecret, "--conf", "spark.authenticate.enableSaslEncryption=true"},
      {{"--batch", "--include-empty"},
       {"--old-protocol", "--connections", "2"},
       {"--fetch-to-disk", downloads_.path()}});
  const SparkSecrets& secrets = *server_->spark_door()->secrets();
  EXPECT_GE(secrets.handshakes(SparkSecrets::Outcome::kEncrypted), 4u);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kAuthenticated), 0u);
  const CommandResult wrong =
      Fetch({"--auth-secret", "a guess", "--conf", "spark.authenticate.enableSaslEncryption=true"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_GE(secrets.handshakes(SparkSecrets::Outcome::kRefused), 1u);
}

// spark.network.crypto.enabled: Spark's client runs its AuthEngine (version 1, Spark
// 3.5.0's only one) and then encrypts every byte with AES-CTR; every block it reads
// decrypts to the files' bytes (spark-ess-fetch checks each), in memory and to disk, by
// either protocol, over several connections.
TEST_P(SparkAuthTest, SparksClientFetchesThroughTheAuthEngineAndAesCtr) {
  FetchesEveryWay({"--auth-secret", kSecret, "--conf", "spark.network.crypto.enabled=true"},
                  {{"--batch"}, {"--old-protocol"}, {"--fetch-to-disk", downloads_.path()}});
  const SparkSecrets& secrets = *server_->spark_door()->secrets();
  EXPECT_GE(secrets.handshakes(SparkSecrets::Outcome::kEncrypted), 4u);      // one a run at least
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kAuthenticated), 0u);  // no fallback
  EXPECT_EQ(secrets.auth_engine_sessions(1), secrets.handshakes(SparkSecrets::Outcome::kEncrypted));
  // A wrong secret: the AuthEngine is refused and the connection closed, so Spark's
  // fallback to SASL finds no connection either.
  const CommandResult wrong =
      Fetch({"--auth-secret", "a guess", "--conf", "spark.network.crypto.enabled=true"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_GE(secrets.handshakes(SparkSecrets::Outcome::kRefused), 1u);
  EXPECT_EQ(server_->spark_door()->executors()->size(), 1u);
}

TEST_P(SparkAuthTest, FerrysSparkClientAuthenticatesWithTheFrontDoor) {
  const std::string address = absl::StrCat("127.0.0.1:", server_->spark_port());
  SparkShuffleClient client;
  ASSERT_TRUE(client.RegisterExecutor(address, Registration(), WithSecret(kSecret)).ok());
  FetchEveryWay(address, WithSecret(kSecret));
  absl::Status wrong = client.RegisterExecutor(address, Registration(), WithSecret("a guess"));
  EXPECT_NE(wrong.message().find("SASL authentication of application app-20261130233000-0000 "
                                 "failed"),
            std::string::npos)
      << wrong;
}

// Ferry's client with spark.network.crypto.enabled, both AuthEngine versions, against
// the front door: every way of fetching, blocks decrypted on the way.
TEST_P(SparkAuthTest, FerrysSparkClientEncryptsWithTheFrontDoorInEitherVersion) {
  const std::string address = absl::StrCat("127.0.0.1:", server_->spark_port());
  SparkShuffleClient client;
  SparkFetchOptions options = WithSecret(kSecret);
  options.auth_engine_version = 2;
  ASSERT_TRUE(client.RegisterExecutor(address, Registration(), options).ok());
  FetchEveryWay(address, WithSecret(kSecret, 1));
  FetchEveryWay(address, WithSecret(kSecret, 2));
  const SparkSecrets& secrets = *server_->spark_door()->secrets();
  EXPECT_GT(secrets.auth_engine_sessions(1), 0u);
  EXPECT_GT(secrets.auth_engine_sessions(2), 0u);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kAuthenticated), 0u);
  options.auth_secret = Secret("a guess");
  absl::Status wrong = client.RegisterExecutor(address, Registration(), options);
  EXPECT_TRUE(absl::IsFailedPrecondition(wrong)) << wrong;
  EXPECT_NE(wrong.message().find("does not open with its secret"), std::string::npos) << wrong;
}

// Against Spark 3.5.0's own service with spark.network.crypto.enabled: its AuthEngine
// (version 1, its only one) and its AES-CTR.
TEST_P(SparkAuthTest, FerrysSparkClientEncryptsWithSparksOwnService) {
  absl::StatusOr<std::unique_ptr<testing::SparkEssServer>> ess = testing::SparkEssServer::Start(
      {"--auth-secret", kSecret, "--conf", "spark.network.crypto.enabled=true"});
  ASSERT_TRUE(ess.ok()) << ess.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*ess)->port());
  SparkShuffleClient client;
  SparkFetchOptions options = WithSecret(kSecret);
  options.auth_engine_version = 1;
  ASSERT_TRUE(client.RegisterExecutor(address, Registration(), options).ok());
  FetchEveryWay(address, WithSecret(kSecret, 1));
  options.auth_secret = Secret("a guess");
  EXPECT_FALSE(client.RegisterExecutor(address, Registration(), options).ok());
}

// Ferry's client with SASL encryption, against the front door and against Spark 3.5.0's
// own service with spark.authenticate.enableSaslEncryption (which then takes no client
// that does not encrypt: spark.network.sasl.serverAlwaysEncrypt).
TEST_P(SparkAuthTest, FerrysSparkClientSealsWithSaslEncryptionEitherWay) {
  SparkShuffleClient client;
  const std::string ferry = absl::StrCat("127.0.0.1:", server_->spark_port());
  ASSERT_TRUE(client.RegisterExecutor(ferry, Registration(), Sealed(kSecret)).ok());
  FetchEveryWay(ferry, Sealed(kSecret));
  const SparkSecrets& secrets = *server_->spark_door()->secrets();
  EXPECT_GT(secrets.handshakes(SparkSecrets::Outcome::kEncrypted), 0u);
  EXPECT_EQ(secrets.handshakes(SparkSecrets::Outcome::kAuthenticated), 0u);

  absl::StatusOr<std::unique_ptr<testing::SparkEssServer>> ess = testing::SparkEssServer::Start(
      {"--auth-secret", kSecret, "--conf", "spark.authenticate.enableSaslEncryption=true", "--conf",
       "spark.network.sasl.serverAlwaysEncrypt=true"});
  ASSERT_TRUE(ess.ok()) << ess.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*ess)->port());
  ASSERT_TRUE(client.RegisterExecutor(address, Registration(), Sealed(kSecret)).ok());
  FetchEveryWay(address, Sealed(kSecret));
  EXPECT_FALSE(client.RegisterExecutor(address, Registration(), WithSecret(kSecret)).ok());
  EXPECT_FALSE(client.RegisterExecutor(address, Registration(), Sealed("a guess")).ok());
}

TEST_P(SparkAuthTest, FerrysSparkClientAuthenticatesWithSparksOwnService) {
  absl::StatusOr<std::unique_ptr<testing::SparkEssServer>> ess =
      testing::SparkEssServer::Start({"--auth-secret", kSecret});
  ASSERT_TRUE(ess.ok()) << ess.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*ess)->port());
  SparkShuffleClient client;
  // Spark's service tells a client without the secret, or with a wrong one, in its own
  // words.
  absl::Status none = client.RegisterExecutor(address, Registration());
  EXPECT_NE(none.message().find("Expected SaslMessage"), std::string::npos) << none;
  absl::Status wrong = client.RegisterExecutor(address, Registration(), WithSecret("a guess"));
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("DIGEST-MD5"), std::string::npos) << wrong;
  ASSERT_TRUE(client.RegisterExecutor(address, Registration(), WithSecret(kSecret)).ok());
  FetchEveryWay(address, WithSecret(kSecret));
}

// TLS (Spark 4's spark.ssl.rpc.enabled) between Ferry's client and the front door, with
// spark.authenticate inside it: every way of fetching; a client that trusts another
// certificate, or speaks no TLS, is not served.
class SparkTlsTest : public SparkAuthTest {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::CertificateFiles> made =
        testing::MakeSelfSignedCertificate(certs_.path());
    ASSERT_TRUE(made.ok()) << made.status();
    cert_ = *made;
    tls_ = {cert_.cert, cert_.key};
    SparkAuthTest::SetUp();
  }

  TempDir certs_;
  testing::CertificateFiles cert_;
};

TEST_P(SparkTlsTest, FerrysSparkClientFetchesOverTls) {
  const std::string address = absl::StrCat("127.0.0.1:", server_->spark_port());
  SparkShuffleClient client;
  SparkFetchOptions options = WithSecret(kSecret);
  options.tls_trust_file = cert_.cert;
  ASSERT_TRUE(client.RegisterExecutor(address, Registration(), options).ok());
  FetchEveryWay(address, options);
  // SASL encryption over TLS is not offered (Spark 4 turns it off under TLS): a client
  // that insists is refused.
  SparkFetchOptions sealed = options;
  sealed.sasl_encryption = true;
  absl::Status refused = client.RegisterExecutor(address, Registration(), sealed);
  EXPECT_NE(refused.message().find("does not offer auth-conf"), std::string::npos) << refused;

  TempDir other;
  absl::StatusOr<testing::CertificateFiles> stranger =
      testing::MakeSelfSignedCertificate(other.path());
  ASSERT_TRUE(stranger.ok());
  options.tls_trust_file = stranger->cert;
  absl::Status distrusted = client.RegisterExecutor(address, Registration(), options);
  EXPECT_NE(distrusted.message().find("certificate verify failed"), std::string::npos)
      << distrusted;
  absl::Status plain = client.RegisterExecutor(address, Registration(), WithSecret(kSecret));
  EXPECT_FALSE(plain.ok());
  const std::vector<MetricFamilySamples> metrics = server_->CollectMetrics();
  EXPECT_GE(testing::MetricSum(metrics, "ferry_spark_tls_handshakes_total", "outcome", "failed"),
            2);
}

INSTANTIATE_TEST_SUITE_P(Modes, SparkLayoutTest,
                         ::testing::Values(ServerConfig{DataPlaneMode::kSplice, IoEngine::kInline}),
                         [](const ::testing::TestParamInfo<ServerConfig>& config) {
                           return testing::ConfigName(config.param);
                         });
INSTANTIATE_TEST_SUITE_P(Modes, SparkFrontDoorTest,
                         ::testing::Values(ServerConfig{DataPlaneMode::kSplice, IoEngine::kInline},
                                           ServerConfig{DataPlaneMode::kCopy, IoEngine::kUring}),
                         [](const ::testing::TestParamInfo<ServerConfig>& config) {
                           return testing::ConfigName(config.param);
                         });

INSTANTIATE_TEST_SUITE_P(Modes, SparkTlsTest,
                         ::testing::Values(ServerConfig{DataPlaneMode::kSplice, IoEngine::kUring}),
                         [](const ::testing::TestParamInfo<ServerConfig>& config) {
                           return testing::ConfigName(config.param);
                         });
INSTANTIATE_TEST_SUITE_P(Modes, SparkAuthTest,
                         ::testing::Values(ServerConfig{DataPlaneMode::kSplice, IoEngine::kUring}),
                         [](const ::testing::TestParamInfo<ServerConfig>& config) {
                           return testing::ConfigName(config.param);
                         });

}  // namespace
}  // namespace ferry
