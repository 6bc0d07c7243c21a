#include "client/control_client.h"

#include <grpcpp/create_channel.h>

#include <grpcpp/security/credentials.h>
#include <chrono>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/control_plane.h"
#include "common/grpc_status.h"
#include "proto/health.grpc.pb.h"

namespace ferry {

namespace {

// Prefixes an RPC error with the call and the server it went to.
absl::Status Annotate(const grpc::Status& status, absl::string_view call,
                      const std::string& server) {
  absl::Status s = FromGrpcStatus(status);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(call, " to ", server, ": ", s.message()));
}

// gRPC serves the callback API from a process-wide completion queue that the channels
// using it hold a reference to; when the last of them goes, gRPC shuts the queue down
// and joins its threads, racing callbacks still running on them ("assertion failed:
// prior > 0"). One channel that has used the callback API, kept for the life of the
// process, keeps the queue up.
void PinCallbackQueue() {
  static std::once_flag once;
  std::call_once(once, [] {
    static std::shared_ptr<grpc::Channel>* const pin = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
    auto* context = new grpc::ClientContext;
    context->set_deadline(std::chrono::system_clock::now());
    auto* request = new ferry::v1::ServerInfoRequest;
    auto* response = new ferry::v1::ServerInfo;
    static std::unique_ptr<ferry::v1::Ferry::Stub>* const stub =
        new std::unique_ptr<ferry::v1::Ferry::Stub>(ferry::v1::Ferry::NewStub(*pin));
    // Its deadline has passed: it ends at once, without a connection.
    (*stub)->async()->GetServerInfo(context, request, response,
                                    [context, request, response](grpc::Status) {
                                      delete response;
                                      delete request;
                                      delete context;
                                    });
  });
}

}  // namespace

ControlClient::~ControlClient() {
  absl::MutexLock lock(&calls_mu_);
  for (grpc::ClientContext* context : calls_) context->TryCancel();
  calls_mu_.Await(absl::Condition(this, &ControlClient::NoCalls));
}

void ControlClient::BeginCall(grpc::ClientContext* context) {
  PinCallbackQueue();
  absl::MutexLock lock(&calls_mu_);
  calls_.insert(context);
}

void ControlClient::EndCall(grpc::ClientContext* context) {
  absl::MutexLock lock(&calls_mu_);
  calls_.erase(context);
}

void ControlClient::Prepare(grpc::ClientContext& context) const {
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  if (!options_.auth_token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.auth_token.view()));
  }
}

std::unique_ptr<ferry::v1::Ferry::Stub> ControlClient::Stub(const std::string& server) {
  return ferry::v1::Ferry::NewStub(Channel(server));
}

std::shared_ptr<grpc::Channel> ControlClient::Channel(const std::string& server) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[server];
  if (channel == nullptr) {
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    if (options_.tls_root_certs.empty()) {
      credentials = grpc::InsecureChannelCredentials();
    } else {
      grpc::SslCredentialsOptions tls;
      tls.pem_root_certs = options_.tls_root_certs;
      credentials = grpc::SslCredentials(tls);
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxControlMessageBytes);
    args.SetMaxSendMessageSize(kMaxControlMessageBytes);
    channel = grpc::CreateCustomChannel(server, credentials, args);
  }
  return channel;
}

absl::StatusOr<bool> ControlClient::CheckHealth(const std::string& server) {
  grpc::ClientContext context;
  Prepare(context);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status =
      grpc::health::v1::Health::NewStub(Channel(server))->Check(&context, request, &response);
  if (!status.ok()) return Annotate(status, "health check", server);
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

namespace {

// What one call on gRPC's callback API holds until its callback has run.
template <typename Request, typename Response>
struct AsyncCall {
  grpc::ClientContext context;
  Request request;
  Response response;
  std::unique_ptr<ferry::v1::Ferry::Stub> stub;
};

template <typename Call>
ControlClient::CancelCall CancelOf(const std::shared_ptr<Call>& call) {
  return [weak = std::weak_ptr<Call>(call)] {
    if (std::shared_ptr<Call> live = weak.lock()) live->context.TryCancel();
  };
}

// The handle, when it answers `request`: everything later trusts its lengths (buffers
// are sized by them, verifiers walk its partitions).
absl::StatusOr<ferry::v1::StreamHandle> CheckHandle(const std::string& server,
                                                    const ferry::v1::OpenStreamRequest& request,
                                                    ferry::v1::StreamHandle handle) {
  if (handle.ticket().size() != 16 || handle.blocks_size() != request.blocks_size() ||
      handle.data_port() == 0 || handle.data_port() > 65535) {
    return absl::InternalError(
        absl::StrCat("OpenStream to ", server, ": malformed stream handle (ticket of ",
                     handle.ticket().size(), " bytes, ", handle.blocks_size(), " of ",
                     request.blocks_size(), " blocks, data port ", handle.data_port(), ")"));
  }
  // Each block must be the one asked for, and its partitions, when listed, exactly its
  // reduce range, adding up to its length.
  for (int i = 0; i < handle.blocks_size(); ++i) {
    const ferry::v1::BlockInfo& info = handle.blocks(i);
    const ferry::v1::BlockId& want = request.blocks(i);
    const ferry::v1::BlockId& got = info.id();
    bool ok = got.shuffle_id() == want.shuffle_id() && got.map_id() == want.map_id() &&
              got.start_reduce_id() == want.start_reduce_id() &&
              got.end_reduce_id() == want.end_reduce_id();
    if (ok && info.partitions_size() > 0) {
      ok =
          int64_t{info.partitions_size()} == int64_t{want.end_reduce_id()} - want.start_reduce_id();
      uint64_t sum = 0;
      for (const ferry::v1::PartitionChecksum& p : info.partitions()) {
        ok = ok && p.length() <= info.length() - sum;
        if (ok) sum += p.length();
      }
      ok = ok && sum == info.length();
    }
    if (!ok) {
      return absl::InternalError(absl::StrCat(
          "OpenStream to ", server, ": malformed stream handle: block ", i,
          " is not the block asked for, or its partitions do not add up to its length"));
    }
  }
  return handle;
}

}  // namespace

template <typename Request, typename Response, typename Invoke, typename Finish>
ControlClient::CancelCall ControlClient::StartCall(const std::string& server, Request request,
                                                   Invoke invoke, Finish finish) {
  using Call = AsyncCall<Request, Response>;
  auto call = std::make_shared<Call>();
  call->request = std::move(request);
  Prepare(call->context);
  call->stub = Stub(server);
  CancelCall cancel = CancelOf(call);
  Call* c = call.get();
  BeginCall(&c->context);
  invoke(*c->stub->async(), &c->context, &c->request, &c->response,
         [this, call = std::move(call), finish = std::move(finish)](grpc::Status status) {
           finish(status, *call);
           call->stub.reset();  // this client's channel outlives it (see ~ControlClient)
           EndCall(&call->context);
         });
  return cancel;
}

ControlClient::CancelCall ControlClient::StartOpenStream(
    const std::string& server, const std::string& app_id, const std::vector<BlockId>& blocks,
    const std::string& spark_exec_id,
    absl::AnyInvocable<void(absl::StatusOr<ferry::v1::StreamHandle>)> done) {
  ferry::v1::OpenStreamRequest request;
  request.set_app_id(app_id);
  request.set_spark_exec_id(spark_exec_id);
  for (const BlockId& b : blocks) {
    ferry::v1::BlockId* id = request.add_blocks();
    id->set_shuffle_id(b.shuffle_id);
    id->set_map_id(b.map_id);
    id->set_start_reduce_id(b.start_reduce_id);
    id->set_end_reduce_id(b.end_reduce_id);
  }
  // std::function must be copyable; `done` is not.
  auto finish = std::make_shared<decltype(done)>(std::move(done));
  return StartCall<ferry::v1::OpenStreamRequest, ferry::v1::StreamHandle>(
      server, std::move(request),
      [](auto& async, auto* context, auto* req, auto* response, auto callback) {
        async.OpenStream(context, req, response, std::move(callback));
      },
      [finish, server](const grpc::Status& status, auto& call) {
        if (!status.ok()) {
          (*finish)(Annotate(status, "OpenStream", server));
        } else {
          (*finish)(CheckHandle(server, call.request, std::move(call.response)));
        }
      });
}

absl::StatusOr<ferry::v1::StreamHandle> ControlClient::OpenStream(
    const std::string& server, const std::string& app_id, const std::vector<BlockId>& blocks,
    const std::string& spark_exec_id) {
  absl::StatusOr<ferry::v1::StreamHandle> result;
  absl::Notification finished;
  StartOpenStream(server, app_id, blocks, spark_exec_id,
                  [&](absl::StatusOr<ferry::v1::StreamHandle> handle) {
                    result = std::move(handle);
                    finished.Notify();
                  });
  finished.WaitForNotification();
  return result;
}

ControlClient::CancelCall ControlClient::StartCloseStream(
    const std::string& server, const std::string& ticket,
    absl::AnyInvocable<void(absl::Status)> done) {
  ferry::v1::CloseStreamRequest request;
  request.set_ticket(ticket);
  auto finish = std::make_shared<decltype(done)>(std::move(done));
  return StartCall<ferry::v1::CloseStreamRequest, ferry::v1::CloseStreamResponse>(
      server, std::move(request),
      [](auto& async, auto* context, auto* req, auto* response, auto callback) {
        async.CloseStream(context, req, response, std::move(callback));
      },
      [finish, server](const grpc::Status& status, auto&) {
        (*finish)(Annotate(status, "CloseStream", server));
      });
}

absl::Status ControlClient::CloseStream(const std::string& server, const std::string& ticket) {
  absl::Status result;
  absl::Notification finished;
  StartCloseStream(server, ticket, [&](absl::Status status) {
    result = std::move(status);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

absl::StatusOr<ferry::v1::ListShufflesResponse> ControlClient::ListShuffles(
    const std::string& server, const std::string& app_id) {
  ferry::v1::ListShufflesRequest request;
  request.set_app_id(app_id);
  grpc::ClientContext context;
  Prepare(context);
  ferry::v1::ListShufflesResponse response;
  grpc::Status status = Stub(server)->ListShuffles(&context, request, &response);
  if (!status.ok()) return Annotate(status, "ListShuffles", server);
  return response;
}

absl::StatusOr<ferry::v1::ListAppsResponse> ControlClient::ListApps(const std::string& server) {
  grpc::ClientContext context;
  Prepare(context);
  ferry::v1::ListAppsResponse response;
  grpc::Status status = Stub(server)->ListApps(&context, ferry::v1::ListAppsRequest(), &response);
  if (!status.ok()) return Annotate(status, "ListApps", server);
  return response;
}

absl::StatusOr<ferry::v1::ServerInfo> ControlClient::GetServerInfo(const std::string& server) {
  grpc::ClientContext context;
  Prepare(context);
  ferry::v1::ServerInfo info;
  grpc::Status status =
      Stub(server)->GetServerInfo(&context, ferry::v1::ServerInfoRequest(), &info);
  if (!status.ok()) return Annotate(status, "GetServerInfo", server);
  return info;
}

absl::StatusOr<ferry::v1::CorruptionDiagnosis> ControlClient::DiagnoseCorruption(
    const std::string& server, const std::string& app_id, const BlockId& partition,
    uint32_t received_checksum, const std::string& spark_exec_id) {
  ferry::v1::DiagnoseCorruptionRequest request;
  request.set_app_id(app_id);
  request.set_spark_exec_id(spark_exec_id);
  ferry::v1::BlockId* id = request.mutable_block();
  id->set_shuffle_id(partition.shuffle_id);
  id->set_map_id(partition.map_id);
  id->set_start_reduce_id(partition.start_reduce_id);
  id->set_end_reduce_id(partition.end_reduce_id);
  request.set_received_checksum(received_checksum);
  grpc::ClientContext context;
  Prepare(context);
  ferry::v1::CorruptionDiagnosis response;
  grpc::Status status = Stub(server)->DiagnoseCorruption(&context, request, &response);
  if (!status.ok()) return Annotate(status, "DiagnoseCorruption", server);
  return response;
}

absl::StatusOr<ferry::v1::RemoveSparkAppResponse> ControlClient::RemoveSparkApp(
    const std::string& server, const ferry::v1::RemoveSparkAppRequest& request) {
  grpc::ClientContext context;
  Prepare(context);
  ferry::v1::RemoveSparkAppResponse response;
  grpc::Status status = Stub(server)->RemoveSparkApp(&context, request, &response);
  if (!status.ok()) return Annotate(status, "RemoveSparkApp", server);
  return response;
}

}  // namespace ferry
