#include "server/ops/metrics.h"

#include <thread>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(LatencyHistogramTest, EachObservationLandsInItsBucket) {
  LatencyHistogram h;
  h.Observe(absl::Microseconds(50));   // <= 100 us
  h.Observe(absl::Microseconds(100));  // the bound itself is in
  h.Observe(absl::Milliseconds(3));    // <= 5 ms
  h.Observe(absl::Seconds(60));        // above every bound
  const auto counts = h.Counts();
  EXPECT_EQ(counts[0], 2u);
  EXPECT_EQ(counts[3], 1u);
  EXPECT_EQ(counts.back(), 1u);
  EXPECT_NEAR(h.SumSeconds(), 60.00315, 1e-9);
}

TEST(ThreadMetricsTest, ThreadsAreSummedByFrontDoor) {
  ThreadMetrics a;
  ThreadMetrics b;
  // Each thread writes only its own counters; the scrape reads both.
  std::thread ta([&] {
    for (int i = 0; i < 1000; ++i) a.Sent(FrontDoor::kFerry, 10, 1);
    a.Request(FrontDoor::kFerry, absl::StatusCode::kOk, absl::Microseconds(10),
              absl::Microseconds(20));
  });
  std::thread tb([&] {
    b.Sent(FrontDoor::kSpark, 7, 1);
    b.Request(FrontDoor::kSpark, absl::StatusCode::kNotFound, absl::ZeroDuration(),
              absl::ZeroDuration());
  });
  ta.join();
  tb.join();
  std::vector<MetricFamilySamples> families;
  AppendThreadMetrics({&a, &b}, "splice", &families);
  auto find = [&](const std::string& name) -> const MetricFamilySamples& {
    for (const MetricFamilySamples& f : families) {
      if (f.name == name) return f;
    }
    ADD_FAILURE() << name << " missing";
    return families.front();
  };
  const MetricFamilySamples& bytes = find("ferry_sent_bytes_total");
  ASSERT_EQ(bytes.samples.size(), 2u);
  EXPECT_EQ(bytes.samples[0].value, 10000);  // ferry
  EXPECT_EQ(bytes.samples[1].value, 7);      // spark
  const MetricFamilySamples& requests = find("ferry_requests_total");
  bool not_found = false;
  for (const MetricSample& s : requests.samples) {
    if (s.labels[1].second == "NOT_FOUND") {
      not_found = true;
      EXPECT_EQ(s.value, 1);
      EXPECT_EQ(s.labels[0].second, "spark");
    }
  }
  EXPECT_TRUE(not_found);
  // Failed requests are counted but not timed.
  const MetricFamilySamples& service = find("ferry_request_service_seconds");
  uint64_t spark_timed = 0;
  for (uint64_t c : service.samples[1].buckets) spark_timed += c;
  EXPECT_EQ(spark_timed, 0u);
}

}  // namespace
}  // namespace ferry
