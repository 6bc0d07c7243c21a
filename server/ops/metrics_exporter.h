// MetricsExporter: serves the server's metrics at http://<address>/metrics in
// Prometheus's text format (prometheus-cpp's serializer, over civetweb as Debian builds
// it). Each scrape calls the collect function the exporter was started with; the
// exporter adds the process's own metrics (process_*) and what scrapes themselves cost
// (ferry_metrics_scrapes_total, ferry_metrics_scrape_seconds_total).
#ifndef FERRY_SERVER_OPS_METRICS_EXPORTER_H_
#define FERRY_SERVER_OPS_METRICS_EXPORTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/ops/metrics.h"

struct mg_context;

namespace ferry {

// The exporter's HTTP workers, and how long one waits for a request's headers (and for
// each read and write after them): a peer can stall scrapes only by holding all the
// workers, and each for at most this long.
inline constexpr int kMetricsThreads = 8;
inline constexpr absl::Duration kHeaderTimeout = absl::Seconds(2);

class MetricsExporter {
 public:
  using CollectFn = std::function<std::vector<MetricFamilySamples>()>;
  // Listens on `address` ("host:port"; port 0 picks one). `collect` runs on the
  // exporter's threads and must outlive the exporter.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const std::string& address,
                                                                CollectFn collect);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  uint16_t port() const { return port_; }

 private:
  class Collector;
  MetricsExporter() = default;
  std::shared_ptr<Collector> collector_;
  mg_context* context_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace ferry

#endif  // FERRY_SERVER_OPS_METRICS_EXPORTER_H_
