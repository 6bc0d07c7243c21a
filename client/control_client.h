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

class ControlClient {
 public:
  // `auth_token`, when not empty, goes with every call as "authorization: Bearer ...".
  explicit ControlClient(absl::Duration rpc_timeout = absl::Seconds(30),
                         std::string auth_token = "")
      : rpc_timeout_(rpc_timeout), auth_token_(std::move(auth_token)) {}

  // `server` is the control plane's "host:port".
  absl::StatusOr<ferry::v1::StreamHandle> OpenStream(const std::string& server,
                                                     const std::string& app_id,
                                                     const std::vector<BlockId>& blocks);
  absl::Status CloseStream(const std::string& server, const std::string& ticket);
  absl::StatusOr<ferry::v1::ListShufflesResponse> ListShuffles(const std::string& server,
                                                               const std::string& app_id);
  absl::StatusOr<ferry::v1::ServerInfo> GetServerInfo(const std::string& server);

 private:
  std::unique_ptr<ferry::v1::Ferry::Stub> Stub(const std::string& server);
  // Sets the call's deadline and credentials.
  void Prepare(grpc::ClientContext& context) const;

  absl::Duration rpc_timeout_;
  std::string auth_token_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_;  // guarded by mu_
};

}  // namespace ferry

#endif  // FERRY_CLIENT_CONTROL_CLIENT_H_
