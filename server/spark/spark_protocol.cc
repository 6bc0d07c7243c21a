#include "server/spark/spark_protocol.h"

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/io/ops.h"
#include "common/spark/layout.h"
#include "common/spark/merge_dirs.h"
#include "common/spark/wire.h"
#include "common/status_macros.h"
#include "server/spark/auth/spark_authenticator.h"
#include "server/spark/push/push_service.h"

namespace ferry {

namespace {

std::string SparkName(const BlockId& id) {
  return spark::ShuffleBlockName({id.shuffle_id, id.map_id, id.start_reduce_id, id.end_reduce_id});
}

class SparkProtocol {
 public:
  SparkProtocol(ConnectionCore& core, SparkShuffleService& service, SparkSecrets& secrets, bool tls)
      : core_(core), service_(service), auth_(AuthOf(service, secrets, tls)) {}

  // Goes on from what the server that handed the connection over said of it
  // (HandOverState there); nothing for a connection accepted here.
  void Resume(const std::optional<std::string>& state);
  void Serve();

 private:
  // spark.authenticate's layer when the front door requires it (constructed in place:
  // an emplace into the member reads, to GCC, a string it may not have initialized).
  static std::optional<SparkAuthenticator> AuthOf(SparkShuffleService& service,
                                                  SparkSecrets& secrets, bool tls) {
    if (!secrets.required()) return std::nullopt;
    return std::optional<SparkAuthenticator>(
        std::in_place, secrets, tls, kMaxSparkRequestFrameBytes,
        [&secrets, &service](const std::string& app_id) -> absl::StatusOr<Secret> {
          // A file's read runs on a blocking worker.
          if (!secrets.reads_files()) return secrets.SecretOf(app_id);
          return service.RunBlocking<Secret>(
              [&secrets, app_id]() { return secrets.SecretOf(app_id); });
        });
  }
  struct OpenStream {
    SparkStream stream;
    int32_t next_chunk = 0;
  };
  // How long open streams hold a hand-over once the connection asks nothing more: Spark's
  // client asks for every chunk as a stream opens, so streams idle longer (their task
  // gone) go unserved.
  static constexpr absl::Duration kStreamsHoldHandOver = absl::Seconds(1);
  // How often streams past their lifetime are looked for.
  static constexpr absl::Duration kExpiryCheck = absl::Seconds(1);

  // Each returns false when the connection must close.
  bool Handle(absl::string_view frame);
  // What a server handing the connection over passes on (ConnectionCore::HandOverState):
  // "app=<id>" once authenticated, empty without authentication or before it begins.
  std::optional<std::string> HandOverState() const;
  // Closes the streams past their lifetime, at most once per kExpiryCheck.
  void CloseExpired(absl::Time now);
  // One handler per message the client may send, chosen by std::visit: a message type
  // without a handler does not build.
  bool On(const spark::RpcRequest& request);
  bool On(const spark::ChunkFetchRequest& chunk);
  bool On(const spark::StreamRequest& stream);
  bool On(const spark::OneWayMessage& message);
  bool On(const spark::UploadStream& upload);
  // The push an upload carries, or why it is refused unread.
  absl::StatusOr<spark::PushBlockStream> PushOf(const spark::UploadStream& upload);
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
  absl::Time last_request_ = absl::InfinitePast();  // when the last frame was handled
};

void SparkProtocol::Resume(const std::optional<std::string>& state) {
  if (!state.has_value()) return;
  // Handed over authenticated: as the same application here, if this server requires
  // authentication (and knows nothing more of the connection if it does not).
  absl::string_view app = *state;
  if (auth_.has_value() && absl::ConsumePrefix(&app, "app=") && !auth_->Resume(std::string(app))) {
    core_.LogFailure(absl::InvalidArgumentError(
        absl::StrCat("a connection handed over as application '", absl::CHexEscape(app),
                     "', which is no application's name: it must authenticate again")));
  }
}

std::optional<std::string> SparkProtocol::HandOverState() const {
  // Its streams' chunks are on their way, and a handshake's next message: it goes after
  // them. Streams nothing asked of for kStreamsHoldHandOver are left behind.
  const bool streaming =
      !streams_.empty() && service_.clock().Now() - last_request_ < kStreamsHoldHandOver;
  if (streaming || (auth_.has_value() && auth_->in_handshake())) return std::nullopt;
  if (auth_.has_value() && auth_->authenticated()) return absl::StrCat("app=", auth_->app());
  return std::string();
}

void SparkProtocol::Serve() {
  core_.OnHandOver([this] { return HandOverState(); });
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
    if (!core_.NextFrame(framing, &frame)) break;
    frame.remove_prefix(spark::kFrameLengthBytes);
    if (!Handle(frame)) break;
  }
  core_.PushHeld();  // answers held for a push that never came
}

void SparkProtocol::CloseExpired(absl::Time now) {
  if (streams_.empty() || now < next_expiry_check_) return;
  next_expiry_check_ = now + kExpiryCheck;
  absl::erase_if(streams_, [now](const auto& entry) { return entry.second.stream.expires <= now; });
}

bool SparkProtocol::Handle(absl::string_view frame) {
  core_.BeginRequest();
  last_request_ = service_.clock().Now();
  CloseExpired(last_request_);
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
  PushService* push = service_.push();
  if (remove != nullptr && push != nullptr && CheckApp(remove->app_id).ok()) {
    if (absl::Status removed = push->Remove(*remove); !removed.ok()) core_.LogFailure(removed);
  }
  return true;
}

// The connection's side of an upload, for the push unit.
class ConnectionBody : public PushBody {
 public:
  explicit ConnectionBody(ConnectionCore& core) : core_(core) {}
  bool Receive(uint64_t bytes, absl::Time deadline,
               absl::FunctionRef<absl::Status(absl::string_view)> sink,
               absl::Status* sink_status) override {
    return core_.ReceiveBody(bytes, deadline, sink, sink_status);
  }
  bool ReceiveToFile(uint64_t bytes, absl::Time deadline, int fd, int64_t offset, bool write_inline,
                     absl::Status* sink_status) override {
    return core_.ReceiveBodyToFile(bytes, deadline, fd, offset, write_inline, sink_status);
  }
  absl::Status CopyFile(int in_fd, int64_t in_offset, int out_fd, int64_t out_offset,
                        uint64_t bytes, absl::Time deadline) override {
    return core_.CopyFile(in_fd, in_offset, out_fd, out_offset, bytes, deadline);
  }
  void Flush() override { core_.PushHeld(); }
  const std::string& peer_host() override { return core_.peer_host(); }
  void LogFailure(const absl::Status& status) override { core_.LogFailure(status); }

 private:
  ConnectionCore& core_;
};

absl::StatusOr<spark::PushBlockStream> SparkProtocol::PushOf(const spark::UploadStream& upload) {
  if (service_.push() == nullptr) {
    return absl::UnimplementedError(
        "UploadStream (push-based shuffle, block upload) is not served here "
        "(ferry_server --spark-push-merge); the connection closes");
  }
  if (static_cast<uint64_t>(upload.body_bytes) > kMaxPushedBlockBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a pushed block of ", upload.body_bytes,
                                                   " bytes; at most ", kMaxPushedBlockBytes,
                                                   " are taken"));
  }
  FERRY_ASSIGN_OR_RETURN(spark::PushBlockStream push, spark::DecodePushBlockStream(upload.meta));
  FERRY_RETURN_IF_ERROR(CheckApp(push.app_id));
  return push;
}

bool SparkProtocol::On(const spark::UploadStream& upload) {
  const int64_t id = upload.request_id;
  absl::StatusOr<spark::PushBlockStream> push = PushOf(upload);
  if (!push.ok()) {
    // The body follows unframed: a refusal that leaves it unread closes the connection.
    Reply(id, push.status());
    return false;
  }
  ConnectionBody body(core_);
  const PushService::Answer answer =
      service_.push()->Upload(*push, static_cast<uint64_t>(upload.body_bytes), body);
  if (!answer.connected) return false;
  const bool replied = answer.code.ok() ? ReplyPush(id, *answer.code, answer.block_id)
                                        : Reply(id, answer.code.status());
  return replied && !answer.close;
}

bool SparkProtocol::ReplyPush(int64_t id, spark::PushReturnCode code, const std::string& block_id) {
  // Spark's pusher sends a map's blocks back to back: the answer is held, to go out with
  // the next ones' once the connection would wait on its peer (ConnectionCore::Receive).
  return Reply(id,
               spark::EncodeBlockPushReturnCode(
                   {code, code == spark::PushReturnCode::kSuccess ? "" : block_id}),
               /*hold=*/true);
}

bool SparkProtocol::On(const spark::MergedBlockMetaRequest& request) {
  const int64_t id = request.request_id;
  if (absl::Status allowed = CheckApp(request.app_id); !allowed.ok()) return Reply(id, allowed);
  PushService* push = service_.push();
  if (push == nullptr) {
    return Reply(id, absl::UnimplementedError(
                         "MergedBlockMetaRequest: push-based shuffle is not served here "
                         "(ferry_server --spark-push-merge)"));
  }
  absl::StatusOr<PushMerger::MergedFiles> files = push->Meta(request);
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
  PushService* push = service_.push();
  if (push == nullptr) {
    return OnRpc(id, spark::UnsupportedRpc{
                         static_cast<uint8_t>(spark::BlockTransferType::kFinalizeShuffleMerge)});
  }
  absl::StatusOr<spark::MergeStatuses> statuses = push->Finalize(m);
  if (!statuses.ok()) return Reply(id, statuses.status());
  return Reply(id, spark::EncodeMergeStatuses(*statuses));
}

bool SparkProtocol::OnRpc(int64_t id, const spark::RemoveShuffleMerge& m) {
  PushService* push = service_.push();
  if (push == nullptr) {
    return OnRpc(id, spark::UnsupportedRpc{
                         static_cast<uint8_t>(spark::BlockTransferType::kRemoveShuffleMerge)});
  }
  if (absl::Status removed = push->Remove(m); !removed.ok()) return Reply(id, removed);
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
  const bool push =
      m.type == static_cast<uint8_t>(spark::BlockTransferType::kFinalizeShuffleMerge) ||
      m.type == static_cast<uint8_t>(spark::BlockTransferType::kRemoveShuffleMerge) ||
      m.type == static_cast<uint8_t>(spark::BlockTransferType::kFetchShuffleBlockChunks);
  return Reply(id,
               absl::UnimplementedError(absl::StrCat(
                   "Unexpected message: ", spark::BlockTransferTypeName(m.type),
                   push ? " (push-based shuffle is not served here: ferry_server "
                          "--spark-push-merge)"
                        : " (this shuffle service serves no block uploads or Mesos messages)")));
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
  SparkProtocol protocol(core, service, secrets, tls != nullptr);
  protocol.Resume(control.resumed);
  protocol.Serve();
}

}  // namespace ferry
