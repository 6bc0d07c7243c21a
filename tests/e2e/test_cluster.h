// A shuffle data set written with ShuffleWriter and in-process Ferry servers over it:
// real files, a real gRPC server, a real data plane on 127.0.0.1.
#ifndef FERRY_TESTS_E2E_TEST_CLUSTER_H_
#define FERRY_TESTS_E2E_TEST_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "client/shuffle_client.h"
#include "server/ferry_server.h"
#include "tests/testing/temp_dir.h"

namespace ferry::testing {

// Deterministic pseudo-random bytes for (shuffle, map, reduce).
std::string PartitionBytes(int32_t shuffle, int64_t map, int32_t reduce, size_t length);

// Writes map output `map` of `shuffle` in a Spark executor's layout beneath `local_dirs`
// (`subdirs` each), partition r holding PartitionBytes(shuffle, map, r, sizes[r]), with
// an ADLER32 checksum file, as Spark's sort shuffle does.
absl::Status WriteSparkMapOutput(const std::vector<std::string>& local_dirs, int subdirs,
                                 int32_t shuffle, int64_t map, const std::vector<size_t>& sizes);

class DataSet {
 public:
  // Writes one map output of `app` under `root`: partition r has sizes[r] bytes.
  void AddMapOutput(const std::string& root, const std::string& app, int32_t shuffle, int64_t map,
                    const std::vector<size_t>& sizes,
                    ChecksumAlgorithm algorithm = ChecksumAlgorithm::kCrc32c);
  // The bytes of reduce partitions [start, end) of a map output written here.
  std::string Expected(int32_t shuffle, int64_t map, int32_t start, int32_t end) const;
  // Every partition of every map output, one block each, at `server`.
  std::vector<BlockLocation> AllPartitions(const std::string& server) const;

 private:
  // (shuffle, map) -> partition sizes.
  std::map<std::pair<int32_t, int64_t>, std::vector<size_t>> outputs_;
};

// A data-plane configuration the end-to-end suites run under.
struct ServerConfig {
  DataPlaneMode mode = DataPlaneMode::kSplice;
  IoEngine engine = IoEngine::kInline;
};

// Every mode x engine, for INSTANTIATE_TEST_SUITE_P.
std::vector<ServerConfig> AllServerConfigs();
// "SpliceInline", "CopyUring", ...: a test-name suffix.
std::string ConfigName(const ServerConfig& config);

// The options the suites serve `data_dir` with under `config`: 2 threads, 1 MiB pipes,
// 256 KiB copy buffers, loopback ports the kernel picks.
FerryServerOptions TestServerOptions(const std::string& data_dir, ServerConfig config);
// Starts a FerryServer (CHECK-fails on error).
std::unique_ptr<FerryServer> StartServer(const FerryServerOptions& options);
// Stops *server and starts it again with `options` on its Spark port (its state dir, if
// `options` has one, gives back what it kept). *server is null if the start fails.
absl::Status RestartServer(std::unique_ptr<FerryServer>* server, FerryServerOptions options);
// Hands *server's sockets and state over to a new FerryServer started with `options`, as
// ferry_server --take-over does (without the hand-over socket between two processes):
// the old one releases its connections, the new one starts on its sockets and state
// files, and the old one stops. Returns how many connections went over. On an error the
// old server serves again.
absl::StatusOr<size_t> HandOverServer(std::unique_ptr<FerryServer>* server,
                                      const FerryServerOptions& options);

// The sum of metric `name`'s samples labelled `key`=`value` (CollectMetrics()).
double MetricSum(const std::vector<MetricFamilySamples>& families, const std::string& name,
                 const std::string& key, const std::string& value);
// The sum of all of metric `name`'s samples (one, for a metric without labels).
double MetricSum(const std::vector<MetricFamilySamples>& families, const std::string& name);
// Starts a FerryServer over `data_dir` (CHECK-fails on error).
std::unique_ptr<FerryServer> StartServer(const std::string& data_dir, ServerConfig config,
                                         absl::Duration ticket_ttl = absl::Minutes(10),
                                         size_t pipe_bytes = size_t{1} << 20);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_E2E_TEST_CLUSTER_H_
