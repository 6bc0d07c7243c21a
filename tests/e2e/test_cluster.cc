#include "tests/e2e/test_cluster.h"

#include <cstdio>

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/shuffle_writer.h"

namespace ferry::testing {

std::string PartitionBytes(int32_t shuffle, int64_t map, int32_t reduce, size_t length) {
  std::string s(length, '\0');
  uint64_t x = (static_cast<uint64_t>(shuffle) << 48) ^ (static_cast<uint64_t>(map) << 20) ^
               static_cast<uint64_t>(reduce) ^ 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < length; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

absl::Status WriteSparkMapOutput(const std::vector<std::string>& local_dirs, int subdirs,
                                 int32_t shuffle, int64_t map, const std::vector<size_t>& sizes) {
  auto writer = ShuffleWriter::CreateInSparkLayout(local_dirs, subdirs, shuffle, map,
                                                   ChecksumAlgorithm::kAdler32);
  if (!writer.ok()) return writer.status();
  for (size_t r = 0; r < sizes.size(); ++r) {
    const auto reduce = static_cast<int32_t>(r);
    if (absl::Status s = writer->Write(reduce, PartitionBytes(shuffle, map, reduce, sizes[r]));
        !s.ok()) {
      return s;
    }
  }
  return writer->Commit(static_cast<int32_t>(sizes.size()));
}

void DataSet::AddMapOutput(const std::string& root, const std::string& app, int32_t shuffle,
                           int64_t map, const std::vector<size_t>& sizes,
                           ChecksumAlgorithm algorithm) {
  const std::string dir = absl::StrCat(root, "/", app);
  ::mkdir(dir.c_str(), 0755);
  auto writer = ShuffleWriter::Create(dir, shuffle, map, algorithm);
  FERRY_CHECK(writer.ok());
  for (size_t r = 0; r < sizes.size(); ++r) {
    const int32_t reduce = static_cast<int32_t>(r);
    FERRY_CHECK(writer->Write(reduce, PartitionBytes(shuffle, map, reduce, sizes[r])).ok());
  }
  FERRY_CHECK(writer->Commit(static_cast<int32_t>(sizes.size())).ok());
  outputs_[{shuffle, map}] = sizes;
}

std::string DataSet::Expected(int32_t shuffle, int64_t map, int32_t start, int32_t end) const {
  const std::vector<size_t>& sizes = outputs_.at({shuffle, map});
  std::string out;
  for (int32_t r = start; r < end; ++r) {
    out += PartitionBytes(shuffle, map, r, sizes[static_cast<size_t>(r)]);
  }
  return out;
}

std::vector<BlockLocation> DataSet::AllPartitions(const std::string& server) const {
  std::vector<BlockLocation> blocks;
  for (const auto& [key, sizes] : outputs_) {
    for (size_t r = 0; r < sizes.size(); ++r) {
      const int32_t reduce = static_cast<int32_t>(r);
      blocks.push_back({server, BlockId{key.first, key.second, reduce, reduce + 1}});
    }
  }
  return blocks;
}

std::vector<ServerConfig> AllServerConfigs() {
  return {{DataPlaneMode::kSplice, IoEngine::kInline},
          {DataPlaneMode::kCopy, IoEngine::kInline},
          {DataPlaneMode::kSplice, IoEngine::kUring},
          {DataPlaneMode::kCopy, IoEngine::kUring}};
}

std::string ConfigName(const ServerConfig& config) {
  return absl::StrCat(config.mode == DataPlaneMode::kSplice ? "Splice" : "Copy",
                      config.engine == IoEngine::kInline ? "Inline" : "Uring");
}

FerryServerOptions TestServerOptions(const std::string& data_dir, ServerConfig config) {
  FerryServerOptions options;
  options.data_dir = data_dir;
  options.data.threads = 2;
  options.connection.mode = config.mode;
  options.connection.engine = config.engine;
  options.connection.copy_buffer_bytes = size_t{256} << 10;
  return options;
}

double MetricSum(const std::vector<MetricFamilySamples>& families, const std::string& name,
                 const std::string& key, const std::string& value) {
  double sum = 0;
  for (const MetricFamilySamples& family : families) {
    if (family.name != name) continue;
    for (const MetricSample& sample : family.samples) {
      for (const auto& [k, v] : sample.labels) {
        if (k == key && v == value) sum += sample.value;
      }
    }
  }
  return sum;
}

double MetricSum(const std::vector<MetricFamilySamples>& families, const std::string& name) {
  double sum = 0;
  for (const MetricFamilySamples& family : families) {
    if (family.name != name) continue;
    for (const MetricSample& sample : family.samples) sum += sample.value;
  }
  return sum;
}

std::unique_ptr<FerryServer> StartServer(const FerryServerOptions& options) {
  auto server = FerryServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "FerryServer::Start: %s\n", server.status().ToString().c_str());
  }
  FERRY_CHECK(server.ok());
  return *std::move(server);
}

absl::Status RestartServer(std::unique_ptr<FerryServer>* server, FerryServerOptions options) {
  options.spark.address = absl::StrCat("127.0.0.1:", (*server)->spark_port());
  (*server)->Shutdown();
  server->reset();
  absl::StatusOr<std::unique_ptr<FerryServer>> restarted = FerryServer::Start(options);
  if (!restarted.ok()) {
    return absl::Status(restarted.status().code(),
                        absl::StrCat("restarting ferry_server: ", restarted.status().message()));
  }
  *server = *std::move(restarted);
  return absl::OkStatus();
}

absl::StatusOr<size_t> HandOverServer(std::unique_ptr<FerryServer>* server,
                                      const FerryServerOptions& options) {
  absl::StatusOr<HandedSockets> handed = (*server)->PrepareHandOver(absl::Seconds(10));
  if (!handed.ok()) return handed.status();
  const size_t connections = handed->connections.size();
  absl::StatusOr<std::unique_ptr<FerryServer>> next =
      FerryServer::Start(options, *std::move(handed));
  if (!next.ok()) {
    (*server)->ResumeAfterHandOver();
    return absl::Status(next.status().code(),
                        absl::StrCat("taking over from ferry_server: ", next.status().message()));
  }
  (*server)->Shutdown();
  *server = *std::move(next);
  return connections;
}

std::unique_ptr<FerryServer> StartServer(const std::string& data_dir, ServerConfig config,
                                         absl::Duration ticket_ttl, size_t pipe_bytes) {
  FerryServerOptions options = TestServerOptions(data_dir, config);
  options.data.pipe_bytes = pipe_bytes;
  options.control.ticket_ttl = ticket_ttl;
  return StartServer(options);
}

}  // namespace ferry::testing
