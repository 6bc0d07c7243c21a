// absl::Status <-> grpc::Status. The numeric codes are the same in both. Its own unit
// so the io layer never links gRPC.
#ifndef FERRY_COMMON_GRPC_STATUS_H_
#define FERRY_COMMON_GRPC_STATUS_H_

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace ferry {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace ferry

#endif  // FERRY_COMMON_GRPC_STATUS_H_
