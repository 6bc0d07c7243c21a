#include "server/control/control_service.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <glog/logging.h>

#include "absl/algorithm/container.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/net_address.h"
#include "common/option_check.h"
#include "common/status_macros.h"
#include "server/storage/ids.h"

namespace ferry {

namespace {

ferry::v1::ChecksumAlgorithm ToProto(ChecksumAlgorithm a) {
  return static_cast<ferry::v1::ChecksumAlgorithm>(static_cast<int>(a));
}

absl::StatusOr<Ticket> ParseTicket(const std::string& bytes) {
  if (bytes.size() != kTicketBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ticket is ", bytes.size(), " bytes, not ", kTicketBytes));
  }
  Ticket t;
  std::copy(bytes.begin(), bytes.end(), t.begin());
  return t;
}

}  // namespace

absl::Status ControlServiceOptions::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckPositive("ticket-ttl", ticket_ttl));
  if (max_heavy_calls < 1 || max_blocks_per_stream < 1 || max_partitions_per_stream < 1) {
    return absl::InvalidArgumentError("the control plane's limits must be at least 1");
  }
  return absl::OkStatus();
}

grpc::Status ControlService::Authorize(const grpc::ServerContext* context) const {
  if (options_.auth_token.empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    absl::string_view value(it->second.data(), it->second.size());
    if (absl::ConsumePrefix(&value, "Bearer ") && options_.auth_token == value) {
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong auth token (metadata 'authorization: Bearer <token>')");
}

ControlService::ControlService(ControlServiceOptions options, BlockStore* store,
                               TicketRegistry* tickets, SparkApps* spark, const DiskReader* disks)
    : options_(std::move(options)), store_(store), tickets_(tickets), spark_(spark), disks_(disks) {
  if (options_.data_host == "0.0.0.0" || options_.data_host == "::") options_.data_host.clear();
}

std::string ClientOfPeer(const std::string& peer) {
  // gRPC's peers are "ipv4:10.0.0.7:51234" and "ipv6:[fd00::2]:51234".
  const size_t scheme = peer.find(':');
  if (scheme == std::string::npos) return peer;
  absl::StatusOr<HostPort> address = ParseHostPort(absl::string_view(peer).substr(scheme + 1));
  if (!address.ok()) return peer;  // "unix:/path" and the like: no port to strip
  return absl::StrCat(peer.substr(0, scheme + 1), address->host);
}

grpc::Status ControlService::Call(const grpc::ServerContext* context, Rpc rpc, Cost cost,
                                  absl::FunctionRef<grpc::Status()> body) {
  stats_.calls[static_cast<size_t>(rpc)].Add();
  if (grpc::Status auth = Authorize(context); !auth.ok()) return auth;
  if (cost == Cost::kLight) return body();
  {
    absl::MutexLock lock(&heavy_mu_);
    if (!heavy_mu_.AwaitWithTimeout(absl::Condition(this, &ControlService::HeavyCallFree),
                                    options_.heavy_call_wait)) {
      return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
          "server busy: ", options_.max_heavy_calls,
          " OpenStream, ListShuffles, ListApps, DiagnoseCorruption and RemoveSparkApp calls "
          "running; "
          "retry later")));
    }
    ++heavy_calls_;
  }
  grpc::Status status = body();
  {
    absl::MutexLock lock(&heavy_mu_);
    --heavy_calls_;
  }
  return status;
}

grpc::Status ControlService::ServerSideFailure(const grpc::ServerContext& context, Rpc rpc,
                                               const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown: {
      uint64_t held_back = 0;
      if (failure_log_.Take(absl::Now(), &held_back)) {
        LOG(WARNING) << RpcName(rpc) << " from " << LogEscaped(context.peer())
                     << " failed: " << LogEscaped(status.ToString())
                     << (held_back > 0 ? absl::StrCat(" (", held_back, " more not logged)") : "");
      }
      break;
    }
    default:
      break;
  }
  return ToGrpcStatus(status);
}

grpc::Status ControlService::OpenStream(grpc::ServerContext* context,
                                        const ferry::v1::OpenStreamRequest* request,
                                        ferry::v1::StreamHandle* response) {
  return Call(context, Rpc::kOpenStream, Cost::kHeavy,
              [&] { return OpenStreamAdmitted(*context, *request, response); });
}

grpc::Status ControlService::OpenStreamAdmitted(const grpc::ServerContext& context,
                                                const ferry::v1::OpenStreamRequest& request,
                                                ferry::v1::StreamHandle* response) {
  if (absl::Status s = CheckAppId(request.app_id()); !s.ok()) return ToGrpcStatus(s);
  if (request.blocks_size() == 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("OpenStream names no blocks"));
  }
  if (static_cast<size_t>(request.blocks_size()) > options_.max_blocks_per_stream) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("OpenStream names ", request.blocks_size(), " blocks; the limit is ",
                     options_.max_blocks_per_stream, ": split the fetch into several streams")));
  }
  // Counted before anything is resolved: the handle holds one entry per partition.
  uint64_t partitions = 0;
  for (const ferry::v1::BlockId& id : request.blocks()) {
    partitions += static_cast<uint64_t>(
        std::max<int64_t>(0, int64_t{id.end_reduce_id()} - id.start_reduce_id()));
  }
  if (partitions > options_.max_partitions_per_stream) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "OpenStream's blocks cover ", partitions, " partitions; the limit is ",
        options_.max_partitions_per_stream, ": split the fetch into several streams")));
  }
  std::vector<BlockId> keys;
  keys.reserve(static_cast<size_t>(request.blocks_size()));
  for (const ferry::v1::BlockId& id : request.blocks()) {
    keys.push_back({id.shuffle_id(), id.map_id(), id.start_reduce_id(), id.end_reduce_id()});
  }
  absl::StatusOr<std::vector<ResolvedBlock>> resolved =
      Resolve(request.app_id(), request.spark_exec_id(), keys);
  if (!resolved.ok()) return ServerSideFailure(context, Rpc::kOpenStream, resolved.status());
  auto stream = std::make_shared<Stream>();
  stream->app_id = request.app_id();
  stream->spark_exec_id = request.spark_exec_id();
  stream->client = ClientOfPeer(context.peer());
  stream->blocks.reserve(resolved->size());
  response->mutable_blocks()->Reserve(request.blocks_size());
  for (size_t i = 0; i < resolved->size(); ++i) {
    ResolvedBlock& r = (*resolved)[i];
    const MapOutputIndex& index = *r.index;
    ferry::v1::BlockInfo* info = response->add_blocks();
    *info->mutable_id() = request.blocks(static_cast<int>(i));
    info->set_length(r.block.length);
    info->set_checksum_algorithm(ToProto(index.checksum_algorithm()));
    if (index.checksum_algorithm() != ChecksumAlgorithm::kNone) {
      const size_t start = static_cast<size_t>(r.block.id.start_reduce_id);
      const size_t end = static_cast<size_t>(r.block.id.end_reduce_id);
      info->mutable_partitions()->Reserve(static_cast<int>(end - start));
      for (size_t p = start; p < end; ++p) {
        ferry::v1::PartitionChecksum* pc = info->add_partitions();
        pc->set_length(index.RangeLength(p, p + 1));
        pc->set_checksum(index.checksums()[p]);
      }
    }
    stream->blocks.push_back(std::move(r.block));
  }
  resolved->clear();
  // Checked before the stream is registered, so a handle no client could receive never
  // leaves an open stream behind. The fields still to come add under 100 bytes.
  const size_t handle_bytes = response->ByteSizeLong() + 100;
  if (handle_bytes > static_cast<size_t>(kMaxControlMessageBytes)) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "OpenStream's handle would be ", handle_bytes, " bytes, over the ", kMaxControlMessageBytes,
        "-byte message limit: split the fetch into several streams")));
  }
  stream->expires = tickets_->clock().Now() + options_.ticket_ttl;
  const int64_t expires_ms = absl::ToUnixMillis(stream->expires);
  absl::StatusOr<Ticket> ticket = tickets_->Register(std::move(stream));
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  response->set_ticket(std::string(ticket->begin(), ticket->end()));
  response->set_data_host(options_.data_host);
  response->set_data_port(options_.data_port);
  response->set_expires_unix_ms(expires_ms);
  return grpc::Status::OK;
}

// A line per stream, tab-separated: ticket (hex), application, Spark executor, client,
// expiry (Unix ns), and its blocks as shuffle:map:start:end, comma-separated; the
// strings C-escaped.
std::string ControlService::HandOverStreams() const {
  std::string text;
  for (const auto& [ticket, stream] : tickets_->Live()) {
    absl::StrAppend(&text,
                    absl::BytesToHexString(absl::string_view(
                        reinterpret_cast<const char*>(ticket.data()), ticket.size())),
                    "\t", absl::CEscape(stream->app_id), "\t", absl::CEscape(stream->spark_exec_id),
                    "\t", absl::CEscape(stream->client), "\t", absl::ToUnixNanos(stream->expires),
                    "\t");
    for (size_t i = 0; i < stream->blocks.size(); ++i) {
      const BlockId& id = stream->blocks[i].id;
      absl::StrAppend(&text, i == 0 ? "" : ",", id.shuffle_id, ":", id.map_id, ":",
                      id.start_reduce_id, ":", id.end_reduce_id);
    }
    text += "\n";
  }
  return text;
}

size_t ControlService::TakeStreams(absl::string_view streams) {
  size_t taken = 0;
  size_t dropped = 0;
  std::string first_drop;
  for (absl::string_view line : absl::StrSplit(streams, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    auto stream = std::make_shared<Stream>();
    std::string ticket_bytes;
    int64_t expires_ns = 0;
    absl::Status status;
    if (f.size() != 6 || f[0].size() != 2 * kTicketBytes ||
        !absl::c_all_of(f[0], [](char c) { return absl::ascii_isxdigit(c); }) ||
        !absl::CUnescape(f[1], &stream->app_id) || !absl::CUnescape(f[2], &stream->spark_exec_id) ||
        !absl::CUnescape(f[3], &stream->client) || !absl::SimpleAtoi(f[4], &expires_ns)) {
      status = absl::InvalidArgumentError("not a stream handed over");
    }
    std::vector<BlockId> keys;
    for (absl::string_view block : absl::StrSplit(f.size() == 6 ? f[5] : "", ',')) {
      const std::vector<absl::string_view> n = absl::StrSplit(block, ':');
      BlockId id;
      if (!status.ok() || n.size() != 4 || !absl::SimpleAtoi(n[0], &id.shuffle_id) ||
          !absl::SimpleAtoi(n[1], &id.map_id) || !absl::SimpleAtoi(n[2], &id.start_reduce_id) ||
          !absl::SimpleAtoi(n[3], &id.end_reduce_id) ||
          keys.size() >= static_cast<size_t>(options_.max_blocks_per_stream)) {
        status = absl::InvalidArgumentError("not a stream handed over");
        break;
      }
      keys.push_back(id);
    }
    Ticket ticket{};
    if (status.ok()) {
      ticket_bytes = absl::HexStringToBytes(f[0]);
      std::memcpy(ticket.data(), ticket_bytes.data(), ticket.size());
      stream->expires = absl::FromUnixNanos(expires_ns);
      absl::StatusOr<std::vector<ResolvedBlock>> resolved =
          Resolve(stream->app_id, stream->spark_exec_id, keys);
      if (!resolved.ok()) status = resolved.status();
      for (size_t i = 0; status.ok() && i < resolved->size(); ++i) {
        stream->blocks.push_back(std::move((*resolved)[i].block));
      }
    }
    if (status.ok()) status = tickets_->Adopt(ticket, std::move(stream));
    if (status.ok()) {
      ++taken;
    } else if (dropped++ == 0) {
      first_drop = std::string(status.message());
    }
  }
  if (dropped > 0) {
    LOG(WARNING) << "ferry_server: " << dropped
                 << " streams handed over are not served here (their clients open them again); "
                    "the first: "
                 << first_drop;
  }
  return taken;
}

absl::StatusOr<std::vector<ResolvedBlock>> ControlService::Resolve(
    const std::string& app_id, const std::string& spark_exec_id, const std::vector<BlockId>& keys) {
  if (spark_exec_id.empty()) return store_->ResolveAll(app_id, keys);
  if (spark_ == nullptr) {
    return absl::FailedPreconditionError(
        "the request names a Spark executor, but the Spark front door is off "
        "(--spark-address)");
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const spark::ExecutorDirs> dirs,
                         spark_->ExecutorDirs(app_id, spark_exec_id));
  return AllResolved(
      store_->ResolveBlocks(SparkExecutorLayout(app_id, spark_exec_id, std::move(dirs)), keys));
}

grpc::Status ControlService::RemoveSparkApp(grpc::ServerContext* context,
                                            const ferry::v1::RemoveSparkAppRequest* request,
                                            ferry::v1::RemoveSparkAppResponse* response) {
  // Deleting an executor's files can take a while: a heavy call.
  return Call(context, Rpc::kRemoveSparkApp, Cost::kHeavy,
              [&] { return RemoveSparkAppAdmitted(*request, response); });
}

grpc::Status ControlService::RemoveSparkAppAdmitted(const ferry::v1::RemoveSparkAppRequest& request,
                                                    ferry::v1::RemoveSparkAppResponse* response) {
  if (spark_ == nullptr) {
    return ToGrpcStatus(
        absl::FailedPreconditionError("the Spark front door is off (--spark-address)"));
  }
  if (absl::Status s = request.exec_id().empty()
                           ? CheckAppId(request.app_id())
                           : CheckAppAndExecutorIds(request.app_id(), request.exec_id());
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  absl::StatusOr<SparkApps::Removal> removed =
      spark_->RemoveApp(request.app_id(), request.exec_id(), request.delete_local_dirs());
  if (!removed.ok()) return ToGrpcStatus(removed.status());
  response->set_executors_removed(static_cast<uint32_t>(removed->executors));
  response->set_local_dirs_deleted(static_cast<uint32_t>(removed->dirs_deleted));
  for (const std::string& e : removed->errors) response->add_errors(e);
  for (const std::string& k : removed->kept) response->add_kept(k);
  return grpc::Status::OK;
}

grpc::Status ControlService::CloseStream(grpc::ServerContext* context,
                                         const ferry::v1::CloseStreamRequest* request,
                                         ferry::v1::CloseStreamResponse* response) {
  return Call(context, Rpc::kCloseStream, Cost::kLight, [&] {
    absl::StatusOr<Ticket> ticket = ParseTicket(request->ticket());
    if (!ticket.ok()) return ToGrpcStatus(ticket.status());
    response->set_was_open(tickets_->Close(*ticket));
    return grpc::Status::OK;
  });
}

grpc::Status ControlService::ListShuffles(grpc::ServerContext* context,
                                          const ferry::v1::ListShufflesRequest* request,
                                          ferry::v1::ListShufflesResponse* response) {
  absl::StatusOr<std::vector<ShuffleInfo>> shuffles;
  if (grpc::Status called = Call(context, Rpc::kListShuffles, Cost::kHeavy,
                                 [&] {
                                   shuffles = store_->ListShuffles(request->app_id());
                                   return grpc::Status::OK;
                                 });
      !called.ok()) {
    return called;
  }
  if (!shuffles.ok()) return ServerSideFailure(*context, Rpc::kListShuffles, shuffles.status());
  for (const ShuffleInfo& s : *shuffles) {
    ferry::v1::ShuffleSummary* summary = response->add_shuffles();
    summary->set_shuffle_id(s.shuffle_id);
    for (const MapOutputInfo& m : s.map_outputs) {
      ferry::v1::MapOutputSummary* out = summary->add_map_outputs();
      out->set_map_id(m.map_id);
      out->set_partitions(m.partitions);
      out->set_data_bytes(m.data_bytes);
      out->set_checksum_algorithm(ToProto(m.checksum_algorithm));
      out->set_error(m.error);
    }
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::ListApps(grpc::ServerContext* context,
                                      const ferry::v1::ListAppsRequest*,
                                      ferry::v1::ListAppsResponse* response) {
  absl::StatusOr<std::vector<AppInfo>> apps;
  bool truncated = false;
  if (grpc::Status called = Call(context, Rpc::kListApps, Cost::kHeavy,
                                 [&] {
                                   apps = store_->ListApps(kMaxListedApps, &truncated);
                                   return grpc::Status::OK;
                                 });
      !called.ok()) {
    return called;
  }
  if (!apps.ok()) return ServerSideFailure(*context, Rpc::kListApps, apps.status());
  for (const AppInfo& app : *apps) {
    ferry::v1::AppSummary* summary = response->add_apps();
    summary->set_app_id(app.app_id);
    summary->set_shuffles(app.shuffles);
    summary->set_map_outputs(app.map_outputs);
    summary->set_data_bytes(app.data_bytes);
  }
  response->set_truncated(truncated);
  return grpc::Status::OK;
}

grpc::Status ControlService::GetServerInfo(grpc::ServerContext* context,
                                           const ferry::v1::ServerInfoRequest*,
                                           ferry::v1::ServerInfo* response) {
  return Call(context, Rpc::kGetServerInfo, Cost::kLight, [&] { return ServerInfo(response); });
}

grpc::Status ControlService::ServerInfo(ferry::v1::ServerInfo* response) const {
  response->set_version(kFerryVersion);
  response->set_data_host(options_.data_host);
  response->set_data_port(options_.data_port);
  response->set_mode(options_.splice ? ferry::v1::SPLICE : ferry::v1::COPY);
  response->set_data_threads(options_.data_threads);
  response->set_pipe_bytes(options_.pipe_bytes);
  response->set_copy_buffer_bytes(options_.copy_buffer_bytes);
  response->set_ticket_ttl_ms(absl::ToInt64Milliseconds(options_.ticket_ttl));
  response->set_io_engine(options_.io_engine);
  response->set_spark_port(options_.spark_port);
  response->set_metrics_port(options_.metrics_port);
  if (disks_ != nullptr) {
    for (const DiskReader::DiskStats& d : disks_->Stats()) {
      ferry::v1::DiskHealth* disk = response->add_disks();
      disk->set_name(d.name);
      disk->set_healthy(d.healthy);
      disk->set_reads(d.reads);
      disk->set_read_bytes(d.bytes);
      disk->set_read_errors(d.errors);
      disk->set_queued_reads(d.queued);
      disk->set_last_error(d.last_error);
    }
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::DiagnoseCorruption(grpc::ServerContext* context,
                                                const ferry::v1::DiagnoseCorruptionRequest* request,
                                                ferry::v1::CorruptionDiagnosis* response) {
  return Call(context, Rpc::kDiagnoseCorruption, Cost::kHeavy,
              [&] { return DiagnoseAdmitted(*request, response); });
}

grpc::Status ControlService::DiagnoseAdmitted(const ferry::v1::DiagnoseCorruptionRequest& request,
                                              ferry::v1::CorruptionDiagnosis* response) {
  const ferry::v1::BlockId& id = request.block();
  const BlockId key{id.shuffle_id(), id.map_id(), id.start_reduce_id(), id.end_reduce_id()};
  if (static_cast<int64_t>(key.end_reduce_id) - key.start_reduce_id != 1) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("DiagnoseCorruption takes one partition; ", BlockName(key), " is not one")));
  }
  absl::StatusOr<std::vector<ResolvedBlock>> all =
      Resolve(request.app_id(), request.spark_exec_id(), {key});
  if (!all.ok()) return ToGrpcStatus(all.status());
  const ResolvedBlock* resolved = &all->front();
  const std::string name = absl::StrCat(BlockName(key), " of app ", request.app_id());
  if (!resolved->block.has_checksum) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat(name, " has no stored checksum to diagnose against")));
  }
  const ChecksumAlgorithm algorithm = resolved->block.checksum_algorithm;
  const uint32_t stored = resolved->block.checksum;
  const uint32_t received = request.received_checksum();
  response->set_checksum_algorithm(ToProto(algorithm));
  response->set_stored_checksum(stored);
  absl::StatusOr<Diagnosis> d =
      DiagnoseSegment(resolved->block, received, name, absl::InfiniteFuture());
  if (!d.ok()) return ToGrpcStatus(d.status());
  if (d->disk_checksum.has_value()) response->set_disk_checksum(*d->disk_checksum);
  const std::string alg(ChecksumAlgorithmName(algorithm));
  if (d->cause == CorruptionCause::kDisk) {
    response->set_cause(ferry::v1::CAUSE_DISK);
    response->set_explanation(
        d->disk_checksum.has_value()
            ? absl::StrFormat("the disk is to blame: %s's bytes on disk now give %s "
                              "0x%08x, but 0x%08x was stored when they were written",
                              name, alg, *d->disk_checksum, stored)
            : absl::StrCat("the disk is to blame: ", d->disk_error));
  } else if (d->cause == CorruptionCause::kTransfer) {
    response->set_cause(ferry::v1::CAUSE_TRANSFER);
    response->set_explanation(absl::StrFormat(
        "the transfer is to blame: %s's bytes on disk still match the stored %s 0x%08x, "
        "but the bytes received give 0x%08x",
        name, alg, stored, received));
  } else {
    response->set_cause(ferry::v1::CAUSE_NONE);
    response->set_explanation(
        absl::StrFormat("no corruption: the received %s 0x%08x matches the stored one and the disk",
                        alg, received));
  }
  return grpc::Status::OK;
}

void ControlService::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  FERRY_APPEND_STATS(FERRY_CONTROL_STATS, {&stats_}, out);
}

}  // namespace ferry
