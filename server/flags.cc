#include "server/flags.h"

#include <string>

#include "common/auth_token.h"
#include "common/option_flags.h"
#include "common/status_macros.h"

namespace ferry {
namespace {

// A PEM file's text (empty path: none).
absl::Status SetTlsCert(const std::string& path, FerryServerOptions& options) {
  if (path.empty()) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(Secret pem, ReadPemFile(path));
  options.tls_cert_chain = std::string(pem.view());
  return absl::OkStatus();
}

absl::Status SetTlsKey(const std::string& path, FerryServerOptions& options) {
  if (path.empty()) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(options.tls_private_key, ReadPemFile(path));
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyServerFlags(FerryServerOptions* options) {
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(options));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->data));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->connection));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->disks));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->store));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->tickets));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->control));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->spark));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->spark.executors));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->spark.service));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->spark.auth));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->spark.tls));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->spark.apps));
  FERRY_RETURN_IF_ERROR(ApplyOptionFlags(&options->spark.push));
  return ApplyOptionFlags(&options->spark.blocking);
}

}  // namespace ferry

// The server's own fields. The command line's addresses name fixed ports where the
// struct's defaults (port 0) suit tests.
FERRY_OPTION_FLAG(ferry::FerryServerOptions, data_dir, data_dir,
                  "Directory holding <appId>/ shuffle file folders (required).");
FERRY_OPTION_FLAG_DEFAULT(ferry::FerryServerOptions, control_address, control_address,
                          "127.0.0.1:7070", "host:port of the gRPC control plane.");
FERRY_OPTION_FLAG_DEFAULT(ferry::FerryServerOptions, data_address, data_address, "127.0.0.1:7071",
                          "host:port (or [IPv6]:port) of the data plane, numeric; port 0 picks "
                          "a free one.");
FERRY_OPTION_FLAG(ferry::FerryServerOptions, advertise_data_address, advertise_data_address,
                  "host:port clients must dial for the data plane, when it differs from "
                  "--data-address (NAT, a proxy).");
FERRY_OPTION_FLAG_FN(ferry::FerryServerOptions, std::string, tls_cert_file, "",
                     "PEM certificate chain for the control plane; with --tls-key-file, the "
                     "control plane speaks only TLS.",
                     ferry::SetTlsCert);
FERRY_OPTION_FLAG_FN(ferry::FerryServerOptions, std::string, tls_key_file, "",
                     "PEM private key of --tls-cert-file.", ferry::SetTlsKey);
FERRY_OPTION_FLAG(ferry::FerryServerOptions, sweep_interval, sweep_interval,
                  "How often expired streams, deleted files, Spark executors whose dirs are gone "
                  "and YARN applications that ended are let go of (10ms to 24h).");
FERRY_OPTION_FLAG(ferry::FerryServerOptions, metrics_address, metrics_address,
                  "host:port serving Prometheus metrics at /metrics (docs/operations.md). Empty: "
                  "off.");
