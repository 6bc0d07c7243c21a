// ControlService: the gRPC control plane (proto/ferry.proto). It validates requests,
// resolves blocks through the BlockStore, registers streams with the TicketRegistry and
// answers with the data plane's endpoint. It touches payload bytes only to diagnose a
// corruption a client reports (DiagnoseCorruption rereads that one partition).
//
// Thread-safe: gRPC calls it from its own threads.
#ifndef FERRY_SERVER_CONTROL_SERVICE_H_
#define FERRY_SERVER_CONTROL_SERVICE_H_

#include <string>

#include "absl/time/time.h"
#include "proto/ferry.grpc.pb.h"
#include "server/block_store.h"
#include "server/connection.h"
#include "server/ticket_registry.h"

namespace ferry {

struct ControlServiceOptions {
  // What GetServerInfo and OpenStream report about the data plane. An empty or
  // wildcard host tells clients to use the host they reached the control plane at.
  std::string data_host;
  uint16_t data_port = 0;
  uint32_t data_threads = 1;
  ConnectionOptions connection;
  absl::Duration ticket_ttl = absl::Minutes(10);
  // Most blocks one OpenStream may name.
  size_t max_blocks_per_stream = 1 << 20;
  // Streams open at once; OpenStream past it is RESOURCE_EXHAUSTED (retry later).
  size_t max_open_streams = 100000;
  // When not empty, every RPC must carry the metadata "authorization: Bearer <token>";
  // others are UNAUTHENTICATED.
  std::string auth_token;
};

class ControlService final : public ferry::v1::Ferry::Service {
 public:
  // `store` and `tickets` must outlive the service.
  ControlService(ControlServiceOptions options, BlockStore* store, TicketRegistry* tickets);

  grpc::Status OpenStream(grpc::ServerContext* context, const ferry::v1::OpenStreamRequest* request,
                          ferry::v1::StreamHandle* response) override;
  grpc::Status CloseStream(grpc::ServerContext* context,
                           const ferry::v1::CloseStreamRequest* request,
                           ferry::v1::CloseStreamResponse* response) override;
  grpc::Status ListShuffles(grpc::ServerContext* context,
                            const ferry::v1::ListShufflesRequest* request,
                            ferry::v1::ListShufflesResponse* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context,
                             const ferry::v1::ServerInfoRequest* request,
                             ferry::v1::ServerInfo* response) override;
  grpc::Status DiagnoseCorruption(grpc::ServerContext* context,
                                  const ferry::v1::DiagnoseCorruptionRequest* request,
                                  ferry::v1::CorruptionDiagnosis* response) override;

 private:
  // OK, or UNAUTHENTICATED when a token is required and the call lacks it.
  grpc::Status Authorize(const grpc::ServerContext* context) const;

  ControlServiceOptions options_;
  BlockStore* store_;
  TicketRegistry* tickets_;
};

// The version ferry_server reports.
inline constexpr char kFerryVersion[] = "0.1.0";

}  // namespace ferry

#endif  // FERRY_SERVER_CONTROL_SERVICE_H_
