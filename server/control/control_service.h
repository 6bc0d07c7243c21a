// ControlService: the gRPC control plane (proto/ferry.proto). It validates requests,
// resolves blocks through the BlockStore, registers streams with the TicketRegistry and
// answers with the data plane's endpoint. It touches payload bytes only to diagnose a
// corruption a client reports (DiagnoseCorruption rereads that one partition).
//
// Thread-safe: gRPC calls it from its own threads.
#ifndef FERRY_SERVER_CONTROL_CONTROL_SERVICE_H_
#define FERRY_SERVER_CONTROL_CONTROL_SERVICE_H_

#include <array>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/control_plane.h"
#include "common/secret.h"
#include "common/version.h"
#include "proto/ferry.grpc.pb.h"
#include "server/base/log_lines.h"
#include "server/control/spark_apps.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/storage/block_store.h"
#include "server/storage/disk_reader.h"
#include "server/tickets/ticket_registry.h"

namespace ferry {

struct ControlServiceOptions {
  // What GetServerInfo and OpenStream report about the data plane. An empty or
  // wildcard host tells clients to use the host they reached the control plane at.
  std::string data_host;
  uint16_t data_port = 0;
  uint32_t data_threads = 1;
  // How it sends blocks (--mode, --copy-buffer-size, --io-engine), as ServerInfo says
  // it; the data plane's own options are its own (the server copies them here).
  bool splice = true;
  size_t copy_buffer_bytes = 0;
  std::string io_engine;
  size_t pipe_bytes = 0;
  // The Spark front door's and the metrics' ports, as ServerInfo tells them; 0: off.
  uint16_t spark_port = 0;
  uint16_t metrics_port = 0;
  absl::Duration ticket_ttl = absl::Minutes(10);
  // Most blocks one OpenStream may name, and most partitions they may cover together.
  size_t max_blocks_per_stream = kMaxBlocksPerStream;
  size_t max_partitions_per_stream = kMaxPartitionsPerStream;
  // Calls that read files or build large answers (OpenStream, ListShuffles,
  // DiagnoseCorruption) running at once; more wait up to `heavy_call_wait`, then get
  // RESOURCE_EXHAUSTED.
  int max_heavy_calls = 8;
  absl::Duration heavy_call_wait = absl::Seconds(2);
  // When not empty, every RPC must carry the metadata "authorization: Bearer <token>";
  // others are UNAUTHENTICATED.
  Secret auth_token;

  // INVALID_ARGUMENT naming the flag of a field out of range.
  absl::Status Validate() const;
};

// The control plane's metric families (docs/operations.md).
#define FERRY_CONTROL_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                     \
  COUNTER_BY(calls, "ferry_control_calls_total",                                           \
             "Control-plane calls received, by method, whether answered or refused: with " \
             "many clients, what their retries cost.",                                     \
             "method", ControlService::kRpcNames)

class ControlService final : public ferry::v1::Ferry::Service {
 public:
  // `store`, `tickets`, `spark` and `disks` must outlive the service; `spark` is null
  // when the Spark front door is off, `disks` when no disk health is to be told.
  ControlService(ControlServiceOptions options, BlockStore* store, TicketRegistry* tickets,
                 SparkApps* spark = nullptr, const DiskReader* disks = nullptr);

  // The metrics' port, once they listen: before the control plane serves (the
  // metrics, which read this service's counters, start after it is made).
  void set_metrics_port(uint16_t port) { options_.metrics_port = port; }

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
  // At most kMaxListedApps apps.
  grpc::Status ListApps(grpc::ServerContext* context, const ferry::v1::ListAppsRequest* request,
                        ferry::v1::ListAppsResponse* response) override;
  grpc::Status DiagnoseCorruption(grpc::ServerContext* context,
                                  const ferry::v1::DiagnoseCorruptionRequest* request,
                                  ferry::v1::CorruptionDiagnosis* response) override;
  grpc::Status RemoveSparkApp(grpc::ServerContext* context,
                              const ferry::v1::RemoveSparkAppRequest* request,
                              ferry::v1::RemoveSparkAppResponse* response) override;

  // A hand-over: the open streams (tickets, what each names, when it expires), as text
  // for TakeStreams() in the server taking over.
  std::string HandOverStreams() const;
  // The server taking over: each stream HandOverStreams() wrote, resolved here again (the
  // same files) and registered under its ticket, so that a client fetching with it goes
  // on. One that no longer resolves, or over a limit, is dropped (logged: its client
  // opens it again). How many it registered.
  size_t TakeStreams(absl::string_view streams);

  enum class Rpc {
    kOpenStream,
    kCloseStream,
    kListShuffles,
    kGetServerInfo,
    kDiagnoseCorruption,
    kRemoveSparkApp,
    kListApps,
  };
  // By Rpc.
  static constexpr std::array<const char*, 7> kRpcNames = {
      "OpenStream",         "CloseStream",    "ListShuffles", "GetServerInfo",
      "DiagnoseCorruption", "RemoveSparkApp", "ListApps"};
  static const char* RpcName(Rpc rpc) { return kRpcNames[static_cast<size_t>(rpc)]; }
  // Calls of `rpc` received, answered or refused (unauthenticated, busy, bad): what a
  // client's retries cost the server.
  uint64_t calls(Rpc rpc) const { return stats_.calls[static_cast<size_t>(rpc)].value(); }
  // Its metric families (docs/operations.md): the calls by method.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;

 private:
  // OK, or UNAUTHENTICATED when a token is required and the call lacks it.
  grpc::Status Authorize(const grpc::ServerContext* context) const;
  // Every RPC runs through Call(): authorized first, then, when it reads files or builds
  // a large answer (kHeavy), given a place among the heavy calls running (waiting up to
  // heavy_call_wait, then RESOURCE_EXHAUSTED), then `body`.
  enum class Cost { kLight, kHeavy };
  grpc::Status Call(const grpc::ServerContext* context, Rpc rpc, Cost cost,
                    absl::FunctionRef<grpc::Status()> body);
  grpc::Status ServerInfo(ferry::v1::ServerInfo* response) const;
  grpc::Status RemoveSparkAppAdmitted(const ferry::v1::RemoveSparkAppRequest& request,
                                      ferry::v1::RemoveSparkAppResponse* response);
  grpc::Status OpenStreamAdmitted(const grpc::ServerContext& context,
                                  const ferry::v1::OpenStreamRequest& request,
                                  ferry::v1::StreamHandle* response);
  // The blocks in Ferry's layout, or a registered Spark executor's when
  // `spark_exec_id` is set.
  absl::StatusOr<std::vector<ResolvedBlock>> Resolve(const std::string& app_id,
                                                     const std::string& spark_exec_id,
                                                     const std::vector<BlockId>& keys);
  grpc::Status DiagnoseAdmitted(const ferry::v1::DiagnoseCorruptionRequest& request,
                                ferry::v1::CorruptionDiagnosis* response);
  // A client's call failed on something of the server's (a file it cannot read, a
  // damaged one, a disk): logged within a budget, the client told as it is.
  grpc::Status ServerSideFailure(const grpc::ServerContext& context, Rpc rpc,
                                 const absl::Status& status);

  ControlServiceOptions options_;
  BlockStore* store_;
  TicketRegistry* tickets_;
  SparkApps* spark_;
  const DiskReader* disks_;
  absl::Mutex heavy_mu_;
  int heavy_calls_ ABSL_GUARDED_BY(heavy_mu_) = 0;
  bool HeavyCallFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(heavy_mu_) {
    return heavy_calls_ < options_.max_heavy_calls;
  }
  struct Stats {
    FERRY_STATS_FIELDS(FERRY_CONTROL_STATS)
  };
  Stats stats_;
  LineBudget failure_log_{10};
};

// "ipv4:10.0.0.7" from gRPC's peer "ipv4:10.0.0.7:51234": a client, whichever port it
// called from.
std::string ClientOfPeer(const std::string& peer);

}  // namespace ferry

#endif  // FERRY_SERVER_CONTROL_CONTROL_SERVICE_H_
