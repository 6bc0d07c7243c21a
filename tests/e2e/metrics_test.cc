// ferry_server's Prometheus metrics end to end: a fetch through the data plane shows in
// /metrics, and a real Prometheus (Debian's, started by the test with a scrape config
// for the server) reports through its own query API that the byte counter rose by the
// bytes fetched.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/shuffle_client.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "server/ferry_server.h"
#include "server/ops/metrics_exporter.h"
#include "tests/e2e/test_cluster.h"
#include "tests/testing/certificate.h"
#include "tests/testing/command.h"
#include "tests/testing/http_get.h"
#include "tests/testing/loopback.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace ferry {
namespace {

using ::ferry::testing::DataSet;
using ::ferry::testing::TempDir;

constexpr char kApp[] = "app-metrics";
constexpr char kPrometheus[] = "/usr/bin/prometheus";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The port in Prometheus's `msg="Listening on" address=127.0.0.1:PORT` log line, once it
// is written (bounded: 60 s); 0 if it never is.
uint16_t ListeningPort(const std::string& log) {
  constexpr char kLine[] = "msg=\"Listening on\" address=127.0.0.1:";
  uint32_t port = 0;
  testing::WaitFor(
      [&] {
        const std::string text = ReadAll(log);
        const size_t at = text.find(kLine);
        if (at == std::string::npos) return false;
        const size_t start = at + sizeof(kLine) - 1;
        const size_t end = text.find_first_not_of("0123456789", start);
        return end != std::string::npos &&
               absl::SimpleAtoi(text.substr(start, end - start), &port) && port > 0 && port < 65536;
      },
      absl::Seconds(60));
  return port > 0 && port < 65536 ? static_cast<uint16_t>(port) : 0;
}

// The value of the sample `line_prefix` ("name{labels}") in Prometheus's text format.
double Sample(const std::string& text, const std::string& line_prefix) {
  const size_t at = text.find("\n" + line_prefix + " ");
  if (at == std::string::npos) return -1;
  const size_t start = at + 1 + line_prefix.size() + 1;
  double value = -1;
  EXPECT_TRUE(absl::SimpleAtod(text.substr(start, text.find('\n', start) - start), &value));
  return value;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_.AddMapOutput(dir_.path(), kApp, 0, 0, {1000, 0, 300000, 7});
    data_.AddMapOutput(dir_.path(), kApp, 0, 1, {65536, 1, 2, 3});
    FerryServerOptions options = testing::TestServerOptions(dir_.path(), {});
    options.metrics_address = "127.0.0.1:0";
    server_ = testing::StartServer(options);
    ASSERT_NE(server_->metrics_port(), 0);
  }

  // Fetches every block; returns the bytes.
  uint64_t FetchAll() {
    const std::vector<BlockLocation> blocks = data_.AllPartitions(server_->control_target());
    ShuffleClient client;
    absl::StatusOr<std::vector<std::string>> fetched = client.FetchToBuffers(kApp, blocks);
    EXPECT_TRUE(fetched.ok()) << fetched.status();
    uint64_t bytes = 0;
    if (fetched.ok()) {
      for (const std::string& b : *fetched) bytes += b.size();
    }
    return bytes;
  }

  TempDir dir_;
  DataSet data_;
  std::unique_ptr<FerryServer> server_;
};

TEST_F(MetricsTest, AFetchShowsInTheExposition) {
  const uint64_t bytes = FetchAll();
  ASSERT_EQ(bytes, 1000u + 300000 + 7 + 65536 + 1 + 2 + 3);
  absl::StatusOr<std::string> text = testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(Sample(*text, "ferry_sent_bytes_total{front_door=\"ferry\",mode=\"splice\"}"),
            static_cast<double>(bytes));
  EXPECT_EQ(Sample(*text, "ferry_sent_blocks_total{front_door=\"ferry\",mode=\"splice\"}"), 8);
  EXPECT_GE(Sample(*text, "ferry_requests_total{front_door=\"ferry\",code=\"OK\"}"), 1);
  EXPECT_GE(Sample(*text, "ferry_request_service_seconds_count{front_door=\"ferry\"}"), 1);
  EXPECT_EQ(Sample(*text, "ferry_map_output_cache_entries"), 2);
  EXPECT_GE(Sample(*text, "ferry_connections_accepted_total"), 1);
  EXPECT_EQ(Sample(*text, "ferry_draining"), 0);
  EXPECT_NE(text->find("ferry_build_info{"), std::string::npos);
  EXPECT_GE(Sample(*text, "ferry_metrics_scrapes_total"), 0);
  // The process's own, as Prometheus's client libraries name them; no prometheus-cpp
  // series of its own (exposer_*, a summary in microseconds).
  EXPECT_GT(Sample(*text, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Sample(*text, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(Sample(*text, "process_open_fds"), 3);
  EXPECT_GE(Sample(*text, "process_max_fds"), Sample(*text, "process_open_fds"));
  const double started = Sample(*text, "process_start_time_seconds");
  EXPECT_LE(started, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) + 1);
  EXPECT_GT(started, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - 3600);
  EXPECT_EQ(text->find("exposer_"), std::string::npos);
  // /metrics only, and only GET.
  EXPECT_FALSE(testing::HttpGet(server_->metrics_port(), "/other").ok());
}

// The metric families in docs/operations.md's metrics table: the names in backticks of
// its first column, labels dropped.
std::set<std::string> DocumentedFamilies() {
  std::set<std::string> names;
  const std::string text = ReadAll("docs/operations.md");
  const size_t begin = text.find("\n## Metrics\n");
  if (begin == std::string::npos) return names;
  std::istringstream doc(text.substr(begin, text.find("\n## ", begin + 1) - begin));
  for (std::string line; std::getline(doc, line);) {
    if (!absl::StartsWith(line, "| `")) continue;
    const std::string first = line.substr(2, line.find(" |", 2) - 2);
    std::vector<std::string> parts = absl::StrSplit(first, '`');
    for (size_t i = 1; i < parts.size(); i += 2) {  // the quoted ones
      names.insert(parts[i].substr(0, parts[i].find('{')));
    }
  }
  return names;
}

// docs/operations.md names every family a server with both front doors, spark.authenticate,
// TLS and push-based shuffle exports, and no other: a metric added or renamed without its
// line fails here.
TEST_F(MetricsTest, OperationsDocListsEveryMetricTheServerExports) {
  const std::set<std::string> documented = DocumentedFamilies();
  ASSERT_GT(documented.size(), 20u) << "docs/operations.md's metrics table was not found";
  TempDir secrets;
  FerryServerOptions options = testing::TestServerOptions(dir_.path(), {});
  options.metrics_address = "127.0.0.1:0";
  options.spark.address = "127.0.0.1:0";
  options.spark.executors.dir_roots = {secrets.path()};
  options.spark.auth.secret_file = secrets.path() + "/secret";
  std::ofstream(options.spark.auth.secret_file) << "a-secret";
  absl::StatusOr<testing::CertificateFiles> made =
      testing::MakeSelfSignedCertificate(secrets.path());
  ASSERT_TRUE(made.ok()) << made.status();
  options.spark.tls.cert_file = made->cert;
  options.spark.tls.key_file = made->key;
  options.spark.push.enabled = true;
  std::unique_ptr<FerryServer> server = testing::StartServer(options);
  absl::StatusOr<std::string> page = testing::HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  std::set<std::string> exported;
  std::istringstream text(*page);
  for (std::string line; std::getline(text, line);) {
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() >= 3 && words[0] == "#" && words[1] == "TYPE") exported.insert(words[2]);
  }
  for (const std::string& name : exported) {
    EXPECT_EQ(documented.count(name), 1u) << name << " is exported but not in docs/operations.md";
  }
  for (const std::string& name : documented) {
    EXPECT_EQ(exported.count(name), 1u) << name << " is in docs/operations.md but not exported";
  }
}

// A connection that sent a request line and never finished its headers holds one of the
// exporter's workers: three such, more than one worker's worth, and a scrape still
// answers at once.
TEST_F(MetricsTest, IdleConnectionsDoNotStallScrapes) {
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(testing::ConnectLoopback(server_->metrics_port()));
    const std::string line = "GET /metrics HTTP/1.1\r\n";
    ASSERT_EQ(::send(idle.back().get(), line.data(), line.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(line.size()));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> text = testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_LT(absl::Now() - start, kHeaderTimeout);
  EXPECT_NE(text->find("ferry_build_info{"), std::string::npos);
}

TEST_F(MetricsTest, PrometheusScrapesTheByteCounter) {
  if (::access(kPrometheus, X_OK) != 0) {
    GTEST_SKIP() << kPrometheus << " is missing (scripts/setup installs Debian's prometheus)";
  }
  TempDir prom;
  const std::string config = absl::StrCat(prom.path(), "/prometheus.yml");
  {
    std::ofstream out(config);
    out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        << "scrape_configs:\n  - job_name: ferry\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << server_->metrics_port() << "']\n";
  }
  const std::string log = absl::StrCat(prom.path(), "/prometheus.log");
  pid_t pid = -1;
  {
    UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(log_fd.valid());
    // Port 0: Prometheus binds a free port itself and names it in its log.
    absl::StatusOr<pid_t> started =
        testing::Spawn({kPrometheus, absl::StrCat("--config.file=", config),
                        absl::StrCat("--storage.tsdb.path=", prom.path(), "/data"),
                        "--web.listen-address=127.0.0.1:0"},
                       log_fd.get());
    ASSERT_TRUE(started.ok()) << started.status();
    pid = *started;
  }
  const uint16_t port = ListeningPort(log);
  if (port == 0) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
    FAIL() << "Prometheus named no port it listens on within 60 s; its log: " << ReadAll(log);
  }
  const uint64_t bytes = FetchAll();
  // Prometheus's own answer, once it has scraped after the fetch (bounded: 60 s).
  const std::string query =
      "/api/v1/query?query=sum(ferry_sent_bytes_total%7Bfront_door%3D%22ferry%22%7D)";
  std::string last;
  double seen = -1;
  testing::WaitFor(
      [&] {
        absl::StatusOr<std::string> answer = testing::HttpGet(port, query);
        if (!answer.ok()) {
          last = std::string(answer.status().message());
          return false;
        }
        last = *answer;
        // {"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[t,"N"]}]}}
        const size_t value = last.find("\"value\":[");
        const size_t open = value == std::string::npos ? value : last.find(",\"", value);
        const size_t close = open == std::string::npos ? open : last.find('"', open + 2);
        if (close != std::string::npos) {
          (void)absl::SimpleAtod(last.substr(open + 2, close - open - 2), &seen);
        }
        return seen == static_cast<double>(bytes);
      },
      absl::Seconds(60));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(seen, static_cast<double>(bytes)) << "Prometheus answered: " << last;
}

}  // namespace
}  // namespace ferry
