// What ferry_server counts, for Prometheus (--metrics-address).
//
// The data plane's counters are per thread (ThreadMetrics): each is written only by the
// thread that owns it, with plain relaxed loads and stores on its own cache lines, so
// nothing on the per-block path is shared or locked. A scrape reads every thread's
// counters and sums them. Every other family is declared once, in a list beside the part
// that counts it (stats.h), and exported by its AppendMetrics; the server concatenates
// them. Names and units follow Prometheus's conventions (`_total`,
// `_seconds`, `_bytes`); docs/operations.md lists them, and metrics_test checks it.
#ifndef FERRY_SERVER_OPS_METRICS_H_
#define FERRY_SERVER_OPS_METRICS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ferry {

// The data plane's front doors.
enum class FrontDoor { kFerry = 0, kSpark = 1 };
inline constexpr size_t kFrontDoors = 2;
inline constexpr size_t kStatusCodes = 17;  // absl::StatusCode 0..16

// Latencies in fixed buckets (seconds: 100 us to 10 s).
class LatencyHistogram {
 public:
  static constexpr std::array<double, 11> kBounds = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05,
                                                     0.1,    0.5,    1,     5,     10};
  // Only from the owning thread.
  void Observe(absl::Duration d);
  // Any thread: counts per bucket (not cumulative; the last is above every bound), and
  // the sum in seconds.
  std::array<uint64_t, kBounds.size() + 1> Counts() const;
  double SumSeconds() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// One data-plane thread's counters.
class alignas(64) ThreadMetrics {
 public:
  // Only from the owning thread.
  void Sent(FrontDoor door, uint64_t bytes, uint64_t blocks);
  // A request answered (or failed) with `code`: Ferry's FETCH, Spark's chunk or stream
  // fetch or RPC. `first_byte`: from the request read to its first byte sent;
  // `service`: to its last.
  void Request(FrontDoor door, absl::StatusCode code, absl::Duration first_byte,
               absl::Duration service);

  // Any thread.
  uint64_t bytes(FrontDoor door) const { return Get(bytes_[Index(door)]); }
  uint64_t blocks(FrontDoor door) const { return Get(blocks_[Index(door)]); }
  uint64_t requests(FrontDoor door, size_t code) const { return Get(requests_[Index(door)][code]); }
  const LatencyHistogram& first_byte(FrontDoor door) const { return first_byte_[Index(door)]; }
  const LatencyHistogram& service(FrontDoor door) const { return service_[Index(door)]; }

 private:
  static size_t Index(FrontDoor door) { return static_cast<size_t>(door); }
  static uint64_t Get(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }
  // One writer: a load and a store, no locked instruction.
  static void Add(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> bytes_[kFrontDoors] = {};
  std::atomic<uint64_t> blocks_[kFrontDoors] = {};
  std::atomic<uint64_t> requests_[kFrontDoors][kStatusCodes] = {};
  LatencyHistogram first_byte_[kFrontDoors];
  LatencyHistogram service_[kFrontDoors];
};

// The samples of one metric family, for a scrape.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;
struct MetricSample {
  // A counter's or gauge's value.
  MetricSample(MetricLabels l, double v) : labels(std::move(l)), value(v) {}
  // A histogram's per-bucket counts (LatencyHistogram's bounds, then +Inf) and sum.
  MetricSample(MetricLabels l, std::vector<uint64_t> b, double s)
      : labels(std::move(l)), buckets(std::move(b)), sum(s) {}
  MetricLabels labels;
  double value = 0;
  std::vector<uint64_t> buckets;
  double sum = 0;
};
enum class MetricKind { kCounter, kGauge, kHistogram };
struct MetricFamilySamples {
  MetricFamilySamples(std::string n, std::string h, MetricKind k, std::vector<MetricSample> s = {})
      : name(std::move(n)), help(std::move(h)), kind(k), samples(std::move(s)) {}
  std::string name;
  std::string help;
  MetricKind kind;
  std::vector<MetricSample> samples;
};

// The shapes of a family (stats.h builds its families with them).
//
// A family of one unlabelled sample.
MetricFamilySamples OneSample(std::string name, std::string help, MetricKind kind, double value);
// A family with a sample per value of `label`.
MetricFamilySamples SamplesBy(std::string name, std::string help, MetricKind kind,
                              const std::string& label,
                              const std::vector<std::pair<std::string, double>>& values);

// Threads' own counters of a whole data plane, summed by front door.
void AppendThreadMetrics(const std::vector<const ThreadMetrics*>& threads, const std::string& mode,
                         std::vector<MetricFamilySamples>* out);

// io_uring worker threads (io-wq) of this process now.
size_t IoWorkerThreads();

// The process's own, named as Prometheus's client libraries name them (so dashboards
// made for any exporter work): process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds. From getrusage, getrlimit and /proc/self; a value that
// cannot be read is left out.
void AppendProcessMetrics(std::vector<MetricFamilySamples>* out);

}  // namespace ferry

#endif  // FERRY_SERVER_OPS_METRICS_H_
