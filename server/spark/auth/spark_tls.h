// TLS on the Spark front door, as Spark 4's spark.ssl.rpc.enabled speaks it: TLS from
// the connection's first byte (Netty's SslHandler at the head of Spark's pipeline), then
// Spark's frames inside it. The server's certificate and key are PEM files, the ones
// the cluster gives spark.ssl.rpc.certChain and spark.ssl.rpc.privateKey (Spark's client
// trusts the certChain it is given). OpenSSL in user space over memory BIOs, so the
// connection's fiber drives it: blocks are read into a buffer and encrypted, as with
// the AuthEngine's AES-CTR. (This kernel has no `tls` ULP, so kernel TLS, which would
// keep blocks spliced, is not used.)
#ifndef FERRY_SERVER_SPARK_AUTH_SPARK_TLS_H_
#define FERRY_SERVER_SPARK_AUTH_SPARK_TLS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/dataplane/security_layer.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace ferry {

// The families of the Spark front door's TLS (docs/operations.md).
#define FERRY_SPARK_TLS_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                    \
  COUNTER_BY(handshakes, "ferry_spark_tls_handshakes_total",                                \
             "TLS handshakes on the Spark front door (spark.ssl.rpc.enabled), by how they " \
             "ended (failed: a client without TLS or that does not trust the certificate, " \
             "or a connection closed before its handshake ended).",                         \
             "outcome", SparkTls::kEnds)

class SparkTls {
 public:
  struct Options {
    std::string cert_file;  // --spark-tls-cert: PEM, the certificate (and its chain)
    std::string key_file;   // --spark-tls-key: PEM, its private key
    bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
  };

  // INVALID_ARGUMENT naming the file when the certificate or key does not load, or
  // they do not match.
  static absl::StatusOr<std::unique_ptr<SparkTls>> Load(const Options& options);
  ~SparkTls();
  SparkTls(const SparkTls&) = delete;
  SparkTls& operator=(const SparkTls&) = delete;

  // The layer of one new connection, before its first byte.
  std::unique_ptr<SecurityLayer> NewConnection();

  // Handshakes that ended, for the metrics.
  static constexpr std::array<const char*, 2> kEnds = {"failed", "completed"};
  uint64_t handshakes(bool completed) const { return stats_.handshakes[completed ? 1 : 0].value(); }
  void CountHandshake(bool completed) { stats_.handshakes[completed ? 1 : 0].Add(); }
  // Its metric families (docs/operations.md): the handshakes by how they ended.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;

 private:
  explicit SparkTls(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
  struct Stats {
    FERRY_STATS_FIELDS(FERRY_SPARK_TLS_STATS)
  };
  Stats stats_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_AUTH_SPARK_TLS_H_
