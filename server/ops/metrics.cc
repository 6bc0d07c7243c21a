#include "server/ops/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/dir_entries.h"

namespace ferry {

void LatencyHistogram::Observe(absl::Duration d) {
  const double seconds = absl::ToDoubleSeconds(d);
  size_t bucket = 0;
  while (bucket < kBounds.size() && seconds > kBounds[bucket]) ++bucket;
  std::atomic<uint64_t>& c = counts_[bucket];
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  sum_ns_.store(sum_ns_.load(std::memory_order_relaxed) + static_cast<uint64_t>(ns < 0 ? 0 : ns),
                std::memory_order_relaxed);
}

std::array<uint64_t, LatencyHistogram::kBounds.size() + 1> LatencyHistogram::Counts() const {
  std::array<uint64_t, kBounds.size() + 1> out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

double LatencyHistogram::SumSeconds() const {
  return static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
}

void ThreadMetrics::Sent(FrontDoor door, uint64_t bytes, uint64_t blocks) {
  Add(bytes_[Index(door)], bytes);
  Add(blocks_[Index(door)], blocks);
}

void ThreadMetrics::Request(FrontDoor door, absl::StatusCode code, absl::Duration first_byte,
                            absl::Duration service) {
  const size_t c = static_cast<size_t>(code) < kStatusCodes
                       ? static_cast<size_t>(code)
                       : static_cast<size_t>(absl::StatusCode::kUnknown);
  Add(requests_[Index(door)][c], 1);
  if (code != absl::StatusCode::kOk) return;
  first_byte_[Index(door)].Observe(first_byte);
  service_[Index(door)].Observe(service);
}

MetricFamilySamples OneSample(std::string name, std::string help, MetricKind kind, double value) {
  return MetricFamilySamples(std::move(name), std::move(help), kind,
                             std::vector<MetricSample>{MetricSample({}, value)});
}

MetricFamilySamples SamplesBy(std::string name, std::string help, MetricKind kind,
                              const std::string& label,
                              const std::vector<std::pair<std::string, double>>& values) {
  std::vector<MetricSample> samples;
  for (const auto& [value, count] : values)
    samples.emplace_back(MetricLabels{{label, value}}, count);
  return MetricFamilySamples(std::move(name), std::move(help), kind, std::move(samples));
}

void AppendThreadMetrics(const std::vector<const ThreadMetrics*>& threads, const std::string& mode,
                         std::vector<MetricFamilySamples>* out) {
  const FrontDoor doors[] = {FrontDoor::kFerry, FrontDoor::kSpark};
  const char* door_names[] = {"ferry", "spark"};
  MetricFamilySamples bytes{"ferry_sent_bytes_total",
                            "Block bytes sent, by front door and data-plane mode.",
                            MetricKind::kCounter};
  MetricFamilySamples blocks{"ferry_sent_blocks_total", "Blocks sent, by front door and mode.",
                             MetricKind::kCounter};
  MetricFamilySamples requests{
      "ferry_requests_total",
      "Data-plane requests answered, by front door and outcome (a gRPC status code name): "
      "Ferry's FETCH requests, Spark's chunk and stream fetches and RPCs.",
      MetricKind::kCounter};
  MetricFamilySamples first_byte{
      "ferry_request_first_byte_seconds",
      "Time from a request read to its first byte sent, successful requests.",
      MetricKind::kHistogram};
  MetricFamilySamples service{"ferry_request_service_seconds",
                              "Time from a request read to its last byte sent, successful "
                              "requests.",
                              MetricKind::kHistogram};
  for (size_t d = 0; d < kFrontDoors; ++d) {
    uint64_t sent = 0, count = 0;
    std::array<uint64_t, kStatusCodes> by_code{};
    std::vector<uint64_t> fb(LatencyHistogram::kBounds.size() + 1), sv(fb.size());
    double fb_sum = 0, sv_sum = 0;
    for (const ThreadMetrics* t : threads) {
      sent += t->bytes(doors[d]);
      count += t->blocks(doors[d]);
      for (size_t c = 0; c < kStatusCodes; ++c) by_code[c] += t->requests(doors[d], c);
      const auto f = t->first_byte(doors[d]).Counts();
      const auto s = t->service(doors[d]).Counts();
      for (size_t i = 0; i < fb.size(); ++i) {
        fb[i] += f[i];
        sv[i] += s[i];
      }
      fb_sum += t->first_byte(doors[d]).SumSeconds();
      sv_sum += t->service(doors[d]).SumSeconds();
    }
    const MetricLabels labels = {{"front_door", door_names[d]}, {"mode", mode}};
    bytes.samples.emplace_back(labels, static_cast<double>(sent));
    blocks.samples.emplace_back(labels, static_cast<double>(count));
    for (size_t c = 0; c < kStatusCodes; ++c) {
      // OK always, so the door's series exists from the start; other codes once seen.
      if (by_code[c] == 0 && c != 0) continue;
      std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
      requests.samples.emplace_back(MetricLabels{{"front_door", door_names[d]}, {"code", code}},
                                    static_cast<double>(by_code[c]));
    }
    first_byte.samples.emplace_back(MetricLabels{{"front_door", door_names[d]}}, fb, fb_sum);
    service.samples.emplace_back(MetricLabels{{"front_door", door_names[d]}}, sv, sv_sum);
  }
  for (MetricFamilySamples* f : {&bytes, &blocks, &requests, &first_byte, &service}) {
    out->push_back(std::move(*f));
  }
}

size_t IoWorkerThreads() {
  size_t count = 0;
  // Unreadable: none counted.
  static_cast<void>(ForEachEntry("/proc/self/task", [&](const char* task) {
    std::ifstream comm(absl::StrCat("/proc/self/task/", task, "/comm"));
    std::string name;
    if (std::getline(comm, name) && absl::StartsWith(name, "iou-wrk")) ++count;
    return true;
  }));
  return count;
}

void AppendProcessMetrics(std::vector<MetricFamilySamples>* out) {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) {
    const auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
    };
    out->push_back(OneSample("process_cpu_seconds_total",
                             "User and system CPU time spent, in seconds.", MetricKind::kCounter,
                             seconds(usage.ru_utime) + seconds(usage.ru_stime)));
  }
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  std::ifstream statm("/proc/self/statm");
  double virtual_pages = 0;
  double resident_pages = 0;
  if (statm >> virtual_pages >> resident_pages) {
    out->push_back(OneSample("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                             MetricKind::kGauge, virtual_pages * page));
    out->push_back(OneSample("process_resident_memory_bytes", "Resident memory size in bytes.",
                             MetricKind::kGauge, resident_pages * page));
  }
  // Bounded by the descriptor limit; the listing's own descriptor is not counted.
  size_t open = 0;
  if (ForEachEntry("/proc/self/fd", [&](const char*) { return ++open > 0; }).ok()) {
    out->push_back(OneSample("process_open_fds", "Number of open file descriptors.",
                             MetricKind::kGauge, static_cast<double>(open > 0 ? open - 1 : 0)));
  }
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    out->push_back(OneSample("process_max_fds", "Maximum number of open file descriptors.",
                             MetricKind::kGauge, static_cast<double>(nofile.rlim_cur)));
  }
  // Start time: field 22 of /proc/self/stat (clock ticks after boot), after the
  // command's name, which may hold spaces and parentheses; boot time from /proc/stat.
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');
  std::ifstream proc_stat("/proc/stat");
  std::string line;
  double boot = 0;
  while (boot == 0 && std::getline(proc_stat, line)) {
    if (absl::StartsWith(line, "btime ") && !absl::SimpleAtod(line.substr(6), &boot)) boot = 0;
  }
  if (name_end != std::string::npos && boot > 0) {
    const std::vector<absl::string_view> fields =
        absl::StrSplit(absl::string_view(stat).substr(name_end + 2), ' ');
    double ticks = 0;
    // Fields 3.. follow the name: field 22 is the 20th of them.
    if (fields.size() > 19 && absl::SimpleAtod(fields[19], &ticks)) {
      out->push_back(OneSample(
          "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
          MetricKind::kGauge, boot + ticks / static_cast<double>(::sysconf(_SC_CLK_TCK))));
    }
  }
}

}  // namespace ferry
