#include "server/ops/metrics_exporter.h"

#include <atomic>
#include <exception>
#include <limits>
#include <string>
#include <string_view>

#include <civetweb.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ferry {

class MetricsExporter::Collector final : public prometheus::Collectable {
 public:
  explicit Collector(CollectFn collect) : collect_(std::move(collect)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const absl::Time start = absl::Now();
    std::vector<MetricFamilySamples> families = collect_();
    AppendProcessMetrics(&families);
    families.emplace_back("ferry_metrics_scrapes_total", "Scrapes of this endpoint.",
                          MetricKind::kCounter,
                          std::vector<MetricSample>{MetricSample(
                              {}, static_cast<double>(scrapes_.load(std::memory_order_relaxed)))});
    families.emplace_back(
        "ferry_metrics_scrape_seconds_total",
        "Time spent building the answers to scrapes: what the metrics cost.", MetricKind::kCounter,
        std::vector<MetricSample>{MetricSample(
            {}, static_cast<double>(scrape_ns_.load(std::memory_order_relaxed)) / 1e9)});
    std::vector<prometheus::MetricFamily> out;
    out.reserve(families.size());
    for (const MetricFamilySamples& f : families) out.push_back(Convert(f));
    scrapes_.fetch_add(1, std::memory_order_relaxed);
    scrape_ns_.fetch_add(static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - start)),
                         std::memory_order_relaxed);
    return out;
  }

 private:
  static prometheus::MetricFamily Convert(const MetricFamilySamples& f) {
    prometheus::MetricFamily family;
    family.name = f.name;
    family.help = f.help;
    family.type = f.kind == MetricKind::kCounter ? prometheus::MetricType::Counter
                  : f.kind == MetricKind::kGauge ? prometheus::MetricType::Gauge
                                                 : prometheus::MetricType::Histogram;
    for (const MetricSample& s : f.samples) {
      prometheus::ClientMetric m;
      for (const auto& [name, value] : s.labels) m.label.push_back({name, value});
      if (f.kind == MetricKind::kCounter) m.counter.value = s.value;
      if (f.kind == MetricKind::kGauge) m.gauge.value = s.value;
      if (f.kind == MetricKind::kHistogram) {
        uint64_t cumulative = 0;
        for (size_t i = 0; i < s.buckets.size(); ++i) {
          cumulative += s.buckets[i];
          m.histogram.bucket.push_back({cumulative, i < LatencyHistogram::kBounds.size()
                                                        ? LatencyHistogram::kBounds[i]
                                                        : std::numeric_limits<double>::infinity()});
        }
        m.histogram.sample_count = cumulative;
        m.histogram.sample_sum = s.sum;
      }
      family.metric.push_back(std::move(m));
    }
    return family;
  }

  const CollectFn collect_;
  mutable std::atomic<uint64_t> scrapes_{0};
  mutable std::atomic<uint64_t> scrape_ns_{0};
};

namespace {

// GET /metrics: the families in Prometheus's text format. Anything else is civetweb's
// 404 (no handler, no document root).
int ServeMetrics(mg_connection* connection, void* collector) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (std::string_view(request->request_method) != "GET") {
    mg_send_http_error(connection, 405, "%s", "only GET");
    return 405;
  }
  const std::string body = prometheus::TextSerializer().Serialize(
      static_cast<const prometheus::Collectable*>(collector)->Collect());
  mg_printf(connection,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  mg_write(connection, body.data(), body.size());
  return 200;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const std::string& address,
                                                                        CollectFn collect) {
  // civetweb's feature 8 is IPv6; Debian builds it without.
  if (!address.empty() && address[0] == '[' && mg_check_feature(8) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot serve metrics on ", address,
        ": the HTTP server the metrics use (civetweb, as Debian builds it) has no IPv6; "
        "give an IPv4 address (0.0.0.0:<port> for every one)"));
  }
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter);
  exporter->collector_ = std::make_shared<Collector>(std::move(collect));
  // civetweb gives each connection a worker until its request is read, and by default
  // waits 30 s for a request's headers: one idle socket would hold the only worker and
  // every scrape behind it. Several workers, each held at most kHeaderTimeout by a
  // peer that never finishes its request.
  const std::string threads = std::to_string(kMetricsThreads);
  const std::string timeout = std::to_string(absl::ToInt64Milliseconds(kHeaderTimeout));
  const char* options[] = {"listening_ports",    address.c_str(), "num_threads", threads.c_str(),
                           "request_timeout_ms", timeout.c_str(), nullptr};
  mg_callbacks callbacks{};
  // civetweb's own messages stay out of the log; the error below names the address.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  exporter->context_ = mg_start(&callbacks, nullptr, options);
  if (exporter->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  }
  mg_set_request_handler(exporter->context_, "/metrics$", ServeMetrics, exporter->collector_.get());
  mg_server_port ports[4] = {};
  const int n = mg_get_server_ports(exporter->context_, 4, ports);
  if (n <= 0) return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  exporter->port_ = static_cast<uint16_t>(ports[0].port);
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  if (context_ != nullptr) mg_stop(context_);
}

}  // namespace ferry
