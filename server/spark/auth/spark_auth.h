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
//   * yarn, apps: the secret handed over for the application (YARN's NodeManager to
//     Ferry's aux service, or Kubernetes' node agent from the executors' pods:
//     server/spark/apps/handed_off_apps.h), held in memory; an application without one
//     falls back to the two above.
// A secret file holds the secret as Spark's setting holds it, surrounding whitespace
// dropped. Secrets are never logged.
#ifndef FERRY_SERVER_SPARK_AUTH_SPARK_AUTH_H_
#define FERRY_SERVER_SPARK_AUTH_SPARK_AUTH_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/secret.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/spark/apps/handed_off_apps.h"

namespace ferry {

// The families of spark.authenticate's handshakes (docs/operations.md).
#define FERRY_SPARK_AUTH_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                      \
  COUNTER_BY(handshakes, "ferry_spark_authentications_total",                                  \
             "spark.authenticate handshakes on the Spark front door, by how they ended "       \
             "(authenticated: SASL, plain frames after it; encrypted: Spark's AuthEngine and " \
             "AES-CTR, or SASL with auth-conf, every byte sealed after it; refused: a wrong "  \
             "secret, an unknown application, a malformed or endless handshake, or another "   \
             "message first).",                                                                \
             "outcome", SparkSecrets::kOutcomes)                                               \
  COUNTER_BY(engine_sessions, "ferry_spark_auth_engine_sessions_total",                        \
             "Encrypted Spark connections by the AuthEngine version their client runs "        \
             "(spark.network.crypto.authEngineVersion), told by its first frame.",             \
             "version", SparkSecrets::kEngineVersions)

class SparkSecrets {
 public:
  struct Options {
    std::string secret_file;     // --spark-auth-secret-file
    std::string secrets_dir;     // --spark-auth-secrets-dir
    bool yarn = false;           // --spark-auth-yarn
    bool apps = false;           // --spark-auth-apps
    bool auth_engine_v1 = true;  // --spark-auth-engine-v1
  };

  // No authentication: every connection is served as without spark.authenticate.
  SparkSecrets() = default;
  SparkSecrets(const SparkSecrets&) = delete;
  SparkSecrets& operator=(const SparkSecrets&) = delete;
  // Reads the shared secret and checks that the dir is one and that DIGEST-MD5 can run
  // here; the error names the file, the dir or the missing library. `handed_off` (which
  // must outlive the secrets) is where the handed-over applications are, required with
  // options.yarn or options.apps.
  static absl::StatusOr<std::unique_ptr<SparkSecrets>> Load(
      const Options& options, const HandedOffApps* handed_off = nullptr);

  // Whether connections must authenticate before anything else.
  bool required() const { return !shared_.empty() || !dir_.empty() || handed_off_ != nullptr; }
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
  static constexpr std::array<const char*, 3> kOutcomes = {"refused", "authenticated", "encrypted"};
  static constexpr std::array<const char*, 2> kEngineVersions = {"1", "2"};
  void CountHandshake(Outcome outcome) { stats_.handshakes[static_cast<size_t>(outcome)].Add(); }
  uint64_t handshakes(Outcome outcome) const {
    return stats_.handshakes[static_cast<size_t>(outcome)].value();
  }
  void CountAuthEngineSession(int version) { stats_.engine_sessions[version == 1 ? 0 : 1].Add(); }
  uint64_t auth_engine_sessions(int version) const {
    return stats_.engine_sessions[version == 1 ? 0 : 1].value();
  }
  // Its metric families (docs/operations.md), when authentication is required: the
  // handshakes by outcome and the AuthEngine sessions by version.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;

 private:
  Secret shared_;
  std::string dir_;
  const HandedOffApps* handed_off_ = nullptr;
  bool auth_engine_v1_ = true;
  struct Stats {
    FERRY_STATS_FIELDS(FERRY_SPARK_AUTH_STATS)
  };
  Stats stats_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_AUTH_SPARK_AUTH_H_
