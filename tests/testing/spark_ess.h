// ../shared/spark-ess, Apache Spark 3.5.0's own shuffle service and shuffle client, as
// peers for tests: the oracle for Ferry's Spark front door.
//
// Tests find it through the SPARK_ESS_DIR environment variable (scripts/test passes it
// to Bazel when ../shared/spark-ess is there). Without it, or without its built jar,
// SparkEssDir() is empty and the tests that need it skip, saying why.
#ifndef FERRY_TESTS_TESTING_SPARK_ESS_H_
#define FERRY_TESTS_TESTING_SPARK_ESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/command.h"

namespace ferry::testing {

// The spark-ess folder, or empty when it cannot be used (the reason in *why).
std::string SparkEssDir(std::string* why = nullptr);

// spark-ess-server on a free loopback port, stopped (SIGTERM, then SIGKILL) when
// destroyed.
class SparkEssServer {
 public:
  static absl::StatusOr<std::unique_ptr<SparkEssServer>> Start(
      const std::vector<std::string>& args = {});
  SparkEssServer(const SparkEssServer&) = delete;
  SparkEssServer& operator=(const SparkEssServer&) = delete;
  ~SparkEssServer();

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  SparkEssServer() = default;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_SPARK_ESS_H_
