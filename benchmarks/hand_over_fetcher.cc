// hand_over_fetcher: reducers fetching one block at a time from a Spark shuffle service
// while it is upgraded, for benchmarks/hand_over. Each worker fetches one partition of
// the registered executor's map output on a new connection (Ferry's Spark client), over
// and over for --seconds; a fetch that fails is tried again at once (a refused connect
// after 10 ms), and its latency runs from its first try to its success. Prints one JSON
// line: fetches, failed tries (each of which costs a Spark reducer a retry, 5 s by
// default: spark.shuffle.io.retryWait), latency p50/p99/max, and the longest pause: the
// longest time in which no worker completed a fetch.
//
//   hand_over_fetcher --address=127.0.0.1:7337 --app=app-1 --exec-id=1 --shuffle=3
//                     --map=1000 --partitions=4 --workers=4 --seconds=12
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/block_sink.h"
#include "client/spark_client.h"
#include "common/flag_names.h"

ABSL_FLAG(std::string, address, "127.0.0.1:7337", "host:port of the shuffle service.");
ABSL_FLAG(std::string, app, "app-1", "Application id.");
ABSL_FLAG(std::string, exec_id, "1", "Executor id.");
ABSL_FLAG(int, shuffle, 3, "Shuffle id.");
ABSL_FLAG(int64_t, map, 1000, "Map id.");
ABSL_FLAG(int, partitions, 4, "Partitions of the map output; workers fetch them in turn.");
ABSL_FLAG(int, workers, 4, "Fetching threads.");
ABSL_FLAG(double, seconds, 12, "How long to fetch.");

namespace {

struct Done {
  absl::Time at;
  absl::Duration latency;
};

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

int main(int argc, char** argv) {
  ferry::ParseFlags(argc, argv);
  const std::string address = absl::GetFlag(FLAGS_address);
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::mutex mu;
  std::vector<Done> done;
  uint64_t failed_tries = 0;
  std::string last_error;
  std::vector<std::thread> workers;
  for (int w = 0; w < absl::GetFlag(FLAGS_workers); ++w) {
    workers.emplace_back([&, w] {
      ferry::SparkShuffleClient client;
      ferry::SparkFetchOptions options;
      options.io_timeout = absl::Seconds(10);
      std::vector<Done> mine;
      uint64_t mine_failed = 0;
      std::string error;
      for (int i = 0; absl::Now() < end; ++i) {
        const int32_t reduce = (w + i) % absl::GetFlag(FLAGS_partitions);
        const std::vector<ferry::spark::ShuffleBlockId> block = {
            {absl::GetFlag(FLAGS_shuffle), absl::GetFlag(FLAGS_map), reduce, reduce + 1}};
        const absl::Time first = absl::Now();
        // Bounded: the fetch gives up with the run.
        while (absl::Now() < end + absl::Seconds(30)) {
          ferry::DiscardSink sink;
          absl::StatusOr<ferry::SparkFetchStats> got =
              client.Fetch(address, absl::GetFlag(FLAGS_app), absl::GetFlag(FLAGS_exec_id), block,
                           sink, options);
          if (got.ok()) {
            const absl::Time now = absl::Now();
            mine.push_back({now, now - first});
            break;
          }
          ++mine_failed;
          error = std::string(got.status().message());
          absl::SleepFor(absl::Milliseconds(10));
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      done.insert(done.end(), mine.begin(), mine.end());
      failed_tries += mine_failed;
      if (!error.empty()) last_error = error;
    });
  }
  for (std::thread& t : workers) t.join();
  if (done.empty()) {
    std::fprintf(stderr, "hand_over_fetcher: no fetch completed: %s\n", last_error.c_str());
    return 1;
  }
  std::sort(done.begin(), done.end(), [](const Done& a, const Done& b) { return a.at < b.at; });
  absl::Duration pause;
  for (size_t i = 1; i < done.size(); ++i) pause = std::max(pause, done[i].at - done[i - 1].at);
  std::vector<absl::Duration> latencies;
  for (const Done& d : done) latencies.push_back(d.latency);
  std::sort(latencies.begin(), latencies.end());
  const auto at = [&](double q) {
    return latencies[std::min(latencies.size() - 1, static_cast<size_t>(q * latencies.size()))];
  };
  std::string escaped;
  for (char c : last_error.substr(0, 200)) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  std::printf(
      "{\"fetches\": %zu, \"failed_tries\": %llu, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
      "\"max_ms\": %.3f, \"longest_pause_ms\": %.3f, \"last_error\": \"%s\"}\n",
      done.size(), static_cast<unsigned long long>(failed_tries), Ms(at(0.5)), Ms(at(0.99)),
      Ms(latencies.back()), Ms(pause), escaped.c_str());
  return 0;
}
