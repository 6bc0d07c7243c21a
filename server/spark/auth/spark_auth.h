// spark.authenticate on the Spark front door: where an application's secret is found,
// for either handshake (SASL DIGEST-MD5, common/spark/sasl.h; Spark's AuthEngine,
// common/spark/crypto.h).
// Spark's own services take one shared secret (standalone mode, spark.authenticate.secret)
// or one per application (YARN's NodeManager hands each application's to its service);
// Ferry takes either or both:
//   * secret_file: one secret for every application;
//   * secrets_dir: a file per application, named by its id (application_..._0001,
//     app-2026...-0000), written by the cluster manager's hook when the application
//     starts and removed when it ends. Read at each handshake (on a blocking worker,
//     not a data-plane thread: SparkSecrets::reads_files()), so a new application
//     needs no restart; an application with a file of its own uses it, others the
//     shared secret.
//   * yarn: the secret YARN's NodeManager handed Ferry's aux service for the
//     application (server/spark/yarn/yarn_apps.h), held in memory; an application
//     without one falls back to the two above.
// A secret file holds the secret as Spark's setting holds it, surrounding whitespace
// dropped. Secrets are never logged.
#ifndef FERRY_SERVER_SPARK_AUTH_SPARK_AUTH_H_
#define FERRY_SERVER_SPARK_AUTH_SPARK_AUTH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/secret.h"
#include "server/ops/metrics.h"
#include "server/spark/yarn/yarn_apps.h"

namespace ferry {

class SparkSecrets {
 public:
  struct Options {
    std::string secret_file;     // --spark-auth-secret-file
    std::string secrets_dir;     // --spark-auth-secrets-dir
    bool yarn = false;           // --spark-auth-yarn
    bool auth_engine_v1 = true;  // --spark-auth-engine-v1
  };

  // No authentication: every connection is served as without spark.authenticate.
  SparkSecrets() = default;
  SparkSecrets(const SparkSecrets&) = delete;
  SparkSecrets& operator=(const SparkSecrets&) = delete;
  // Reads the shared secret and checks that the dir is one and that DIGEST-MD5 can run
  // here; the error names the file, the dir or the missing library. `yarn` (which must
  // outlive the secrets) is where YARN's applications are, required with options.yarn.
  static absl::StatusOr<std::unique_ptr<SparkSecrets>> Load(const Options& options,
                                                            const YarnApps* yarn = nullptr);

  // Whether connections must authenticate before anything else.
  bool required() const { return !shared_.empty() || !dir_.empty() || yarn_ != nullptr; }
  // The secret `app_id` authenticates with. PERMISSION_DENIED naming the application
  // when it has none (no file of its own and no shared secret, or an id that cannot be
  // a file name).
  absl::StatusOr<Secret> SecretOf(absl::string_view app_id) const;
  // Whether SecretOf() may read a file (--spark-auth-secrets-dir), and so belongs on a
  // blocking worker; otherwise it reads memory only.
  bool reads_files() const { return !dir_.empty(); }

  // Whether clients of AuthEngine version 1 are served (--spark-auth-engine-v1):
  // Spark's default, whose session key is the X25519 secret itself.
  bool auth_engine_v1() const { return auth_engine_v1_; }

  // How handshakes ended, for the metrics: refused, authenticated by SASL (plain frames
  // after it), or by Spark's AuthEngine (every byte encrypted after it); and the
  // AuthEngine version of each encrypted session, once its first frame told.
  enum class Outcome { kRefused = 0, kAuthenticated = 1, kEncrypted = 2 };
  void CountHandshake(Outcome outcome) {
    handshakes_[static_cast<int>(outcome)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t handshakes(Outcome outcome) const {
    return handshakes_[static_cast<int>(outcome)].load(std::memory_order_relaxed);
  }
  void CountAuthEngineSession(int version) {
    engine_sessions_[version == 1 ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t auth_engine_sessions(int version) const {
    return engine_sessions_[version == 1 ? 0 : 1].load(std::memory_order_relaxed);
  }
  // Its metric families (docs/operations.md), when authentication is required: the
  // handshakes by outcome and the AuthEngine sessions by version.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;

 private:
  Secret shared_;
  std::string dir_;
  const YarnApps* yarn_ = nullptr;
  bool auth_engine_v1_ = true;
  std::atomic<uint64_t> handshakes_[3] = {};
  std::atomic<uint64_t> engine_sessions_[2] = {};
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_AUTH_SPARK_AUTH_H_
