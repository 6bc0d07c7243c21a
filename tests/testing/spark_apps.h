// Helpers for tests that run real Spark applications: the processes they start, the
// shuffle files they leave, the RESULT lines tests/e2e/spark_jobs.py prints.
#ifndef FERRY_TESTS_TESTING_SPARK_APPS_H_
#define FERRY_TESTS_TESTING_SPARK_APPS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ferry::testing {

// The executor JVM (CoarseGrainedExecutorBackend) that process `pid` (the Python worker
// of one of its tasks) descends from, or 0.
pid_t ExecutorOf(pid_t pid);
// The executor JVMs running now whose local dirs (SPARK_EXECUTOR_DIRS) lie beneath
// `root`.
std::vector<pid_t> ExecutorsBeneath(const std::string& root);
// Process `pid`'s environment variable `name`, or "".
std::string EnvironmentOf(pid_t pid, const std::string& name);
// Spark's shuffle files beneath `root` (shuffle_<shuffle>_<map>_0.data, .index and
// .checksum.<algorithm>, each in the subdir its name hashes to), by name.
std::map<std::string, std::string> ShuffleFiles(const std::string& root);
// The shuffle data files among `files`, by shuffle id.
std::map<int, std::vector<std::string>> DataFilesByShuffle(
    const std::map<std::string, std::string>& files);
// The value of `key` in a flat JSON object `line` printed by json.dumps, as written:
// a number or true/false, or a string without its quotes; "" if absent.
std::string JsonField(const std::string& line, const std::string& key);
// The RESULT lines by the "job" they name.
std::map<std::string, std::string> ResultsByJob(const std::vector<std::string>& results);
// "" when jobs `job` and `expected` both printed a RESULT and their sums (keys, total,
// weighted) agree; otherwise what differs.
std::string SumsDiffer(const std::map<std::string, std::string>& by_job, const std::string& job,
                       const std::string& expected);
// The jobs of spark_jobs.py's "rdd" and "sql" whose RESULT lines follow each one of
// "expected-<job>", the same fields computed without Spark.
inline constexpr absl::string_view kRddAnswers[] = {"reduceByKey", "groupByKey", "sortByKey"};
inline constexpr absl::string_view kSqlAnswers[] = {"join-aggregate", "skew-join"};
// "" when each of `jobs` printed a RESULT and it is its "expected-<job>" line but for the
// job's name; otherwise what differs.
std::string AnswersDiffer(const std::vector<std::string>& results,
                          absl::Span<const absl::string_view> jobs);
// Creates an empty file at `path` (a handshake with the application).
void Touch(const std::string& path);

// Lines of log files, by path.
using LogLines = std::map<std::string, std::vector<std::string>>;
// What executors' logs (`logs`: their text by path) say of fetches retried or failed, and
// of connections to the shuffle service on `port` found closed, in the words of
// RetryingBlockTransferor, OneForOneBlockFetcher, ShuffleBlockFetcherIterator and
// TransportClientFactory (Spark 3.5 and 4.x alike).
LogLines FetchTrouble(const std::map<std::string, std::string>& logs, int port);
// The same, of the log files at `paths`.
LogLines FetchTroubleIn(const std::vector<std::string>& paths, int port);
// The lines of `now` that `then` (the same logs, read earlier) did not hold, each after
// its log's path, but one. An executor closes the connection it registered with the
// service on, and finds it closed when it next connects there: whenever its tasks first
// fetch or push after registering, which may be after `then`. So a log whose lines in
// `then` show no connection found closed may show one in `now`.
std::vector<std::string> FetchTroubleSince(const LogLines& then, const LogLines& now);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_SPARK_APPS_H_
