// ControlClient: the control plane's RPCs as StatusOr-returning calls, with one gRPC
// channel per server, created on first use. Errors name the server. Thread-safe.
#ifndef FERRY_CLIENT_CONTROL_CLIENT_H_
#define FERRY_CLIENT_CONTROL_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/block_id.h"
#include "common/secret.h"
#include "proto/ferry.grpc.pb.h"

namespace ferry {

struct ControlClientOptions {
  absl::Duration rpc_timeout = absl::Seconds(30);
  // When not empty, goes with every call as "authorization: Bearer ...".
  Secret auth_token;
  // PEM CA certificates. When not empty, every channel is TLS and the server's
  // certificate must chain to one of them and name the host dialled; when empty, the
  // channel is plaintext.
  std::string tls_root_certs;
};

class ControlClient {
 public:
  explicit ControlClient(ControlClientOptions options) : options_(std::move(options)) {}
  // Cancels the calls still in flight (Start* calls nobody waited for) and waits for
  // their callbacks: a channel must not be released by a callback of its own.
  ~ControlClient();
  explicit ControlClient(absl::Duration rpc_timeout = absl::Seconds(30),
                         Secret auth_token = Secret())
      : ControlClient(Options(rpc_timeout, std::move(auth_token))) {}

  // `server` is the control plane's "host:port"; `spark_exec_id` as in
  // FetchOptions.
  absl::StatusOr<ferry::v1::StreamHandle> OpenStream(const std::string& server,
                                                     const std::string& app_id,
                                                     const std::vector<BlockId>& blocks,
                                                     const std::string& spark_exec_id = "");
  absl::Status CloseStream(const std::string& server, const std::string& ticket);

  // OpenStream and CloseStream on gRPC's callback API, for fibers (AwaitCall) and other
  // callers that must not block a thread: `done` runs once, on a gRPC thread, with what
  // the blocking call returns. The returned function asks gRPC to cancel the call (then
  // `done` runs with CANCELLED, or with the answer if it came first); it may be called
  // at any time, after `done` too. The call keeps what it needs alive by itself, so a
  // caller may leave without waiting for `done`.
  using CancelCall = std::function<void()>;
  CancelCall StartOpenStream(
      const std::string& server, const std::string& app_id, const std::vector<BlockId>& blocks,
      const std::string& spark_exec_id,
      absl::AnyInvocable<void(absl::StatusOr<ferry::v1::StreamHandle>)> done);
  CancelCall StartCloseStream(const std::string& server, const std::string& ticket,
                              absl::AnyInvocable<void(absl::Status)> done);
  absl::StatusOr<ferry::v1::ListShufflesResponse> ListShuffles(const std::string& server,
                                                               const std::string& app_id);
  absl::StatusOr<ferry::v1::ListAppsResponse> ListApps(const std::string& server);
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
  static ControlClientOptions Options(absl::Duration rpc_timeout, Secret auth_token) {
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

  // Starts `request` on gRPC's callback API: `invoke(async stub, context, request,
  // response, callback)` makes the call, and `finish(status, call)` runs on gRPC's
  // thread when it ends.
  template <typename Request, typename Response, typename Invoke, typename Finish>
  CancelCall StartCall(const std::string& server, Request request, Invoke invoke, Finish finish);
  // Calls on the callback API between their start and the end of their callback.
  void BeginCall(grpc::ClientContext* context);
  void EndCall(grpc::ClientContext* context);

  const ControlClientOptions options_;
  absl::Mutex calls_mu_;
  absl::flat_hash_set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(calls_mu_);
  bool NoCalls() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_mu_) { return calls_.empty(); }
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_CLIENT_CONTROL_CLIENT_H_
