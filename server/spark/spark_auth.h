// spark.authenticate on the Spark front door: where an application's secret is found.
// Spark's own services take one shared secret (standalone mode, spark.authenticate.secret)
// or one per application (YARN's NodeManager hands each application's to its service);
// Ferry takes either or both:
//   * secret_file: one secret for every application;
//   * secrets_dir: a file per application, named by its id (application_..._0001,
//     app-2026...-0000), written by the cluster manager's hook when the application
//     starts and removed when it ends. Read at each handshake, so a new application
//     needs no restart; an application with a file of its own uses it, others the
//     shared secret.
// A secret file holds the secret as Spark's setting holds it, surrounding whitespace
// dropped. Secrets are never logged.
#ifndef FERRY_SERVER_SPARK_SPARK_AUTH_H_
#define FERRY_SERVER_SPARK_SPARK_AUTH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry {

class SparkSecrets {
 public:
  struct Options {
    std::string secret_file;  // --spark-auth-secret-file
    std::string secrets_dir;  // --spark-auth-secrets-dir
  };

  // No authentication: every connection is served as without spark.authenticate.
  SparkSecrets() = default;
  SparkSecrets(const SparkSecrets&) = delete;
  SparkSecrets& operator=(const SparkSecrets&) = delete;
  // Reads the shared secret and checks that the dir is one and that DIGEST-MD5 can run
  // here; the error names the file, the dir or the missing library.
  static absl::StatusOr<std::unique_ptr<SparkSecrets>> Load(const Options& options);

  // Whether connections must authenticate before anything else.
  bool required() const { return !shared_.empty() || !dir_.empty(); }
  // The secret `app_id` authenticates with. PERMISSION_DENIED naming the application
  // when it has none (no file of its own and no shared secret, or an id that cannot be
  // a file name).
  absl::StatusOr<std::string> SecretOf(absl::string_view app_id) const;

  // Handshakes that ended, authenticated or refused (for the metrics).
  void CountHandshake(bool authenticated) {
    (authenticated ? authenticated_ : refused_).fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t authenticated() const { return authenticated_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  std::string shared_;
  std::string dir_;
  std::atomic<uint64_t> authenticated_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_SPARK_AUTH_H_
