// The control plane's answers and errors, and serving a Spark-format fixture written
// without Ferry's writer.
#include <sys/stat.h>

#include <cstdlib>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_cluster.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-7";

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_.AddMapOutput(dir_.path(), kApp, 2, 10, {5, 6, 7});
    data_.AddMapOutput(dir_.path(), kApp, 2, 11, {1});
    data_.AddMapOutput(dir_.path(), kApp, 4, 3, {0, 0}, ChecksumAlgorithm::kNone);
    server_ = testing::StartServer(dir_.path(), {});
  }
  absl::Status Open(const std::string& app, BlockId block) {
    return client_.control().OpenStream(server_->control_target(), app, {block}).status();
  }

  TempDir dir_;
  DataSet data_;
  std::unique_ptr<FerryServer> server_;
  ShuffleClient client_;
};

TEST_F(ControlPlaneTest, OpenStreamDescribesEachBlock) {
  auto handle = client_.control().OpenStream(server_->control_target(), kApp,
                                             {{2, 10, 0, 3}, {2, 11, 0, 1}, {4, 3, 1, 2}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(handle->ticket().size(), 16u);
  EXPECT_EQ(handle->data_port(), server_->data_port());
  ASSERT_EQ(handle->blocks_size(), 3);
  EXPECT_EQ(handle->blocks(0).length(), 18u);
  EXPECT_EQ(handle->blocks(0).checksum_algorithm(), ferry::v1::CRC32C);
  ASSERT_EQ(handle->blocks(0).partitions_size(), 3);
  EXPECT_EQ(handle->blocks(0).partitions(1).length(), 6u);
  EXPECT_EQ(handle->blocks(0).partitions(1).checksum(),
            Checksum::Of(ChecksumAlgorithm::kCrc32c, data_.Expected(2, 10, 1, 2)));
  EXPECT_EQ(handle->blocks(2).length(), 0u);
  EXPECT_EQ(handle->blocks(2).checksum_algorithm(), ferry::v1::CHECKSUM_NONE);
  EXPECT_GT(handle->expires_unix_ms(), absl::ToUnixMillis(absl::Now()));
}

TEST_F(ControlPlaneTest, SecondServerOnEitherPortFailsToStartAndTheFirstKeepsServing) {
  // Sharing a port would split clients between two servers, each refusing the other's
  // tickets; a second server must fail instead, naming the port.
  FerryServerOptions same_data = testing::TestServerOptions(dir_.path(), {});
  same_data.data_address = absl::StrCat("127.0.0.1:", server_->data_port());
  auto second = FerryServer::Start(same_data);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(absl::StrCat(":", server_->data_port())),
            std::string::npos)
      << second.status();

  FerryServerOptions same_control = testing::TestServerOptions(dir_.path(), {});
  same_control.control_address = absl::StrCat("127.0.0.1:", server_->control_port());
  second = FerryServer::Start(same_control);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(absl::StrCat(":", server_->control_port())),
            std::string::npos)
      << second.status();

  // Every call and every data connection still reaches the first server.
  for (int i = 0; i < 8; ++i) {
    auto fetched = client_.FetchToBuffers(kApp, {{server_->control_target(), {2, 10, 0, 3}}});
    ASSERT_TRUE(fetched.ok()) << fetched.status();
    EXPECT_EQ((*fetched)[0], data_.Expected(2, 10, 0, 3));
  }
}

// gRPC's standard health service: SERVING while the server runs, and not once it has
// begun to drain.
TEST_F(ControlPlaneTest, HealthIsServingUntilADrainBegins) {
  absl::StatusOr<bool> serving = client_.control().CheckHealth(server_->control_target());
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  const std::string target = server_->control_target();
  server_->Shutdown(absl::Seconds(1));
  absl::StatusOr<bool> after = client_.control().CheckHealth(target);
  EXPECT_TRUE(!after.ok() || !*after);
}

// Server reflection: what standard gRPC tooling (grpcurl, grpc_cli) asks first. The
// request is reflection's ListServices, written as its protobuf bytes (field 7, empty
// string) over a generic bidirectional call, since Debian ships no reflection stubs.
TEST_F(ControlPlaneTest, ReflectionListsTheService) {
  auto channel = grpc::CreateChannel(server_->control_target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  auto step = [&cq](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
    return cq.AsyncNext(&got, &ok, deadline) == grpc::CompletionQueue::GOT_EVENT &&
           got == reinterpret_cast<void*>(tag) && ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  grpc::Slice request("\x3a\x00", 2);
  grpc::ByteBuffer request_buffer(&request, 1);
  call->Write(request_buffer, reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_NE(bytes.find("ferry.v1.Ferry"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  context.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  (void)step(4);
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(ControlPlaneTest, TicketsAreDistinct) {
  auto a = client_.control().OpenStream(server_->control_target(), kApp, {{2, 10, 0, 1}});
  auto b = client_.control().OpenStream(server_->control_target(), kApp, {{2, 10, 0, 1}});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->ticket(), b->ticket());
}

TEST_F(ControlPlaneTest, UnknownAppShuffleOrMapIsNotFoundNamingIt) {
  absl::Status s = Open("app-nope", {2, 10, 0, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("app-nope"), std::string::npos) << s;
  s = Open(kApp, {3, 10, 0, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("shuffle 3"), std::string::npos) << s;
  s = Open(kApp, {2, 99, 0, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("map output 99"), std::string::npos) << s;
  EXPECT_NE(s.message().find(server_->control_target()), std::string::npos) << s;
}

TEST_F(ControlPlaneTest, MalformedAppIdsAreInvalidArgument) {
  for (const std::string& app :
       {std::string(""), std::string(".."), std::string("../etc"), std::string("a/b"),
        std::string("app 1"), std::string(129, 'a'), std::string("app\n")}) {
    EXPECT_EQ(Open(app, {2, 10, 0, 1}).code(), absl::StatusCode::kInvalidArgument) << app;
  }
  EXPECT_TRUE(Open(std::string(128, 'a'), {2, 10, 0, 1}).code() == absl::StatusCode::kNotFound);
}

TEST_F(ControlPlaneTest, BadReduceRangesAreInvalidArgument) {
  EXPECT_EQ(Open(kApp, {2, 10, 1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Open(kApp, {2, 10, 2, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Open(kApp, {2, 10, -1, 1}).code(), absl::StatusCode::kInvalidArgument);
  absl::Status past = Open(kApp, {2, 10, 0, 4});
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("3 partitions"), std::string::npos) << past;
}

TEST_F(ControlPlaneTest, EmptyOpenStreamIsInvalidArgument) {
  auto handle = client_.control().OpenStream(server_->control_target(), kApp, {});
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ControlPlaneTest, CloseStreamReportsWhetherItWasOpen) {
  auto handle = client_.control().OpenStream(server_->control_target(), kApp, {{2, 10, 0, 1}});
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(server_->tickets().size(), 1u);
  EXPECT_TRUE(client_.control().CloseStream(server_->control_target(), handle->ticket()).ok());
  EXPECT_EQ(server_->tickets().size(), 0u);
  EXPECT_EQ(client_.control().CloseStream(server_->control_target(), "short").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ControlPlaneTest, ListShufflesDescribesTheApp) {
  auto list = client_.control().ListShuffles(server_->control_target(), kApp);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->shuffles_size(), 2);
  EXPECT_EQ(list->shuffles(0).shuffle_id(), 2);
  ASSERT_EQ(list->shuffles(0).map_outputs_size(), 2);
  EXPECT_EQ(list->shuffles(0).map_outputs(0).map_id(), 10);
  EXPECT_EQ(list->shuffles(0).map_outputs(0).partitions(), 3);
  EXPECT_EQ(list->shuffles(0).map_outputs(0).data_bytes(), 18u);
  EXPECT_EQ(list->shuffles(1).shuffle_id(), 4);
  EXPECT_EQ(client_.control().ListShuffles(server_->control_target(), "ghost").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ControlPlaneTest, ServerInfoReportsTheDataPlane) {
  auto info = client_.control().GetServerInfo(server_->control_target());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->data_port(), server_->data_port());
  EXPECT_EQ(info->mode(), ferry::v1::SPLICE);
  EXPECT_EQ(info->data_threads(), 2u);
  EXPECT_EQ(info->io_engine(), "inline");
  EXPECT_FALSE(info->version().empty());
}

TEST(SparkFixtureTest, ServesSparkWrittenFilesWithAdler32AndCrc32Checksums) {
  TempDir dir;
  const std::string app_dir = absl::StrCat(dir.path(), "/spark-app");
  const std::string cmd = absl::StrCat("python3 tests/e2e/make_spark_fixture.py '", app_dir, "'");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto server = testing::StartServer(dir.path(), {});
  ShuffleClient client;
  const std::vector<std::pair<int64_t, std::vector<size_t>>> maps = {
      {11, {0, 1, 5000, 0, 70000, 3}}, {12, {65536, 0, 0, 1, 250000}}};
  std::vector<BlockLocation> blocks;
  std::vector<std::string> expected;
  for (const auto& [map_id, sizes] : maps) {
    for (size_t r = 0; r < sizes.size(); ++r) {
      const int32_t reduce = static_cast<int32_t>(r);
      blocks.push_back({server->control_target(), {7, map_id, reduce, reduce + 1}});
      std::string bytes(sizes[r], '\0');
      for (size_t i = 0; i < sizes[r]; ++i) {
        bytes[i] = static_cast<char>((map_id * 131 + reduce * 7 + static_cast<int64_t>(i)) % 251);
      }
      expected.push_back(std::move(bytes));
    }
  }
  // A batch-fetched segment across the ADLER32 map's partitions, verified per partition.
  blocks.push_back({server->control_target(), {7, 11, 1, 5}});
  expected.push_back(expected[1] + expected[2] + expected[3] + expected[4]);

  auto handle = client.control().OpenStream(server->control_target(), "spark-app",
                                            {{7, 11, 0, 1}, {7, 12, 0, 1}});
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(handle->blocks(0).checksum_algorithm(), ferry::v1::ADLER32);
  EXPECT_EQ(handle->blocks(1).checksum_algorithm(), ferry::v1::CRC32);

  auto fetched = client.FetchToBuffers("spark-app", blocks);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  for (size_t i = 0; i < blocks.size(); ++i) EXPECT_TRUE((*fetched)[i] == expected[i]) << i;
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(ControlPlaneAuthTest, CallsWithoutTheTokenAreUnauthenticated) {
  TempDir dir;
  DataSet data;
  data.AddMapOutput(dir.path(), kApp, 0, 0, {10});
  FerryServerOptions options;
  options.data_dir = dir.path();
  options.control.auth_token = Secret("s3cret-token");
  auto server = FerryServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->control_target();

  ShuffleClient anonymous;
  EXPECT_EQ(anonymous.control().GetServerInfo(target).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous.control().OpenStream(target, kApp, {{0, 0, 0, 1}}).status().code(),
            absl::StatusCode::kUnauthenticated);
  ShuffleClient wrong(absl::Seconds(30), Secret("s3cret-tokeX"));
  EXPECT_EQ(wrong.control().ListShuffles(target, kApp).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*server)->tickets().size(), 0u);

  ShuffleClient client(absl::Seconds(30), Secret("s3cret-token"));
  auto fetched = client.FetchToBuffers(kApp, {{target, {0, 0, 0, 1}}});
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[0], data.Expected(0, 0, 0, 1));
}

// A CA and a server certificate for 127.0.0.1 it signed, made with Debian's openssl
// (scripts/setup installs it) in `dir`: ca.pem, server.pem, server.key. Returns false
// (with the tool's output in the failure) if openssl fails.
bool MakeCertificates(const std::string& dir, const std::string& ca_name) {
  const std::string log = dir + "/openssl.log";
  const std::string script = absl::StrCat(
      "set -e; cd '", dir, "'; exec >'", log, "' 2>&1; ",
      "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext; ",
      "/usr/bin/openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout ca.key -out ca.pem -days 2 -subj /CN=",
      ca_name, "; ",
      "/usr/bin/openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout server.key -out server.csr -subj /CN=127.0.0.1; ",
      "/usr/bin/openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-out server.pem -days 2 -extfile san.ext");
  const int rc = std::system(("bash -c \"" + script + "\"").c_str());
  EXPECT_EQ(rc, 0) << "openssl failed; see " << log;
  return rc == 0;
}

std::string Slurp(const std::string& path) {
  auto pem = ReadPemFile(path);
  EXPECT_TRUE(pem.ok()) << pem.status();
  return pem.ok() ? std::string(pem->view()) : "";
}

TEST(ControlPlaneTlsTest, TlsServerAnswersOnlyClientsThatTrustItsCertificate) {
  TempDir dir;
  TempDir other;
  ASSERT_TRUE(MakeCertificates(dir.path(), "ferry-test-ca"));
  ASSERT_TRUE(MakeCertificates(other.path(), "some-other-ca"));
  DataSet data;
  const std::string data_dir = dir.path() + "/data";
  ASSERT_EQ(::mkdir(data_dir.c_str(), 0755), 0);
  data.AddMapOutput(data_dir, kApp, 0, 0, {1000, 70000});
  FerryServerOptions options;
  options.data_dir = data_dir;
  options.tls_cert_chain = Slurp(dir.path() + "/server.pem");
  options.tls_private_key = Secret(Slurp(dir.path() + "/server.key"));
  auto server = FerryServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->control_target();

  // A client that trusts the CA fetches through the TLS control plane, every byte.
  ControlClientOptions trust;
  trust.tls_root_certs = Slurp(dir.path() + "/ca.pem");
  ShuffleClient trusting(trust);
  auto fetched = trusting.FetchToBuffers(kApp, {{target, {0, 0, 0, 1}}, {target, {0, 0, 1, 2}}});
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ((*fetched)[0], data.Expected(0, 0, 0, 1));
  EXPECT_EQ((*fetched)[1], data.Expected(0, 0, 1, 2));

  // Plaintext, and TLS that trusts another CA, get no answer and open no stream.
  ShuffleClient plaintext(absl::Seconds(3));
  EXPECT_EQ(plaintext.control().GetServerInfo(target).status().code(),
            absl::StatusCode::kUnavailable);
  ControlClientOptions distrust;
  distrust.rpc_timeout = absl::Seconds(3);
  distrust.tls_root_certs = Slurp(other.path() + "/ca.pem");
  ShuffleClient distrusting(distrust);
  const absl::Status refused =
      distrusting.control().OpenStream(target, kApp, {{0, 0, 0, 1}}).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_EQ((*server)->tickets().size(), 0u);
}

TEST(ControlPlaneTlsTest, ACertificateWithoutItsKeyIsRejected) {
  TempDir dir;
  ASSERT_TRUE(MakeCertificates(dir.path(), "ferry-test-ca"));
  FerryServerOptions options;
  options.data_dir = dir.path();
  options.tls_cert_chain = Slurp(dir.path() + "/server.pem");
  EXPECT_EQ(FerryServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadPemFile(dir.path() + "/san.ext").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ControlPlaneLimitsTest, OpenStreamsPastTheLimitAreResourceExhausted) {
  TempDir dir;
  DataSet data;
  data.AddMapOutput(dir.path(), kApp, 0, 0, {10});
  FerryServerOptions options;
  options.data_dir = dir.path();
  options.tickets.max_streams = 2;
  auto server = FerryServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ControlClient control;
  const std::string target = (*server)->control_target();
  auto a = control.OpenStream(target, kApp, {{0, 0, 0, 1}});
  auto b = control.OpenStream(target, kApp, {{0, 0, 0, 1}});
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = control.OpenStream(target, kApp, {{0, 0, 0, 1}});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("retry later"), std::string::npos);
  ASSERT_TRUE(control.CloseStream(target, a->ticket()).ok());
  EXPECT_TRUE(control.OpenStream(target, kApp, {{0, 0, 0, 1}}).ok());
}

}  // namespace
}  // namespace ferry
