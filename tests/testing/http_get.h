// A plain HTTP/1.0 GET, for tests of HTTP endpoints (ferry_server's
// /metrics, Prometheus's query API), and one metric read from a /metrics page.
#ifndef FERRY_TESTS_TESTING_HTTP_GET_H_
#define FERRY_TESTS_TESTING_HTTP_GET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ferry::testing {

// The body of GET http://<host>:<port><path> when the status is 200; an error naming
// the status line otherwise. `host` is numeric, IPv4 or IPv6. Waits at most 10 s.
absl::StatusOr<std::string> HttpGet(uint16_t port, const std::string& path,
                                    const std::string& host = "127.0.0.1");

// One sample of a Prometheus text page at http://<host>:<port>/metrics: `sample` is the
// metric's name with its labels as the page writes them ("ferry_draining",
// `ferry_sent_bytes_total{front_door="spark",mode="splice"}`); NOT_FOUND when the page
// has no such line.
absl::StatusOr<double> ScrapeMetric(uint16_t port, const std::string& sample,
                                    const std::string& host = "127.0.0.1");

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_HTTP_GET_H_
