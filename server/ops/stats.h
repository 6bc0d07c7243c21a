// A component's metrics, each declared once (Envoy's ALL_*_STATS): one list macro names
// every family with its Prometheus name and help, and both the component's counters and
// their export are generated from it. A list takes five entry makers:
//
//   COUNTER(field, name, help)                  a Counter field the component adds to
//   COUNTER_BY(field, name, help, label, values) a Counter per value of `label` (a
//                                               constexpr array of the values' names)
//   GAUGE(field, name, help)                    a Gauge field the component moves
//   READ(name, help, kind, expr)                no field: `expr`, read at each scrape
//                                               (a count kept elsewhere: a map's size)
//   READ_BY(name, help, kind, label, expr)      no field: `expr` gives (value name,
//                                               value) pairs at each scrape
//
// For example:
//
//   #define FERRY_PIPE_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY) <backslash>
//     COUNTER(waits, "ferry_pipe_waits_total", "Segments that waited for a pipe.") <backslash>
//     GAUGE(open, "ferry_pipes_open", "Splice pipes open.")
//   struct PipeStats {
//     FERRY_STATS_FIELDS(FERRY_PIPE_STATS)
//   };
//   ... stats_.waits.Add();
//   void PipePool::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
//     FERRY_APPEND_STATS(FERRY_PIPE_STATS, {&stats_}, out);
//   }
//
// FERRY_APPEND_STATS takes several stats of one kind (a pool per thread) and exports
// their sums. READ's `expr` is evaluated where FERRY_APPEND_STATS is written (in the
// component's member function: `this` is in scope).
#ifndef FERRY_SERVER_OPS_STATS_H_
#define FERRY_SERVER_OPS_STATS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "server/ops/metrics.h"

namespace ferry {

// A count that only grows; any thread adds.
class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A level that moves both ways; any thread moves it.
class Gauge {
 public:
  void Add(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  void Sub(int64_t n = 1) { value_.fetch_sub(n, std::memory_order_relaxed); }
  void Set(int64_t n) { value_.store(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// A Counter per value of one label; the values are fixed when the code is written.
template <size_t N>
class CounterBy {
 public:
  Counter& operator[](size_t i) { return counters_[i]; }
  const Counter& operator[](size_t i) const { return counters_[i]; }

 private:
  std::array<Counter, N> counters_;
};

namespace stats_internal {

// The sum of `value(stats)` over every stats `all` (a range of pointers) points to.
template <typename Range, typename Value>
double Sum(const Range& all, Value value) {
  double sum = 0;
  for (const auto* s : all) sum += static_cast<double>(value(*s));
  return sum;
}

// (name i, value(i)) for each of `names`.
template <size_t N, typename Value>
std::vector<std::pair<std::string, double>> ByName(const std::array<const char*, N>& names,
                                                   Value value) {
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < N; ++i) out.emplace_back(names[i], value(i));
  return out;
}

}  // namespace stats_internal
}  // namespace ferry

#define FERRY_STAT_FIELD_COUNTER(field, name, help) ::ferry::Counter field;
#define FERRY_STAT_FIELD_COUNTER_BY(field, name, help, label, values) \
  ::ferry::CounterBy<std::size(values)> field;
#define FERRY_STAT_FIELD_GAUGE(field, name, help) ::ferry::Gauge field;
#define FERRY_STAT_NO_FIELD(...)

// The fields of a stats struct, from its list.
#define FERRY_STATS_FIELDS(ALL)                                                      \
  ALL(FERRY_STAT_FIELD_COUNTER, FERRY_STAT_FIELD_COUNTER_BY, FERRY_STAT_FIELD_GAUGE, \
      FERRY_STAT_NO_FIELD, FERRY_STAT_NO_FIELD)

#define FERRY_STAT_APPEND_COUNTER(field, name, help)                \
  ferry_stats_out->push_back(                                       \
      ::ferry::OneSample(name, help, ::ferry::MetricKind::kCounter, \
                         ::ferry::stats_internal::Sum(              \
                             ferry_stats_all, [](const auto& s) { return s.field.value(); })));
#define FERRY_STAT_APPEND_COUNTER_BY(field, name, help, label, values)                          \
  ferry_stats_out->push_back(::ferry::SamplesBy(                                                \
      name, help, ::ferry::MetricKind::kCounter, label,                                         \
      ::ferry::stats_internal::ByName(values, [&](size_t i) {                                   \
        return ::ferry::stats_internal::Sum(ferry_stats_all,                                    \
                                            [i](const auto& s) { return s.field[i].value(); }); \
      })));
#define FERRY_STAT_APPEND_GAUGE(field, name, help)                \
  ferry_stats_out->push_back(                                     \
      ::ferry::OneSample(name, help, ::ferry::MetricKind::kGauge, \
                         ::ferry::stats_internal::Sum(            \
                             ferry_stats_all, [](const auto& s) { return s.field.value(); })));
#define FERRY_STAT_APPEND_READ(name, help, kind, expr) \
  ferry_stats_out->push_back(                          \
      ::ferry::OneSample(name, help, ::ferry::MetricKind::kind, static_cast<double>(expr)));
#define FERRY_STAT_APPEND_READ_BY(name, help, kind, label, expr) \
  ferry_stats_out->push_back(                                    \
      ::ferry::SamplesBy(name, help, ::ferry::MetricKind::kind, label, expr));

// Appends every family of the list `ALL` to `out`: the fields summed over `all` (a
// braced list or vector of pointers to stats structs), the READs evaluated here.
#define FERRY_APPEND_STATS(ALL, all, out)                                                 \
  do {                                                                                    \
    [[maybe_unused]] const auto& ferry_stats_all = all;                                   \
    std::vector<::ferry::MetricFamilySamples>* const ferry_stats_out = (out);             \
    ALL(FERRY_STAT_APPEND_COUNTER, FERRY_STAT_APPEND_COUNTER_BY, FERRY_STAT_APPEND_GAUGE, \
        FERRY_STAT_APPEND_READ, FERRY_STAT_APPEND_READ_BY)                                \
  } while (false)

#define FERRY_STAT_NOT_A_READ(...) static_assert(false, "FERRY_APPEND_READS: a list of READs only");

// Appends the families of a list of READs only (a component that counts nothing itself).
#define FERRY_APPEND_READS(ALL, out)                                          \
  do {                                                                        \
    std::vector<::ferry::MetricFamilySamples>* const ferry_stats_out = (out); \
    ALL(FERRY_STAT_NOT_A_READ, FERRY_STAT_NOT_A_READ, FERRY_STAT_NOT_A_READ,  \
        FERRY_STAT_APPEND_READ, FERRY_STAT_APPEND_READ_BY)                    \
  } while (false)

#endif  // FERRY_SERVER_OPS_STATS_H_
