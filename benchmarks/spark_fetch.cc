// spark_fetch: Ferry's C++ client for Spark's shuffle protocol (client/spark_client.h)
// as a reader for benchmarks/spark_peers, beside Spark's own spark-ess-fetch: fetches
// every partition of a shuffle from a Spark shuffle service (Spark's own or Ferry's
// front door) into a DiscardSink, several times, and prints GB/s. --by-reducer: the
// blocks in the order reducers ask for them (each partition from every map output in
// turn), not map output by map output. --merged: push-based shuffle's merged partitions
// instead (for each partition its meta, then every chunk), for benchmarks/push_merge.
//
//   spark_fetch --address=127.0.0.1:7337 --app=APP --exec-id=0 --shuffle=0
//               --maps=0,1,2 --partitions=8 [--batch | --by-reducer | --merged]
//               [--connections=1] [--blocks-per-request=64] [--fetch-to-disk] [--iterations=3]
//               [--register --local-dirs=D1,D2 --subdirs=64] [--auth-secret-file=F
//               [--auth-engine-version=1|2]]
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/flag_names.h"

ABSL_FLAG(std::string, address, "127.0.0.1:7337", "host:port of the shuffle service.");
ABSL_FLAG(std::string, app, "app-0", "Application id.");
ABSL_FLAG(std::string, exec_id, "0", "Executor id.");
ABSL_FLAG(int, shuffle, 0, "Shuffle id.");
ABSL_FLAG(std::string, maps, "0", "Comma-separated map ids.");
ABSL_FLAG(int, partitions, 1, "Reduce partitions per map output.");
ABSL_FLAG(bool, batch, false, "One batch id per map output (all its partitions).");
ABSL_FLAG(bool, by_reducer, false,
          "Blocks ordered as reducers ask for them: partition 0 of every map output, then "
          "partition 1, ...");
ABSL_FLAG(bool, merged, false,
          "Read push-based shuffle's merged partitions 0 .. partitions-1 of the shuffle's "
          "merge 0 (MergedBlockMetaRequest, then FetchShuffleBlockChunks of every chunk) "
          "on one connection; --maps is not used.");
ABSL_FLAG(int, connections, 1, "Connections to the service.");
ABSL_FLAG(int, blocks_per_request, 64, "Blocks per FetchShuffleBlocks.");
ABSL_FLAG(bool, fetch_to_disk, false, "StreamRequest instead of ChunkFetchRequest.");
ABSL_FLAG(int, iterations, 3, "Fetches of the whole shuffle.");
ABSL_FLAG(bool, register_executor, false, "Send RegisterExecutor first.");
ABSL_FLAG(std::string, local_dirs, "", "--register-executor: the executor's local dirs.");
ABSL_FLAG(int, subdirs, 64, "--register-executor: subdirectories per local dir.");
ABSL_FLAG(std::string, auth_secret_file, "",
          "spark.authenticate: a file holding the application's secret; every connection "
          "authenticates with it first (SASL).");
ABSL_FLAG(bool, sasl_encryption, false,
          "With --auth-secret-file and SASL: ask for SASL encryption (QOP auth-conf, "
          "spark.authenticate.enableSaslEncryption); every byte is then sealed.");
ABSL_FLAG(int, auth_engine_version, 0,
          "With --auth-secret-file: authenticate with Spark's AuthEngine of this version "
          "(1 or 2) and encrypt with AES-CTR (spark.network.crypto.enabled); 0: SASL.");

namespace {

// Every merged partition, read once as a reducer reads it: its meta (the chunks'
// bitmaps), then its chunks, all on one connection. Prints the same lines as the block
// fetch.
int FetchMerged(ferry::SparkShuffleClient& client, const std::string& address,
                const std::string& app, const std::string& exec, int shuffle, int partitions,
                const ferry::SparkFetchOptions& options) {
  std::vector<ferry::SparkMergedPartition> merged;
  for (int r = 0; r < partitions; ++r) merged.push_back({shuffle, 0, r});
  const absl::Time start = absl::Now();
  ferry::DiscardSink sink;
  absl::StatusOr<ferry::SparkFetchStats> read =
      client.FetchMergedPartitions(address, app, exec, merged, sink, nullptr, options);
  if (!read.ok()) {
    std::fprintf(stderr, "spark_fetch: merged partitions: %s\n", read.status().ToString().c_str());
    return 1;
  }
  const uint64_t bytes = read->bytes, chunks = read->blocks;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("iteration 1: %llu chunks, %llu bytes, %.3f s, %.3f GB/s\n",
              static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(bytes),
              seconds, static_cast<double>(bytes) / seconds / 1e9);
  std::printf(
      "OK: total %llu bytes per iteration, best %.3f GB/s over 1 iteration(s), 1 "
      "connection(s)\n",
      static_cast<unsigned long long>(bytes), static_cast<double>(bytes) / seconds / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ferry::ParseFlags(argc, argv);
  const std::string address = absl::GetFlag(FLAGS_address);
  const std::string app = absl::GetFlag(FLAGS_app);
  const std::string exec = absl::GetFlag(FLAGS_exec_id);
  ferry::SparkShuffleClient client;
  ferry::SparkFetchOptions options;
  if (const std::string path = absl::GetFlag(FLAGS_auth_secret_file); !path.empty()) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line) || line.empty()) {
      std::fprintf(stderr, "spark_fetch: no secret in %s\n", path.c_str());
      return 2;
    }
    options.auth_secret = ferry::Secret(std::move(line));
  }
  options.auth_engine_version = absl::GetFlag(FLAGS_auth_engine_version);
  options.sasl_encryption = absl::GetFlag(FLAGS_sasl_encryption);
  if (absl::GetFlag(FLAGS_register_executor)) {
    const std::vector<std::string> dirs = absl::StrSplit(absl::GetFlag(FLAGS_local_dirs), ',');
    absl::Status registered = client.RegisterExecutor(
        address,
        {app,
         exec,
         {dirs, absl::GetFlag(FLAGS_subdirs), "org.apache.spark.shuffle.sort.SortShuffleManager"}},
        options);
    if (!registered.ok()) {
      std::fprintf(stderr, "spark_fetch: %s\n", registered.ToString().c_str());
      return 1;
    }
  }
  const int partitions = absl::GetFlag(FLAGS_partitions);
  const int shuffle = absl::GetFlag(FLAGS_shuffle);
  if (absl::GetFlag(FLAGS_merged))
    return FetchMerged(client, address, app, exec, shuffle, partitions, options);
  std::vector<int64_t> maps;
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_maps), ',')) {
    int64_t map = 0;
    if (!absl::SimpleAtoi(m, &map)) {
      std::fprintf(stderr, "spark_fetch: bad map id '%s'\n", std::string(m).c_str());
      return 2;
    }
    maps.push_back(map);
  }
  std::vector<ferry::spark::ShuffleBlockId> blocks;
  if (absl::GetFlag(FLAGS_batch)) {
    for (const int64_t map : maps) blocks.push_back({shuffle, map, 0, partitions});
  } else if (absl::GetFlag(FLAGS_by_reducer)) {
    for (int r = 0; r < partitions; ++r) {
      for (const int64_t map : maps) blocks.push_back({shuffle, map, r, r + 1});
    }
  } else {
    for (const int64_t map : maps) {
      for (int r = 0; r < partitions; ++r) blocks.push_back({shuffle, map, r, r + 1});
    }
  }
  options.connections = absl::GetFlag(FLAGS_connections);
  options.blocks_per_request = static_cast<size_t>(absl::GetFlag(FLAGS_blocks_per_request));
  options.fetch_to_disk = absl::GetFlag(FLAGS_fetch_to_disk);
  double best = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < absl::GetFlag(FLAGS_iterations); ++i) {
    ferry::DiscardSink sink;
    absl::StatusOr<ferry::SparkFetchStats> stats =
        client.Fetch(address, app, exec, blocks, sink, options);
    if (!stats.ok()) {
      std::fprintf(stderr, "spark_fetch: %s\n", stats.status().ToString().c_str());
      return 1;
    }
    bytes = stats->bytes;
    const double gbps =
        static_cast<double>(stats->bytes) / absl::ToDoubleSeconds(stats->elapsed) / 1e9;
    std::printf("iteration %d: %llu blocks, %llu bytes, %.3f s, %.3f GB/s\n", i + 1,
                static_cast<unsigned long long>(stats->blocks),
                static_cast<unsigned long long>(stats->bytes),
                absl::ToDoubleSeconds(stats->elapsed), gbps);
    best = std::max(best, gbps);
  }
  std::printf(
      "OK: total %llu bytes per iteration, best %.3f GB/s over %d iteration(s), %d "
      "connection(s)\n",
      static_cast<unsigned long long>(bytes), best, absl::GetFlag(FLAGS_iterations),
      options.connections);
  return 0;
}
