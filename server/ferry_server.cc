#include "server/ferry_server.h"

#include <sys/stat.h>

#include <thread>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"

namespace ferry {

absl::StatusOr<std::unique_ptr<FerryServer>> FerryServer::Start(const FerryServerOptions& options) {
  struct stat st;
  if (::stat(options.data_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data dir '", options.data_dir, "' is not a directory"));
  }
  if (options.tls_cert_chain.empty() != options.tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate chain and its private key, or neither");
  }
  std::unique_ptr<FerryServer> server(new FerryServer);
  server->options_ = options;
  server->store_ = std::make_unique<BlockStore>(
      BlockStore::Options{.data_dir = options.data_dir, .max_open_files = options.max_open_files});
  server->tickets_ = std::make_unique<TicketRegistry>();

  DataServerOptions data;
  if (absl::Status s = ParseHostPort(options.data_address, &data.host, &data.port); !s.ok()) {
    return s;
  }
  data.threads = options.threads;
  data.max_connections = options.max_connections;
  data.scheduler.max_bounded_workers = options.max_iowq_workers;
  data.scheduler.max_unbounded_workers = options.max_iowq_workers;
  data.scheduler.idle_poll = options.idle_poll;
  data.connection = options.connection;
  absl::StatusOr<std::unique_ptr<DataServer>> data_server =
      DataServer::Start(data, server->tickets_.get());
  if (!data_server.ok()) return data_server.status();
  server->data_ = *std::move(data_server);

  ControlServiceOptions control;
  control.data_host = data.host;
  control.data_port = server->data_->port();
  if (!options.advertise_data_address.empty()) {
    if (absl::Status s = ParseHostPort(options.advertise_data_address, &control.data_host,
                                       &control.data_port);
        !s.ok() || control.data_port == 0) {
      server->data_->Stop();
      return absl::InvalidArgumentError(absl::StrCat(
          "advertised data address '", options.advertise_data_address, "' is not host:port"));
    }
  }
  control.data_threads = static_cast<uint32_t>(options.threads);
  control.connection = options.connection;
  control.ticket_ttl = options.ticket_ttl;
  control.max_open_streams = options.max_open_streams;
  control.auth_token = options.auth_token;
  server->service_ =
      std::make_unique<ControlService>(control, server->store_.get(), server->tickets_.get());

  grpc::ServerBuilder builder;
  int selected_port = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_chain.empty()) {
    grpc::SslServerCredentialsOptions tls;
    tls.pem_key_cert_pairs.push_back({options.tls_private_key, options.tls_cert_chain});
    credentials = grpc::SslServerCredentials(tls);
  }
  builder.AddListeningPort(options.control_address, credentials, &selected_port);
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind the same port
  // and answer a share of the calls; with it off, the second one fails to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(server->service_.get());
  server->grpc_ = builder.BuildAndStart();
  if (server->grpc_ == nullptr || selected_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the control plane on ", options.control_address,
                     " (is another server on this port?)"));
  }
  server->control_port_ = static_cast<uint16_t>(selected_port);
  return server;
}

std::string FerryServer::control_target() const {
  std::string host;
  uint16_t port = 0;
  if (!ParseHostPort(options_.control_address, &host, &port).ok() || host == "0.0.0.0" ||
      host.empty() || host == "[::]") {
    host = "127.0.0.1";
  }
  return absl::StrCat(host, ":", control_port_);
}

size_t FerryServer::Shutdown(absl::Duration drain) {
  if (shut_down_) return 0;
  shut_down_ = true;
  // Control RPCs take milliseconds; the deadline bounds a stuck one (gRPC cancels it),
  // and gRPC's wait for clients to drop their idle channels, which it otherwise sits
  // out in full.
  const auto control_deadline = std::chrono::system_clock::now() + std::chrono::seconds(1);
  if (grpc_ == nullptr || data_ == nullptr) {
    // Start() failed part way (a port in use, say): stop whatever did start.
    if (grpc_ != nullptr) grpc_->Shutdown(control_deadline);
    if (data_ != nullptr) data_->Stop();
    return 0;
  }
  if (drain <= absl::ZeroDuration()) {
    grpc_->Shutdown(control_deadline);
    data_->Stop();
    return 0;
  }
  // Both planes stop accepting at once; the data plane's drain does not wait for gRPC.
  std::thread control([this, control_deadline] { grpc_->Shutdown(control_deadline); });
  const size_t cut = data_->Drain(drain);
  control.join();
  return cut;
}

FerryServer::~FerryServer() { Shutdown(); }

}  // namespace ferry
