// FerryServer: one storage node's whole server, assembled: the BlockStore over the data
// dir, the TicketRegistry, the data plane (DataServer) and the gRPC control plane.
// ferry_server's main() runs one; end-to-end tests run one in-process.
#ifndef FERRY_SERVER_FERRY_SERVER_H_
#define FERRY_SERVER_FERRY_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/io/blocking_pool.h"
#include "common/secret.h"
#include "server/base/clock.h"
#include "server/control/control_acceptor.h"
#include "server/control/control_service.h"
#include "server/dataplane/data_server.h"
#include "server/ops/hand_over.h"
#include "server/ops/metrics.h"
#include "server/ops/metrics_exporter.h"
#include "server/spark/spark_front_door.h"
#include "server/storage/block_store.h"
#include "server/tickets/ticket_registry.h"

namespace ferry {

// Each part's options are its own struct, which holds its defaults and validates itself;
// these hold them. ferry_server's flags are declared beside the fields they set
// (server/flags.h).
struct FerryServerOptions {
  std::string data_dir;
  // host:port for each plane; port 0 picks a free one (see the accessors).
  std::string control_address = "127.0.0.1:0";
  std::string data_address = "127.0.0.1:0";
  // The data plane's "host:port" as clients must dial it, when that differs from
  // data_address (NAT, a proxy). Empty: data_address's host and bound port.
  std::string advertise_data_address;
  // The data plane's threads, connection limits and pipes.
  DataServerOptions data;
  ConnectionOptions connection;
  // The disks' readers of what the page cache does not hold.
  DiskReader::Options disks;
  // The map-output cache; Start() sets its data dir and its share of the descriptors.
  BlockStore::Options store;
  // What open streams may hold.
  TicketLimits tickets;
  // The control plane's limits, ticket TTL and auth token; Start() sets the data-plane
  // endpoint and settings it reports.
  ControlServiceOptions control;
  // How often expired streams, deleted files, vanished executors and ended YARN
  // applications are let go of when no call does it.
  absl::Duration sweep_interval = absl::Seconds(5);
  // What the server's own timers read the time from (null: the real clock): streams'
  // expiry on both front doors, the registration rate, the log budgets. Must outlive
  // the server. Tests pass a FakeClock instead of sleeping through a TTL. Deadlines the
  // kernel waits on (I/O, the blocking pool) are real time.
  const Clock* clock = nullptr;
  // PEM certificate chain and private key: when both are set, the control plane speaks
  // only TLS; when both are empty, only plaintext.
  std::string tls_cert_chain;
  Secret tls_private_key;

  // The Spark front door (off without an address): its executors, service, secrets,
  // TLS, YARN applications and blocking threads.
  SparkFrontDoor::Options spark;
  // host:port serving Prometheus metrics at /metrics; empty: off.
  std::string metrics_address;

  // Every part's Validate(), and the checks between them. INVALID_ARGUMENT naming the
  // flag.
  absl::Status Validate() const;
};

// How the descriptors under the process's soft RLIMIT_NOFILE are shared out: a reserve
// for the control plane (gRPC's connections, which gRPC cannot cap) and the threads'
// rings; in splice mode the threads' pipes (--max-pipes, or what the user's pipe budget
// allows, in at most an eighth of the rest); with push-based shuffle, the merged
// partitions being written (three files each) in at most a quarter of the rest; a
// quarter of the rest for data files (cached, or held by open streams); the rest for
// data-plane connections (two descriptors each in splice mode: the socket and, while
// the disk reads for it, its pipe's duplicate; with push-based shuffle, the socket and
// the file a pushed block waits in; one in copy mode without it). Limits that do not
// fit are lowered, never raised.
struct DescriptorPlan {
  uint64_t limit = 0;
  uint64_t reserve = 0;
  size_t max_data_files = 0;
  // The map-output cache (--max-open-files), at most max_data_files.
  size_t max_cached_map_outputs = 0;
  size_t max_connections = 0;
  // The threads' splice pipes in all (0 in copy mode).
  size_t max_pipes = 0;
  // What the Spark front door holds open (SparkFrontDoor::Descriptors: merged
  // partitions being written), as it fits; 0 when it holds none.
  uint64_t spark_units = 0;
  // A sentence per limit lowered, for the start-up log; empty when none was.
  std::string clamped;
  // Whether a limit lowered is one the operator set (not its default): worth a warning.
  // Defaults lowered to fit the machine are the plan working, said at INFO.
  bool clamped_a_setting = false;
};
// INVALID_ARGUMENT when `limit` descriptors cannot serve even one connection.
absl::StatusOr<DescriptorPlan> PlanDescriptors(uint64_t limit, const FerryServerOptions& options);

class FerryServer {
 public:
  // `inherited`: the sockets a server handing over gave this one: listening sockets
  // ("control", "data", "spark"), served instead of binding those planes' addresses
  // where they match them, and connections, served on as its protocols left them.
  static absl::StatusOr<std::unique_ptr<FerryServer>> Start(const FerryServerOptions& options,
                                                            HandedSockets inherited = {});
  // What Start() would check, without listening or writing anything (ferry_server
  // --check-config, while another server may run with the same files): the options, the
  // addresses, the descriptor plan, the data dir, the Spark roots, state dir, secrets,
  // TLS files and YARN hand-off dir. What would be served, a line each; or the first
  // error, naming what is wrong.
  static absl::StatusOr<std::string> CheckConfig(const FerryServerOptions& options);
  FerryServer(const FerryServer&) = delete;
  FerryServer& operator=(const FerryServer&) = delete;
  ~FerryServer();

  // Stops the control plane (in-flight RPCs finish), then the data plane: at once with
  // no `drain`, else gracefully (DataServer::Drain), cutting what is still busy when
  // `drain` runs out. Returns what the drain did (all zero without one, or on a second
  // call): the data-plane connections it closed, let finish or cut. Idempotent.
  DataServer::DrainReport Shutdown(absl::Duration drain = absl::ZeroDuration());

  // A hand-over to a new server (HandOverPoint's Prepare): stops accepting on every plane,
  // keeping the ports (connections wait in the backlogs), stops the control plane (its
  // calls finish) and the metrics endpoint (its port is freed for the new server),
  // releases the data plane's connections within `grace`
  // (DataServer::HandOverConnections), and stops the sweeper, so that nothing writes
  // the state files any more. Returns the listening sockets and the connections
  // released (duplicates: this server keeps its own). ResumeAfterHandOver() undoes it
  // when the new server fails before it serves, serving those connections again; else
  // Shutdown() ends this one, leaving the sockets to the new one.
  absl::StatusOr<HandedSockets> PrepareHandOver(absl::Duration grace);
  void ResumeAfterHandOver();

  uint16_t control_port() const { return control_port_; }
  uint16_t data_port() const { return data_->port(); }
  // The Spark front door's port; 0 when it is off.
  uint16_t spark_port() const { return spark_ != nullptr ? data_->port(1) : 0; }
  // The Spark front door; null when it is off.
  const SparkFrontDoor* spark_door() const { return spark_.get(); }
  SparkFrontDoor* spark_door() { return spark_.get(); }
  // The metrics endpoint's port; 0 when it is off.
  uint16_t metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }
  // Every metric's samples now (what a scrape serves).
  std::vector<MetricFamilySamples> CollectMetrics() const;
  const DataServer& data_server() const { return *data_; }
  // "127.0.0.1:<port>" style address a client can dial for the control plane.
  std::string control_target() const;
  TicketRegistry& tickets() { return *tickets_; }
  // The options as served: descriptor-bound limits lowered to fit (descriptors()).
  const FerryServerOptions& options() const { return options_; }
  const DescriptorPlan& descriptors() const { return descriptors_; }
  BlockStore& store() { return *store_; }

 private:
  FerryServer() = default;

  // Lets go of expired streams and stale cached files every sweep_interval.
  void Sweep();
  // Start()'s parts, in order: the data plane's listeners (Ferry's, the Spark front
  // door's) and threads; the control plane (gRPC) and the metrics.
  absl::Status StartDataPlane(const Clock& clock, HandedSockets& inherited);
  absl::Status StartControlPlane(UniqueFd inherited);
  // gRPC on `listener` (listening), fed by a ControlAcceptor.
  absl::Status ServeControl(UniqueFd listener);
  absl::Status StartMetrics(const std::string& address);
  void StartSweeper();
  void StopSweeper();

  FerryServerOptions options_;
  DescriptorPlan descriptors_;
  std::unique_ptr<BlockStore> store_;
  std::unique_ptr<TicketRegistry> tickets_;
  std::unique_ptr<DiskReader> disks_;
  // The Spark front door (null when it is off). The data plane's threads use it, so it
  // is declared first and outlives it.
  std::unique_ptr<SparkFrontDoor> spark_;
  std::unique_ptr<DataServer> data_;
  // Reads everything above; declared after it so that it stops first.
  std::unique_ptr<MetricsExporter> metrics_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> grpc_;
  // Accepts the control plane's connections into grpc_; stops before it.
  std::unique_ptr<ControlAcceptor> control_acceptor_;
  // While a hand-over is prepared: the control plane's listener, gRPC stopped.
  UniqueFd paused_control_;
  uint16_t handed_metrics_port_ = 0;        // the metrics endpoint's port, to serve it again
  std::vector<HandedConnection> released_;  // the data plane's connections, kept
  bool handing_over_ = false;
  uint16_t control_port_ = 0;
  bool shut_down_ = false;
  absl::Mutex sweep_mu_;
  bool stop_sweeping_ ABSL_GUARDED_BY(sweep_mu_) = false;
  std::thread sweeper_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_FERRY_SERVER_H_
