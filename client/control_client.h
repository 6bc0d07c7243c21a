// ControlClient: the control plane's RPCs as StatusOr-returning calls, with one gRPC
// channel per server, created on first use. Errors name the server. Thread-safe.
#ifndef FERRY_CLIENT_CONTROL_CLIENT_H_
#define FERRY_CLIENT_CONTROL_CLIENT_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/block_id.h"
#include "proto/ferry.grpc.pb.h"

namespace ferry {

struct ControlClientOptions {
  absl::Duration rpc_timeout = absl::Seconds(30);
  // When not empty, goes with every call as "authorization: Bearer ...".
  std::string auth_token;
  // PEM CA certificates. When not empty, every channel is TLS and the server's
  // certificate must chain to one of them and name the host dialled; when empty, the
  // channel is plaintext.
  std::string tls_root_certs;
};

class ControlClient {
 public:
  explicit ControlClient(ControlClientOptions options) : options_(std::move(options)) {}
  explicit ControlClient(absl::Duration rpc_timeout = absl::Seconds(30),
                         std::string auth_token = "")
      : ControlClient(Options(rpc_timeout, std::move(auth_token))) {}

  // `server` is the control plane's "host:port"; `spark_exec_id` as in
  // FetchOptions.
  absl::StatusOr<ferry::v1::StreamHandle> OpenStream(const std::string& server,
                                                     const std::string& app_id,
                                                     const std::vector<BlockId>& blocks,
                                                     const std::string& spark_exec_id = "");
  absl::Status CloseStream(const std::string& server, const std::string& ticket);
  absl::StatusOr<ferry::v1::ListShufflesResponse> ListShuffles(const std::string& server,
                                                               const std::string& app_id);
  absl::StatusOr<ferry::v1::ServerInfo> GetServerInfo(const std::string& server);
  // `partition`: one reduce partition; `received_checksum`: over the bytes received.
  absl::StatusOr<ferry::v1::CorruptionDiagnosis> DiagnoseCorruption(
      const std::string& server, const std::string& app_id, const BlockId& partition,
      uint32_t received_checksum, const std::string& spark_exec_id = "");
  absl::StatusOr<ferry::v1::RemoveSparkAppResponse> RemoveSparkApp(
      const std::string& server, const ferry::v1::RemoveSparkAppRequest& request);
  // gRPC's standard health check of the server's control plane: true when SERVING,
  // false when NOT_SERVING (draining).
  absl::StatusOr<bool> CheckHealth(const std::string& server);

 private:
  static ControlClientOptions Options(absl::Duration rpc_timeout, std::string auth_token) {
    ControlClientOptions options;
    options.rpc_timeout = rpc_timeout;
    options.auth_token = std::move(auth_token);
    return options;
  }
  std::unique_ptr<ferry::v1::Ferry::Stub> Stub(const std::string& server);
  // The channel to `server`, made on first use and kept.
  std::shared_ptr<grpc::Channel> Channel(const std::string& server);
  // Sets the call's deadline and credentials.
  void Prepare(grpc::ClientContext& context) const;

  const ControlClientOptions options_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_;  // guarded by mu_
};

}  // namespace ferry

#endif  // FERRY_CLIENT_CONTROL_CLIENT_H_
