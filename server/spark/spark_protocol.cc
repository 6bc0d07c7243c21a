#include "server/spark/spark_protocol.h"

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/io/ops.h"
#include "common/spark/layout.h"
#include "common/spark/merge_dirs.h"
#include "common/spark/wire.h"
#include "common/status_macros.h"
#include "server/spark/push_merger.h"
#include "server/spark/spark_authenticator.h"

namespace ferry {

namespace {

std::string SparkName(const BlockId& id) {
  return spark::ShuffleBlockName({id.shuffle_id, id.map_id, id.start_reduce_id, id.end_reduce_id});
}

class SparkProtocol {
 public:
  SparkProtocol(ConnectionCore& core, SparkShuffleService& service, SparkSecrets& secrets, bool tls)
      : core_(core), service_(service) {
    if (secrets.required()) {
      auth_.emplace(secrets, tls, kMaxSparkRequestFrameBytes,
                    [&secrets, &service](const std::string& app_id) -> absl::StatusOr<Secret> {
                      // A file's read runs on a blocking worker.
                      if (!secrets.reads_files()) return secrets.SecretOf(app_id);
                      return service.RunBlocking<Secret>(
                          [&secrets, app_id]() { return secrets.SecretOf(app_id); });
                    });
    }
  }

  void Serve();

 private:
  struct OpenStream {
    SparkStream stream;
    int32_t next_chunk = 0;
  };
  // How often streams past their lifetime are looked for.
  static constexpr absl::Duration kExpiryCheck = absl::Seconds(1);

  // Each returns false when the connection must close.
  bool Handle(absl::string_view frame);
  // Closes the streams past their lifetime, at most once per kExpiryCheck.
  void CloseExpired(absl::Time now);
  // One handler per message the client may send, chosen by std::visit: a message type
  // without a handler does not build.
  bool On(const spark::RpcRequest& request);
  bool On(const spark::ChunkFetchRequest& chunk);
  bool On(const spark::StreamRequest& stream);
  bool On(const spark::OneWayMessage& message);
  bool On(const spark::UploadStream& upload);
  // A push's answer: Spark's BlockPushReturnCode, naming the block unless a success.
  bool ReplyPush(int64_t id, spark::PushReturnCode code, const std::string& block_id);
  bool On(const spark::MergedBlockMetaRequest& request);
  bool On(const spark::UnsupportedMessage& message);
  // One handler per BlockTransferMessage inside an RpcRequest, chosen the same way.
  bool OnRpc(int64_t id, spark::RegisterExecutor& m);
  bool OnRpc(int64_t id, const spark::FetchShuffleBlocks& m);
  bool OnRpc(int64_t id, const spark::OpenBlocks& m);
  bool OnRpc(int64_t id, const spark::RemoveBlocks& m);
  bool OnRpc(int64_t id, const spark::GetLocalDirsForExecutors& m);
  bool OnRpc(int64_t id, const spark::DiagnoseCorruption& m);
  bool OnRpc(int64_t id, const spark::FinalizeShuffleMerge& m);
  bool OnRpc(int64_t id, const spark::RemoveShuffleMerge& m);
  bool OnRpc(int64_t id, const spark::FetchShuffleBlockChunks& m);
  bool OnRpc(int64_t id, const spark::UnsupportedRpc& m);
  // FetchShuffleBlocks and OpenBlocks: a stream of the blocks they name.
  template <typename Fetch>
  bool OpenStreamFor(int64_t id, const Fetch& fetch);
  // A message before the connection has authenticated, to the authentication layer.
  bool Authenticate(const spark::ClientMessage& message);
  // PERMISSION_DENIED unless the connection may act for `app_id`.
  absl::Status CheckApp(const std::string& app_id) const;
  bool ServeChunk(int64_t stream_id, int32_t chunk_index, const std::string* stream_name);
  bool SendChunkFailure(int64_t stream_id, int32_t chunk_index, const std::string* stream_name,
                        absl::string_view error);
  bool SendFrame(const std::string& frame, bool hold = false) {
    return core_.SendBytes(frame, hold);
  }
  // `hold`: as ConnectionCore::SendBytes holds it (a reply's success only).
  bool Reply(int64_t request_id, const absl::StatusOr<std::string>& body, bool hold = false);

  ConnectionCore& core_;
  SparkShuffleService& service_;
  // spark.authenticate's layer; none when the front door does not require it.
  std::optional<SparkAuthenticator> auth_;
  absl::flat_hash_map<int64_t, OpenStream> streams_;
  absl::Time next_expiry_check_ = absl::InfinitePast();
};

void SparkProtocol::Serve() {
  const auto length = [](absl::string_view header) -> absl::StatusOr<size_t> {
    FERRY_ASSIGN_OR_RETURN(uint64_t n, spark::DecodeFrameLength(header));
    // Checked before the sum, which a huge announced length would overflow.
    if (n > kMaxSparkRequestFrameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("a frame of ", n, " bytes announced; at most ",
                                                     kMaxSparkRequestFrameBytes, " are taken"));
    }
    return spark::kFrameLengthBytes + static_cast<size_t>(n);
  };
  const ConnectionCore::Framing framing{
      spark::kFrameLengthBytes, spark::kFrameLengthBytes + kMaxSparkRequestFrameBytes, length};
  // Frames are bounded in number only by the peer's patience: each must arrive within
  // the idle timeout, and a stopping scheduler cancels the wait.
  for (;;) {
    absl::string_view frame;
    if (!core_.NextFrame(framing, &frame)) return;
    frame.remove_prefix(spark::kFrameLengthBytes);
    if (!Handle(frame)) return;
  }
}

void SparkProtocol::CloseExpired(absl::Time now) {
  if (streams_.empty() || now < next_expiry_check_) return;
  next_expiry_check_ = now + kExpiryCheck;
  absl::erase_if(streams_, [now](const auto& entry) { return entry.second.stream.expires <= now; });
}

bool SparkProtocol::Handle(absl::string_view frame) {
  core_.BeginRequest();
  CloseExpired(service_.clock().Now());
  absl::StatusOr<spark::ClientMessage> message = spark::DecodeClientFrame(frame);
  if (!message.ok()) {
    // Out of frame: nothing more can be read.
    core_.LogFailure(message.status());
    return false;
  }
  // Only pushes pipelined behind pushes leave their answers held (ReplyPush).
  if (!std::holds_alternative<spark::UploadStream>(*message)) core_.PushHeld();
  if (auth_.has_value() && !auth_->authenticated()) return Authenticate(*message);
  return std::visit([this](const auto& m) { return On(m); }, *message);
}

bool SparkProtocol::On(const spark::ChunkFetchRequest& chunk) {
  return ServeChunk(chunk.stream_id, chunk.chunk_index, nullptr);
}

bool SparkProtocol::On(const spark::StreamRequest& stream) {
  // "<streamId>_<chunkIndex>", both decimal.
  const std::vector<absl::string_view> parts = absl::StrSplit(stream.stream_id, '_');
  int64_t stream_id = 0;
  int32_t chunk_index = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &stream_id) ||
      !absl::SimpleAtoi(parts[1], &chunk_index)) {
    return SendFrame(spark::EncodeStreamFailure(
        stream.stream_id,
        absl::StrCat("stream id '", stream.stream_id, "' is not <streamId>_<chunkIndex>")));
  }
  return ServeChunk(stream_id, chunk_index, &stream.stream_id);
}

bool SparkProtocol::On(const spark::OneWayMessage& message) {
  // Push-based shuffle's RemoveShuffleMerge, the one one-way message the driver sends; a
  // one-way message has no reply, whatever becomes of it.
  absl::StatusOr<spark::ShuffleRpc> rpc = spark::DecodeShuffleRpc(message.body);
  auto* remove = rpc.ok() ? std::get_if<spark::RemoveShuffleMerge>(&*rpc) : nullptr;
  PushMerger* merger = service_.push();
  if (remove != nullptr && merger != nullptr && CheckApp(remove->app_id).ok()) {
    absl::StatusOr<bool> removed =
        service_.RunBlocking<bool>([merger, m = *remove]() -> absl::StatusOr<bool> {
          FERRY_RETURN_IF_ERROR(merger->Remove(m));
          return true;
        });
    if (!removed.ok()) core_.LogFailure(removed.status());
  }
  return true;
}

bool SparkProtocol::On(const spark::UploadStream& upload) {
  const int64_t id = upload.request_id;
  PushMerger* merger = service_.push();
  // Refusals that leave the body unread close the connection: it follows unframed.
  if (merger == nullptr) {
    Reply(id, absl::UnimplementedError(
                  "UploadStream (push-based shuffle, block upload) is not served here "
                  "(ferry_server --spark-push-merge); the connection closes"));
    return false;
  }
  if (static_cast<uint64_t>(upload.body_bytes) > kMaxPushedBlockBytes) {
    Reply(id, absl::InvalidArgumentError(absl::StrCat("a pushed block of ", upload.body_bytes,
                                                      " bytes; at most ", kMaxPushedBlockBytes,
                                                      " are taken")));
    return false;
  }
  absl::StatusOr<spark::PushBlockStream> push = spark::DecodePushBlockStream(upload.meta);
  if (!push.ok()) {
    Reply(id, push.status());
    return false;
  }
  if (absl::Status allowed = CheckApp(push->app_id); !allowed.ok()) {
    Reply(id, allowed);
    return false;
  }
  const uint64_t length = static_cast<uint64_t>(upload.body_bytes);
  const absl::Time deadline = absl::Now() + merger->options().push_timeout;
  absl::Status sink_status;
  const auto drain = [&] {
    return core_.ReceiveBody(
        length, deadline, [](absl::string_view) { return absl::OkStatus(); }, &sink_status);
  };
  // The merger's calls run here while they touch no disk, and on a blocking worker
  // when they would (or the partition is busy with a write).
  absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(*push, /*on_worker=*/false);
  if (admitted.ok() && admitted->needs_worker) {
    core_.PushHeld();  // a worker may take a while
    admitted = service_.RunBlocking<PushMerger::Admission>(
        [merger, push = *push] { return merger->Admit(push, /*on_worker=*/true); });
  }
  if (!admitted.ok()) {
    merger->Count(PushMerger::Outcome::kRefused);
    return drain() && Reply(id, admitted.status());
  }
  if (admitted->partition == nullptr) {
    // Answered without the block: a duplicate (success), or too late, stale, or a
    // former attempt's, whose connection Spark's service closes after the answer.
    merger->Count(admitted->code == spark::PushReturnCode::kSuccess
                      ? PushMerger::Outcome::kDuplicate
                      : PushMerger::OutcomeOf(admitted->code));
    const bool replied = drain() && ReplyPush(id, admitted->code, admitted->block_id);
    return replied && admitted->code != spark::PushReturnCode::kTooOldAttemptPush;
  }
  const std::shared_ptr<PushMerger::Partition> shared = admitted->partition;
  PushMerger::Partition& partition = *shared;
  // The partition's turn. Taken at once, the block goes straight to the merged file as
  // it arrives; otherwise it arrives into memory, or past its bounds into a file beside
  // the partition, and waits for the turn.
  std::string deferred;
  std::optional<PushMerger::Deferral> deferral;
  // A waiting block's bound is given back before its answer, so a client that has its
  // answer finds the bytes no longer counted.
  const auto release_deferral = [&] {
    deferral.reset();
    std::string().swap(deferred);
  };
  PushMerger::Turn turn = std::move(admitted->turn);
  if (!turn.held() && partition.turn().TryLock()) turn = PushMerger::Turn(shared);
  if (!turn.held()) {
    absl::StatusOr<PushMerger::Deferral> held = merger->DeferInMemory(core_.peer_host(), length);
    if (!held.ok()) {
      core_.PushHeld();  // a worker may take a while
      held = service_.RunBlocking<PushMerger::Deferral>(
          [merger, partition = admitted->partition, client = core_.peer_host(), length] {
            return merger->DeferOnDisk(*partition, client, length);
          });
    }
    if (!held.ok()) {
      if (!absl::IsResourceExhausted(held.status())) core_.LogFailure(held.status());
      merger->Count(PushMerger::Outcome::kCollision);
      return drain() && ReplyPush(id, spark::PushReturnCode::kBlockAppendCollisionDetected,
                                  admitted->block_id);
    }
    deferral = *std::move(held);
    bool connected = true;
    if (deferral->spill.valid()) {
      connected = core_.ReceiveBodyToFile(length, deadline, deferral->spill.get(), 0, &sink_status);
    } else {
      deferred.reserve(static_cast<size_t>(length));
      connected = core_.ReceiveBody(
          length, deadline,
          [&](absl::string_view bytes) {
            deferred.append(bytes.data(), bytes.size());
            return absl::OkStatus();
          },
          &sink_status);
    }
    if (!connected) return false;
    if (sink_status.ok()) {
      PushMerger::Waiting waiting(*merger);
      core_.PushHeld();  // the turn may take a while
      if (partition.turn().Lock(absl::Now() + merger->options().push_timeout)) {
        turn = PushMerger::Turn(shared);
      }
    } else {
      core_.LogFailure(sink_status);  // the disk the block was to wait on
    }
    if (!turn.held()) {
      release_deferral();
      merger->Count(PushMerger::Outcome::kCollision);
      return ReplyPush(id, spark::PushReturnCode::kBlockAppendCollisionDetected,
                       admitted->block_id);
    }
  }
  const bool received = deferral.has_value();
  absl::StatusOr<PushMerger::Target> target = merger->TargetOf(
      partition, push->map_index, static_cast<int64_t>(length), /*on_worker=*/false);
  if (target.ok() && target->needs_worker) {
    core_.PushHeld();  // a worker may take a while
    target = service_.RunBlocking<PushMerger::Target>(
        [merger, shared, map = push->map_index, length = static_cast<int64_t>(length)] {
          return merger->TargetOf(*shared, map, length, /*on_worker=*/true);
        });
  }
  if (!target.ok() || target->code != spark::PushReturnCode::kSuccess || target->duplicate) {
    turn.Release();
    release_deferral();
    merger->Count(!target.ok()        ? PushMerger::Outcome::kRefused
                  : target->duplicate ? PushMerger::Outcome::kDuplicate
                                      : PushMerger::OutcomeOf(target->code));
    if (!received && !drain()) return false;
    if (!target.ok()) return Reply(id, target.status());
    return ReplyPush(id, target->code, admitted->block_id);
  }
  // A waiting block's bytes, written with io_uring at the partition's end: the fiber
  // waits, not its thread.
  int64_t written = 0;
  const auto write = [&](absl::string_view bytes) -> absl::Status {
    const ssize_t n =
        WriteAll(target->fd->get(), bytes.data(), bytes.size(), target->offset + written);
    if (n != static_cast<ssize_t>(bytes.size())) {
      return absl::ErrnoToStatus(n < 0 ? static_cast<int>(-n) : EIO,
                                 absl::StrCat("append ", admitted->block_id, " to its merge"));
    }
    written += n;
    return absl::OkStatus();
  };
  bool connected = true;
  if (received && deferral->spill.valid()) {
    sink_status = core_.CopyFile(deferral->spill.get(), 0, target->fd->get(), target->offset,
                                 length, absl::Now() + merger->options().push_timeout);
    if (sink_status.ok()) {
      written = static_cast<int64_t>(length);
    } else {
      sink_status =
          absl::Status(sink_status.code(),
                       absl::StrCat("append ", admitted->block_id,
                                    " from where it waited to its merge: ", sink_status.message()));
    }
  } else if (received) {
    sink_status = write(deferred);
  } else {
    // Straight from the socket into the merged file.
    connected =
        core_.ReceiveBodyToFile(length, deadline, target->fd->get(), target->offset, &sink_status);
    if (connected && sink_status.ok()) written = static_cast<int64_t>(length);
  }
  release_deferral();
  // A block cut off or not written is not committed: the next append overwrites it.
  spark::PushReturnCode code = spark::PushReturnCode::kSuccess;
  if (connected && sink_status.ok()) {
    std::optional<spark::PushReturnCode> committed =
        merger->Commit(partition, push->map_index, written, target->fd->get(), /*on_worker=*/false);
    if (!committed.has_value()) {
      // The commit writes (or waits for a finalize's writes): on a worker, whose job holds
      // the turn until it has run, or is dropped unrun.
      core_.PushHeld();  // a worker may take a while
      absl::StatusOr<spark::PushReturnCode> on_worker = service_.RunBlocking<spark::PushReturnCode>(
          [merger, shared, turn = std::move(turn), fd = std::move(target->fd),
           map = push->map_index, written]() mutable -> absl::StatusOr<spark::PushReturnCode> {
            const std::optional<spark::PushReturnCode> done =
                merger->Commit(*shared, map, written, fd->get(), /*on_worker=*/true);
            turn.Release();
            return done.value_or(spark::PushReturnCode::kTooLateBlockPush);
          });
      if (on_worker.ok()) {
        committed = *on_worker;
      } else {
        sink_status = on_worker.status();
      }
    }
    code = committed.value_or(spark::PushReturnCode::kSuccess);
  }
  turn.Release();
  if (!connected) return false;
  if (!sink_status.ok()) {
    merger->Count(PushMerger::Outcome::kRefused);
    return Reply(id, sink_status);
  }
  merger->Count(PushMerger::OutcomeOf(code),
                code == spark::PushReturnCode::kSuccess ? static_cast<uint64_t>(written) : 0);
  return ReplyPush(id, code, admitted->block_id);
}

bool SparkProtocol::ReplyPush(int64_t id, spark::PushReturnCode code, const std::string& block_id) {
  // Spark's pusher sends a map's blocks back to back: while the next push is here
  // already, this answer is held for the next one's (ConnectionCore::SendBytes).
  return Reply(id,
               spark::EncodeBlockPushReturnCode(
                   {code, code == spark::PushReturnCode::kSuccess ? "" : block_id}),
               /*hold=*/core_.partial_frame_bytes() > 0);
}

bool SparkProtocol::On(const spark::MergedBlockMetaRequest& request) {
  const int64_t id = request.request_id;
  if (absl::Status allowed = CheckApp(request.app_id); !allowed.ok()) return Reply(id, allowed);
  absl::StatusOr<PushMerger::MergedFiles> files = service_.MergedMeta(request);
  if (!files.ok()) return Reply(id, files.status());
  // The header, then the meta file's bitmaps in the frame, sent as a block is.
  const std::string header = spark::EncodeMergedBlockMetaSuccessHeader(
      id, files->chunks(), static_cast<uint64_t>(files->meta_bytes));
  StreamBlock meta;
  meta.file = files->meta;
  meta.length = static_cast<uint64_t>(files->meta_bytes);
  const auto name = [&] {
    return spark::MergedFileName(request.app_id, request.shuffle_id, request.shuffle_merge_id,
                                 request.reduce_id, "meta");
  };
  core_.sender().StartResponse(meta.length);
  bool in_frame = true;
  absl::Status sent = core_.SendBlock(header, meta, 0, name, &in_frame);
  if (!sent.ok()) {
    if (in_frame) return Reply(id, sent);
    return false;
  }
  core_.EndRequest(absl::OkStatus());
  return true;
}

bool SparkProtocol::On(const spark::UnsupportedMessage&) {
  return false;  // a server's message, or an unknown type
}

bool SparkProtocol::Authenticate(const spark::ClientMessage& message) {
  SparkAuthenticator::Step step = auth_->Take(message);
  bool replied = true;
  if (step.request_id.has_value()) {
    replied = Reply(*step.request_id, step.reply);
  } else {
    core_.EndRequest(step.reply.status());
  }
  if (step.layer != nullptr && !core_.Secure(std::move(step.layer))) return false;
  return replied && !step.close;
}

absl::Status SparkProtocol::CheckApp(const std::string& app_id) const {
  if (!auth_.has_value() || app_id == auth_->app()) return absl::OkStatus();
  // Spark's ExternalBlockHandler.checkAuth.
  return absl::PermissionDeniedError(
      absl::StrCat("Client for ", auth_->app(), " not authorized for application ", app_id, "."));
}

bool SparkProtocol::On(const spark::RpcRequest& request) {
  const int64_t id = request.request_id;
  if (!request.body.empty() && (static_cast<uint8_t>(request.body[0]) == spark::kAuthMessageTag ||
                                static_cast<uint8_t>(request.body[0]) == spark::kSaslMessageTag)) {
    return Reply(
        id, absl::FailedPreconditionError(
                auth_.has_value() ? "this connection has authenticated already"
                                  : "spark.authenticate is not enabled on this shuffle service "
                                    "(ferry_server --spark-auth-secret-file or "
                                    "--spark-auth-secrets-dir): run the application with "
                                    "spark.authenticate=false, or enable it here"));
  }
  absl::StatusOr<spark::ShuffleRpc> rpc = spark::DecodeShuffleRpc(request.body);
  if (!rpc.ok()) return Reply(id, rpc.status());
  const absl::Status allowed = std::visit(
      [this](const auto& m) -> absl::Status {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, spark::UnsupportedRpc>) {
          return absl::OkStatus();
        } else {
          return CheckApp(m.app_id);
        }
      },
      *rpc);
  if (!allowed.ok()) return Reply(id, allowed);
  return std::visit([this, id](auto& m) { return OnRpc(id, m); }, *rpc);
}

bool SparkProtocol::OnRpc(int64_t id, spark::RegisterExecutor& m) {
  absl::Status registered = service_.Register(std::move(m), core_.peer_host(), auth_.has_value());
  if (!registered.ok()) return Reply(id, registered);
  return Reply(id, std::string());
}

bool SparkProtocol::OnRpc(int64_t id, const spark::FetchShuffleBlocks& m) {
  return OpenStreamFor(id, m);
}

bool SparkProtocol::OnRpc(int64_t id, const spark::OpenBlocks& m) { return OpenStreamFor(id, m); }

template <typename Fetch>
bool SparkProtocol::OpenStreamFor(int64_t id, const Fetch& fetch) {
  if (streams_.size() >= service_.options().max_streams_per_connection) {
    return Reply(id, absl::ResourceExhaustedError(absl::StrCat(
                         service_.options().max_streams_per_connection,
                         " streams are open on this connection; fetch their chunks first")));
  }
  absl::StatusOr<SparkStream> stream = service_.OpenStream(fetch, core_.peer_host());
  if (!stream.ok()) {
    // The server is short of something (chunks, workers, time): closing the connection
    // is what Spark's client retries; an RpcFailure it would not.
    if (absl::IsResourceExhausted(stream.status()) || absl::IsDeadlineExceeded(stream.status()) ||
        absl::IsCancelled(stream.status())) {
      core_.EndRequest(stream.status());
      return false;
    }
    return Reply(id, stream.status());
  }
  const int64_t stream_id = stream->id;
  const int32_t chunks = static_cast<int32_t>(stream->chunks.size());
  if (chunks > 0) streams_[stream_id] = OpenStream{*std::move(stream), 0};
  return Reply(id, spark::EncodeStreamHandle(stream_id, chunks));
}

bool SparkProtocol::OnRpc(int64_t id, const spark::RemoveBlocks& m) {
  absl::StatusOr<int32_t> removed = service_.RemoveBlocks(m);
  if (!removed.ok()) return Reply(id, removed.status());
  return Reply(id, spark::EncodeBlocksRemoved(*removed));
}

bool SparkProtocol::OnRpc(int64_t id, const spark::GetLocalDirsForExecutors& m) {
  return Reply(id, service_.LocalDirs(m));
}

bool SparkProtocol::OnRpc(int64_t id, const spark::DiagnoseCorruption& m) {
  absl::StatusOr<uint8_t> cause = service_.Diagnose(m, core_.peer_host());
  if (!cause.ok()) return Reply(id, cause.status());
  return Reply(id, spark::EncodeCorruptionCause(*cause));
}

bool SparkProtocol::OnRpc(int64_t id, const spark::FinalizeShuffleMerge& m) {
  PushMerger* merger = service_.push();
  if (merger == nullptr) {
    return OnRpc(id, spark::UnsupportedRpc{
                         static_cast<uint8_t>(spark::BlockTransferType::kFinalizeShuffleMerge)});
  }
  // Each partition's files are cut: on a blocking worker.
  absl::StatusOr<std::string> statuses =
      service_.RunBlocking<std::string>([merger, m]() -> absl::StatusOr<std::string> {
        FERRY_ASSIGN_OR_RETURN(spark::MergeStatuses s, merger->Finalize(m));
        return spark::EncodeMergeStatuses(s);
      });
  return Reply(id, statuses);
}

bool SparkProtocol::OnRpc(int64_t id, const spark::RemoveShuffleMerge& m) {
  PushMerger* merger = service_.push();
  if (merger == nullptr) {
    return OnRpc(id, spark::UnsupportedRpc{
                         static_cast<uint8_t>(spark::BlockTransferType::kRemoveShuffleMerge)});
  }
  absl::StatusOr<bool> removed = service_.RunBlocking<bool>([merger, m]() -> absl::StatusOr<bool> {
    FERRY_RETURN_IF_ERROR(merger->Remove(m));
    return true;
  });
  if (!removed.ok()) return Reply(id, removed.status());
  return Reply(id, std::string());
}

bool SparkProtocol::OnRpc(int64_t id, const spark::FetchShuffleBlockChunks& m) {
  if (service_.push() == nullptr) {
    return OnRpc(id, spark::UnsupportedRpc{
                         static_cast<uint8_t>(spark::BlockTransferType::kFetchShuffleBlockChunks)});
  }
  return OpenStreamFor(id, m);
}

bool SparkProtocol::OnRpc(int64_t id, const spark::UnsupportedRpc& m) {
  return Reply(id, absl::UnimplementedError(absl::StrCat(
                       "Unexpected message: ", spark::BlockTransferTypeName(m.type),
                       " (this shuffle service serves fetches only: no push-based shuffle "
                       "merges, block uploads or Mesos messages)")));
}

bool SparkProtocol::Reply(int64_t request_id, const absl::StatusOr<std::string>& body, bool hold) {
  core_.EndRequest(body.status());
  if (!body.ok()) {
    return SendFrame(spark::EncodeRpcFailure(request_id, body.status().ToString()));
  }
  return SendFrame(spark::EncodeRpcResponse(request_id, *body), hold);
}

bool SparkProtocol::SendChunkFailure(int64_t stream_id, int32_t chunk_index,
                                     const std::string* stream_name, absl::string_view error) {
  core_.EndRequest(absl::FailedPreconditionError(error));
  if (stream_name != nullptr) return SendFrame(spark::EncodeStreamFailure(*stream_name, error));
  return SendFrame(spark::EncodeChunkFetchFailure(stream_id, chunk_index, error));
}

bool SparkProtocol::ServeChunk(int64_t stream_id, int32_t chunk_index,
                               const std::string* stream_name) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) {
    // Spark's OneForOneStreamManager's words, for a stream that never was, was another
    // connection's, or has had all its chunks.
    return SendChunkFailure(
        stream_id, chunk_index, stream_name,
        absl::StrCat("Requested chunk not available since streamId ", stream_id, " is closed"));
  }
  OpenStream& open = it->second;
  if (chunk_index != open.next_chunk) {
    return SendChunkFailure(stream_id, chunk_index, stream_name,
                            absl::StrCat("Received out-of-order chunk index ", chunk_index,
                                         " (expected ", open.next_chunk, ")"));
  }
  // A chunk asked for in order counts as handed out, served or failed, as in Spark.
  SparkChunk chunk = std::move(open.stream.chunks[chunk_index]);
  const bool rdd = open.stream.rdd;
  const bool merged = open.stream.merged;
  std::shared_ptr<const spark::ExecutorDirs> rdd_dirs = open.stream.rdd_dirs;
  ++open.next_chunk;
  if (static_cast<size_t>(open.next_chunk) == open.stream.chunks.size()) streams_.erase(it);
  // The block's name is built only for an error: not on the per-block path.
  const auto name = [&] {
    const BlockId& b = chunk.block.id;
    if (rdd) return absl::StrCat("rdd_", b.shuffle_id, "_", b.map_id);
    if (merged) {
      return absl::StrCat("shuffleChunk_", b.shuffle_id, "_", b.map_id, "_", b.start_reduce_id, "_",
                          b.end_reduce_id);
    }
    return SparkName(b);
  };
  if (chunk.status.ok() && rdd) {
    absl::StatusOr<StreamBlock> opened = service_.OpenRddBlock(rdd_dirs, chunk.block.id);
    if (opened.ok()) {
      chunk.block = *std::move(opened);
    } else {
      chunk.status = opened.status();
    }
  }
  const StreamBlock& block = chunk.block;
  if (!chunk.status.ok()) {
    return SendChunkFailure(stream_id, chunk_index, stream_name,
                            absl::StrCat(name(), ": ", chunk.status.ToString()));
  }
  if (stream_name == nullptr && block.length > spark::kMaxChunkBodyBytes) {
    return SendChunkFailure(
        stream_id, chunk_index, stream_name,
        absl::StrCat(name(), " is ", block.length,
                     " bytes, more than a Spark frame can hold; fetch it to disk "
                     "(spark.network.maxRemoteBlockSizeFetchToMem)"));
  }
  std::string stream_header;
  spark::ChunkFetchSuccessHeader chunk_header;
  absl::string_view header;
  if (stream_name != nullptr) {
    stream_header = spark::EncodeStreamResponseHeader(*stream_name, block.length);
    header = stream_header;
  } else {
    chunk_header = spark::EncodeChunkFetchSuccessHeader(stream_id, chunk_index, block.length);
    header = chunk_header.view();
  }
  core_.sender().StartResponse(block.length);
  bool in_frame = true;
  absl::Status sent = core_.SendBlock(header, block, 0, name, &in_frame);
  if (!sent.ok()) {
    // A block whose file shrank fails as a chunk. A failure past the header leaves the
    // peer's stream out of frame: only closing the connection is honest, and Spark's
    // client retries it.
    if (in_frame) return SendChunkFailure(stream_id, chunk_index, stream_name, sent.message());
    return false;
  }
  core_.EndRequest(absl::OkStatus());
  return true;
}

}  // namespace

void ServeSparkConnection(UniqueFd socket, SparkShuffleService& service, SparkSecrets& secrets,
                          SparkTls* tls, const ConnectionOptions& options,
                          ConnectionControl& control) {
  ConnectionCore core(std::move(socket), FrontDoor::kSpark, options, control);
  if (!core.Start()) return;
  if (tls != nullptr) {
    std::unique_ptr<SecurityLayer> layer = tls->NewConnection();
    if (layer == nullptr || !core.Secure(std::move(layer))) return;
  }
  SparkProtocol(core, service, secrets, tls != nullptr).Serve();
}

}  // namespace ferry
