#include "server/ferry_server.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/net_address.h"
#include "common/option_check.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/dataplane/ferry_protocol.h"
#include "server/dataplane/segment_sender.h"

namespace ferry {

namespace {

// The control plane's listening socket on `address` ("host:port"; the host may be a name).
absl::StatusOr<UniqueFd> ListenControl(const std::string& address) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  absl::StatusOr<SocketAddress> resolved =
      parsed.ok() ? SocketAddress::Resolve(parsed->host, parsed->port) : parsed.status();
  absl::StatusOr<UniqueFd> fd = resolved.ok() ? Listen(*resolved, SOMAXCONN) : resolved.status();
  if (!fd.ok()) {
    return absl::Status(fd.status().code(),
                        absl::StrCat("--control-address: ", fd.status().message()));
  }
  return fd;
}

// A listening socket handed over, if it listens where `address` (a flag's value, `flag`)
// says; else none, and that plane binds its address anew (a flag file changed before a
// reload). A port of 0 or a host that is a name takes whatever was handed over.
UniqueFd IfListeningAt(UniqueFd inherited, const std::string& address, const char* flag) {
  if (!inherited.valid()) return inherited;
  absl::StatusOr<HostPort> wanted = ParseHostPort(address);
  absl::StatusOr<SocketAddress> local = SocketAddress::LocalOf(inherited.get());
  if (!wanted.ok() || !local.ok()) return inherited;
  absl::StatusOr<SocketAddress> numeric = SocketAddress::Numeric(wanted->host, local->port());
  const bool other_port = wanted->port != 0 && wanted->port != local->port();
  const bool other_host = numeric.ok() && numeric->host() != local->host();
  if (!other_port && !other_host) return inherited;
  LOG(INFO) << "ferry_server: " << flag << " is " << address << ", not " << local->ToString()
            << " as handed over: listening there instead";
  return UniqueFd();
}

}  // namespace

absl::StatusOr<DescriptorPlan> PlanDescriptors(uint64_t limit, const FerryServerOptions& options) {
  DescriptorPlan plan;
  plan.limit = limit;
  // gRPC holds a descriptor per control-plane client: a quarter of a small limit, 1,024
  // of a large one. Each data-plane thread holds a ring, and the process a few dozen
  // more (listeners, logs, gRPC's own).
  plan.reserve =
      std::min<uint64_t>(1024, limit / 4) + 64 + 4 * static_cast<uint64_t>(options.data.threads);
  // Splice mode's pipes, pooled by the threads, and per connection its socket and, while
  // the disk reads for it, a duplicate of its pipe (DiskReader); copy mode, the socket.
  // A connection pushing a block to a busy merged partition holds the socket and the
  // file the block waits in.
  const bool splice = options.connection.mode == DataPlaneMode::kSplice;
  const SparkFrontDoor::Descriptors spark = SparkFrontDoor::DescriptorsOf(options.spark);
  const uint64_t per_connection = std::max<uint64_t>(splice ? 2 : 1, 1 + spark.per_connection);
  const uint64_t threads = static_cast<uint64_t>(std::max(options.data.threads, 1));
  const uint64_t least =
      plan.reserve + 1 + 4 * per_connection + (splice ? 2 * threads : 0) + 4 * spark.per_unit;
  if (limit < least) {
    return absl::InvalidArgumentError(absl::StrCat("the open-file limit (RLIMIT_NOFILE) is ", limit,
                                                   " descriptors; ferry_server needs ", "at least ",
                                                   least, " (raise it: LimitNOFILE=)"));
  }
  uint64_t spare = limit - plan.reserve;
  if (splice) {
    // As many as the user's pipe budget allows, two descriptors each, in at most an
    // eighth of the descriptors; at least one per thread.
    const uint64_t wanted = options.data.max_pipes > 0
                                ? options.data.max_pipes
                                : PipeBudget(options.data.pipe_bytes, DataServerOptions::kMaxPipes);
    plan.max_pipes = static_cast<size_t>(
        std::clamp<uint64_t>(wanted, threads, std::max<uint64_t>(threads, spare / 16)));
    spare -= 2 * plan.max_pipes;
  }
  if (spark.per_unit > 0) {
    // What the Spark front door holds open (merged partitions being written), in at most
    // a quarter of the rest.
    plan.spark_units = std::clamp<uint64_t>(spark.units, 1, spare / 4 / spark.per_unit);
    spare -= spark.per_unit * plan.spark_units;
  }
  plan.max_data_files = static_cast<size_t>(spare / 4);
  plan.max_cached_map_outputs = static_cast<size_t>(
      std::clamp<uint64_t>(options.store.max_cached_map_outputs, 1, plan.max_data_files));
  plan.max_connections = static_cast<size_t>(std::clamp<uint64_t>(
      options.data.max_connections, 1, (spare - plan.max_data_files) / per_connection));
  const FerryServerOptions defaults;
  if (options.data.max_pipes > plan.max_pipes) {
    plan.clamped_a_setting |= options.data.max_pipes != defaults.data.max_pipes;
    absl::StrAppend(&plan.clamped, "--max-pipes lowered from ", options.data.max_pipes, " to ",
                    plan.max_pipes, " to fit ", limit, " descriptors. ");
  }
  if (plan.max_cached_map_outputs < options.store.max_cached_map_outputs) {
    plan.clamped_a_setting |=
        options.store.max_cached_map_outputs != defaults.store.max_cached_map_outputs;
    absl::StrAppend(&plan.clamped, "--max-open-files lowered from ",
                    options.store.max_cached_map_outputs, " to ", plan.max_cached_map_outputs,
                    " to fit ", limit, " descriptors. ");
  }
  if (spark.per_unit > 0 && plan.spark_units < spark.units) {
    plan.clamped_a_setting |= !spark.units_are_default;
    absl::StrAppend(&plan.clamped, spark.flag, " lowered from ", spark.units, " to ",
                    plan.spark_units, " to fit ", limit, " descriptors (", spark.per_unit,
                    " each). ");
  }
  if (plan.max_connections < options.data.max_connections) {
    plan.clamped_a_setting |= options.data.max_connections != defaults.data.max_connections;
    absl::StrAppend(&plan.clamped, "--max-connections lowered from ", options.data.max_connections,
                    " to ", plan.max_connections, " to fit ", limit, " descriptors (",
                    per_connection, " per connection). ");
  }
  plan.clamped = std::string(absl::StripTrailingAsciiWhitespace(plan.clamped));
  return plan;
}

absl::Status FerryServerOptions::Validate() const {
  if (data_dir.empty()) return absl::InvalidArgumentError("--data-dir is required");
  if (tls_cert_chain.empty() != tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate chain and its private key, or neither "
        "(--tls-cert-file and --tls-key-file go together)");
  }
  FERRY_RETURN_IF_ERROR(spark.Validate());
  if (sweep_interval < absl::Milliseconds(10) || sweep_interval > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sweep-interval must be between 10ms and 24h, not ",
                     absl::FormatDuration(sweep_interval)));
  }
  FERRY_RETURN_IF_ERROR(data.Validate());
  FERRY_RETURN_IF_ERROR(connection.Validate());
  FERRY_RETURN_IF_ERROR(disks.Validate());
  FERRY_RETURN_IF_ERROR(tickets.Validate());
  FERRY_RETURN_IF_ERROR(control.Validate());
  return CheckRange("max-open-files", store.max_cached_map_outputs, 1, kMaxLimit);
}

absl::StatusOr<std::string> FerryServer::CheckConfig(const FerryServerOptions& options) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  std::string out;
  for (const auto& [flag, address] : std::vector<std::pair<const char*, std::string>>{
           {"control-address", options.control_address},
           {"data-address", options.data_address},
           {"spark-address", options.spark.address},
           {"metrics-address", options.metrics_address}}) {
    if (address.empty()) continue;
    if (absl::StatusOr<HostPort> parsed = ParseHostPort(address); !parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", parsed.status().message()));
    }
    absl::StrAppend(&out, flag, ": ", address, "\n");
  }
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) {
    return absl::ErrnoToStatus(errno, "getrlimit RLIMIT_NOFILE");
  }
  // The hard limit: the server raises its soft limit to it at start.
  FERRY_ASSIGN_OR_RETURN(DescriptorPlan plan, PlanDescriptors(nofile.rlim_max, options));
  absl::StrAppend(&out, "descriptors: ", plan.limit, ", up to ", plan.max_connections,
                  " data-plane connections\n");
  if (!plan.clamped.empty()) absl::StrAppend(&out, "lowered: ", plan.clamped, "\n");
  BlockStore::Options store = options.store;
  store.data_dir = options.data_dir;
  FERRY_RETURN_IF_ERROR(BlockStore::Open(store).status());
  absl::StrAppend(&out, "data dir: ", options.data_dir, " (mode ",
                  AbslUnparseFlag(options.connection.mode), ", ", options.data.threads,
                  " threads)\n");
  absl::StrAppend(&out, "control plane: ", options.tls_cert_chain.empty() ? "plain" : "TLS", ", ",
                  options.control.auth_token.empty() ? "no token" : "token required", "\n");
  if (options.spark.address.empty()) return out;
  FERRY_ASSIGN_OR_RETURN(std::string spark, SparkFrontDoor::Check(options.spark));
  return absl::StrCat(out, spark);
}

absl::StatusOr<std::unique_ptr<FerryServer>> FerryServer::Start(const FerryServerOptions& options,
                                                                HandedSockets inherited) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) {
    return absl::ErrnoToStatus(errno, "getrlimit RLIMIT_NOFILE");
  }
  FERRY_ASSIGN_OR_RETURN(DescriptorPlan plan, PlanDescriptors(nofile.rlim_cur, options));
  std::unique_ptr<FerryServer> server(new FerryServer);
  server->options_ = options;
  server->options_.store.data_dir = options.data_dir;
  server->options_.store.max_cached_map_outputs = plan.max_cached_map_outputs;
  server->options_.store.max_data_files = plan.max_data_files;
  server->options_.data.max_connections = plan.max_connections;
  server->options_.data.max_pipes = plan.max_pipes;
  if (plan.spark_units > 0)
    SparkFrontDoor::FitDescriptors(plan.spark_units, &server->options_.spark);
  server->descriptors_ = std::move(plan);
  FERRY_ASSIGN_OR_RETURN(server->store_, BlockStore::Open(server->options_.store));
  const Clock& clock = options.clock != nullptr ? *options.clock : Clock::Real();
  server->tickets_ = std::make_unique<TicketRegistry>(options.tickets, clock);
  server->disks_ = std::make_unique<DiskReader>(options.disks);

  FERRY_RETURN_IF_ERROR(server->StartDataPlane(clock, inherited));
  FERRY_RETURN_IF_ERROR(server->StartControlPlane(
      IfListeningAt(inherited.Take("control"), options.control_address, "--control-address")));
  // The streams before the connections whose next requests name them.
  if (!inherited.streams.empty()) {
    LOG(INFO) << "ferry_server: serving " << server->service_->TakeStreams(inherited.streams)
              << " streams handed over";
  }
  if (!inherited.connections.empty()) {
    const size_t handed = inherited.connections.size();
    const size_t adopted = server->data_->Adopt(std::move(inherited.connections));
    LOG(INFO) << "ferry_server: serving " << adopted << " of the " << handed
              << " connections handed over";
  }
  server->StartSweeper();
  return server;
}

void FerryServer::StartSweeper() {
  {
    absl::MutexLock lock(&sweep_mu_);
    stop_sweeping_ = false;
  }
  sweeper_ = std::thread([this] { Sweep(); });
}

void FerryServer::StopSweeper() {
  if (!sweeper_.joinable()) return;
  {
    absl::MutexLock lock(&sweep_mu_);
    stop_sweeping_ = true;
  }
  sweeper_.join();
}

absl::Status FerryServer::StartDataPlane(const Clock& clock, HandedSockets& inherited) {
  const FerryServerOptions& options = options_;
  DataServer::Listener ferry_door;
  FERRY_ASSIGN_OR_RETURN(HostPort data_address, ParseHostPort(options.data_address));
  ferry_door.host = data_address.host;
  ferry_door.port = data_address.port;
  ferry_door.origin = "--data-address";
  ferry_door.name = "data";
  ferry_door.handler = [tickets = tickets_.get(), connection = &options_.connection](
                           UniqueFd socket, ConnectionControl& control) {
    ServeFerryConnection(std::move(socket), *tickets, *connection, control);
  };
  ferry_door.refusal = [](const absl::Status& status) { return EncodeErrorFrame(status, 0); };
  ferry_door.inherited =
      IfListeningAt(inherited.Take("data"), options.data_address, "--data-address");
  std::vector<DataServer::Listener> listeners;
  listeners.push_back(std::move(ferry_door));
  if (!options.spark.address.empty()) {
    FERRY_ASSIGN_OR_RETURN(spark_, SparkFrontDoor::Open(options_.spark, store_.get(), clock,
                                                        /*taking_over=*/!inherited.names.empty()));
    options_.spark.executors.dir_roots = spark_->roots();
    FERRY_ASSIGN_OR_RETURN(DataServer::Listener spark_door, spark_->Listener(&options_.connection));
    spark_door.inherited =
        IfListeningAt(inherited.Take("spark"), options.spark.address, "--spark-address");
    listeners.push_back(std::move(spark_door));
  }
  FERRY_ASSIGN_OR_RETURN(data_,
                         DataServer::Start(options_.data, std::move(listeners), disks_.get()));
  return absl::OkStatus();
}

absl::Status FerryServer::StartControlPlane(UniqueFd inherited) {
  const FerryServerOptions& options = options_;
  FERRY_ASSIGN_OR_RETURN(HostPort data_address, ParseHostPort(options.data_address));
  ControlServiceOptions control = options.control;
  control.data_host = data_address.host;
  control.data_port = data_->port();
  if (!options.advertise_data_address.empty()) {
    absl::StatusOr<HostPort> advertised = ParseHostPort(options.advertise_data_address);
    if (!advertised.ok() || advertised->port == 0) {
      data_->Stop();
      return absl::InvalidArgumentError(absl::StrCat(
          "advertised data address '", options.advertise_data_address, "' is not host:port"));
    }
    control.data_host = advertised->host;
    control.data_port = advertised->port;
  }
  control.data_threads = static_cast<uint32_t>(options.data.threads);
  control.splice = options.connection.mode == DataPlaneMode::kSplice;
  control.copy_buffer_bytes = options.connection.copy_buffer_bytes;
  control.io_engine = AbslUnparseFlag(options.connection.engine);
  control.pipe_bytes = options.data.pipe_bytes;
  control.spark_port = spark_ != nullptr ? data_->port(1) : 0;
  options_.control = control;
  service_ = std::make_unique<ControlService>(control, store_.get(), tickets_.get(), spark_.get(),
                                              disks_.get());

  if (!options.metrics_address.empty()) {
    FERRY_RETURN_IF_ERROR(StartMetrics(options.metrics_address));
  }
  if (!inherited.valid()) {
    FERRY_ASSIGN_OR_RETURN(inherited, ListenControl(options.control_address));
  }
  return ServeControl(std::move(inherited));
}

absl::Status FerryServer::StartMetrics(const std::string& address) {
  // civetweb does not say why it cannot listen.
  if (absl::Status can = CheckCanListen(address); !can.ok()) {
    return absl::Status(can.code(), absl::StrCat("--metrics-address: ", can.message()));
  }
  FERRY_ASSIGN_OR_RETURN(metrics_,
                         MetricsExporter::Start(address, [this] { return CollectMetrics(); }));
  service_->set_metrics_port(metrics_->port());
  return absl::OkStatus();
}

absl::Status FerryServer::ServeControl(UniqueFd listener) {
  const FerryServerOptions& options = options_;

  // gRPC's standard health service (SERVING until a drain begins) and server reflection,
  // so standard gRPC tooling works against the control plane.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_chain.empty()) {
    grpc::SslServerCredentialsOptions tls;
    tls.pem_key_cert_pairs.push_back(
        {std::string(options.tls_private_key.view()), options.tls_cert_chain});
    credentials = grpc::SslServerCredentials(tls);
  }
  // The listening socket is the server's (ControlAcceptor), so that it can stop accepting
  // without leaving the port and hand the socket over; gRPC serves what it accepts.
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> to_grpc =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
  // Large fetches make large handles; clients accept the same size.
  builder.SetMaxReceiveMessageSize(kMaxControlMessageBytes);
  builder.SetMaxSendMessageSize(kMaxControlMessageBytes);
  // A control-plane client that goes quiet gives its descriptor back.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 5 * 60 * 1000);
  builder.RegisterService(service_.get());
  grpc_ = builder.BuildAndStart();
  if (grpc_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "--control-address: cannot serve the control plane on ", options.control_address));
  }
  absl::StatusOr<SocketAddress> local = SocketAddress::LocalOf(listener.get());
  if (!local.ok()) return local.status();
  control_port_ = local->port();
  FERRY_ASSIGN_OR_RETURN(control_acceptor_,
                         ControlAcceptor::Start(std::move(listener), std::move(to_grpc)));
  return absl::OkStatus();
}

std::vector<MetricFamilySamples> FerryServer::CollectMetrics() const {
  // Each part declares the families it counts; the server adds its own two.
  std::vector<MetricFamilySamples> out;
  const std::string mode = AbslUnparseFlag(options_.connection.mode);
  data_->AppendMetrics(mode, &out);
  service_->AppendMetrics(&out);
  tickets_->AppendMetrics(&out);
  store_->AppendMetrics(&out);
  disks_->AppendMetrics(&out);
  if (spark_ != nullptr) spark_->AppendMetrics(&out);
  out.emplace_back("ferry_build_info", "The server's version and data-plane settings.",
                   MetricKind::kGauge,
                   std::vector<MetricSample>{
                       MetricSample({{"version", kFerryVersion},
                                     {"mode", mode},
                                     {"io_engine", AbslUnparseFlag(options_.connection.engine)}},
                                    1)});
  return out;
}

std::string FerryServer::control_target() const {
  absl::StatusOr<HostPort> address = ParseHostPort(options_.control_address);
  std::string host = address.ok() ? address->host : "127.0.0.1";
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  return FormatHostPort(host, control_port_);
}

void FerryServer::Sweep() {
  const absl::Duration interval = options_.sweep_interval;
  sweep_mu_.Lock();
  while (!sweep_mu_.AwaitWithTimeout(absl::Condition(&stop_sweeping_), interval)) {
    sweep_mu_.Unlock();
    tickets_->SweepExpired();
    store_->DropStale();
    if (spark_ != nullptr) spark_->Sweep();
    sweep_mu_.Lock();
  }
  sweep_mu_.Unlock();
}

absl::StatusOr<HandedSockets> FerryServer::PrepareHandOver(absl::Duration grace) {
  if (shut_down_ || handing_over_ || control_acceptor_ == nullptr) {
    return absl::FailedPreconditionError("this server is stopping");
  }
  handing_over_ = true;
  control_acceptor_->Pause();
  data_->PauseAccepting();
  if (grpc::HealthCheckServiceInterface* health = grpc_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  // The control plane's calls finish (bounded) while the data plane's connections end.
  std::thread control(
      [this] { grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1)); });
  DataServer::HandOverReport handed = data_->HandOverConnections(grace);
  control.join();
  paused_control_ = control_acceptor_->Release();
  control_acceptor_.reset();
  grpc_.reset();
  handed_metrics_port_ = metrics_port();
  metrics_.reset();
  StopSweeper();
  if (spark_ != nullptr) {
    if (absl::Status left = spark_->PrepareHandOver(); !left.ok()) {
      LOG(WARNING) << "ferry_server: handing over without the merges being written: " << left;
    }
  }
  const DataServer::DrainReport& drained = handed.drained;
  const size_t seen = drained.idle + drained.finished + drained.cut;
  LOG(INFO) << "ferry_server: handing over: " << handed.released.size() << " connections released, "
            << seen - std::min(seen, handed.released.size() + drained.cut)
            << " closed (sealed, or their peer's), " << drained.cut << " cut, in "
            << absl::FormatDuration(absl::Trunc(drained.took, absl::Milliseconds(1)));
  released_ = std::move(handed.released);
  HandedSockets out;
  out.streams = service_->HandOverStreams();
  for (const HandedConnection& c : released_) {
    out.connections.push_back(
        HandedConnection{.plane = c.plane,
                         .socket = UniqueFd(::fcntl(c.socket.get(), F_DUPFD_CLOEXEC, 0)),
                         .state = c.state});
    if (!out.connections.back().socket.valid()) {
      return absl::ErrnoToStatus(errno, "duplicate a connection to hand over");
    }
  }
  out.names.push_back("control");
  out.fds.emplace_back(::fcntl(paused_control_.get(), F_DUPFD_CLOEXEC, 0));
  FERRY_ASSIGN_OR_RETURN(std::vector<UniqueFd> data, data_->Listeners());
  out.names.push_back("data");
  if (spark_ != nullptr) out.names.push_back("spark");
  for (UniqueFd& fd : data) out.fds.push_back(std::move(fd));
  for (const UniqueFd& fd : out.fds) {
    if (!fd.valid()) return absl::ErrnoToStatus(errno, "duplicate a listening socket");
  }
  return out;
}

void FerryServer::ResumeAfterHandOver() {
  if (!handing_over_ || shut_down_) return;
  if (!paused_control_.valid()) {
    LOG(ERROR) << "ferry_server: the control plane cannot serve again: its socket is gone";
  } else if (absl::Status served = ServeControl(std::move(paused_control_)); !served.ok()) {
    LOG(ERROR) << "ferry_server: the control plane cannot serve again: " << served;
  }
  if (!options_.metrics_address.empty()) {
    absl::StatusOr<HostPort> configured = ParseHostPort(options_.metrics_address);
    const std::string same = configured.ok() && handed_metrics_port_ != 0
                                 ? FormatHostPort(configured->host, handed_metrics_port_)
                                 : options_.metrics_address;
    if (absl::Status started = StartMetrics(same); !started.ok()) {
      LOG(ERROR) << "ferry_server: the metrics endpoint cannot serve again: " << started;
    }
  }
  if (spark_ != nullptr) spark_->ResumeAfterHandOver();
  data_->ResumeAccepting();
  data_->Adopt(std::move(released_));
  released_.clear();
  StartSweeper();
  handing_over_ = false;
}

DataServer::DrainReport FerryServer::Shutdown(absl::Duration drain) {
  if (shut_down_) return {};
  shut_down_ = true;
  StopSweeper();
  // Control RPCs take milliseconds; the deadline bounds a stuck one (gRPC cancels it),
  // and gRPC's wait for clients to drop their idle channels, which it otherwise sits
  // out in full.
  const auto control_deadline = std::chrono::system_clock::now() + std::chrono::seconds(1);
  if (control_acceptor_ != nullptr) control_acceptor_->Stop();
  if (handing_over_) {
    // Handed over (or stopping half way): the listening sockets and the connections
    // released are the new server's too, so they are closed here, never shut down, and
    // nothing is left to drain. (A copy kept would keep a connection the new server
    // closes open.)
    if (data_ != nullptr) data_->Stop();
    released_.clear();
    paused_control_.Reset();
    return {};
  }
  if (grpc_ == nullptr || data_ == nullptr) {
    // Start() failed part way (a port in use, say): stop whatever did start.
    if (grpc_ != nullptr) grpc_->Shutdown(control_deadline);
    if (data_ != nullptr) data_->Stop();
    return {};
  }
  if (drain <= absl::ZeroDuration()) {
    grpc_->Shutdown(control_deadline);
    data_->Stop();
    return {};
  }
  // Health checks say NOT_SERVING from the start of a drain, until the control plane
  // stops answering.
  if (grpc::HealthCheckServiceInterface* health = grpc_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  // Both planes stop accepting at once; the data plane's drain does not wait for gRPC.
  std::thread control([this, control_deadline] { grpc_->Shutdown(control_deadline); });
  const DataServer::DrainReport report = data_->Drain(drain);
  control.join();
  return report;
}

FerryServer::~FerryServer() { Shutdown(); }

}  // namespace ferry
