#include "server/spark/spark_protocol.h"

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/spark_crypto.h"
#include "common/spark_layout.h"
#include "common/spark_sasl.h"
#include "common/spark_wire.h"
#include "common/status_macros.h"
#include "server/spark/spark_cipher.h"

namespace ferry {

namespace {

// Handshake messages a connection may send before it has authenticated: DIGEST-MD5
// takes two (the empty first token, the response); the bound holds whatever the
// mechanism does. Spark's AuthEngine takes one message, which authenticates or closes
// the connection, or over TLS is declined (and counted here) so that the client goes on
// with SASL.
constexpr int kMaxAuthMessages = 4;

// SASL's auth-conf as the connection's security layer.
class SaslLayer final : public SecurityLayer {
 public:
  explicit SaslLayer(std::unique_ptr<spark::SaslCipher> cipher) : cipher_(std::move(cipher)) {}
  absl::Status Seal(absl::string_view plain, std::string* wire) override {
    return cipher_->Seal(plain, wire);
  }
  absl::Status Open(absl::string_view wire, std::string* plain) override {
    return cipher_->Open(wire, plain);
  }

 private:
  std::unique_ptr<spark::SaslCipher> cipher_;
};

std::string SparkName(const BlockId& id) {
  return spark::ShuffleBlockName({id.shuffle_id, id.map_id, id.start_reduce_id, id.end_reduce_id});
}

class SparkProtocol {
 public:
  SparkProtocol(ConnectionCore& core, SparkShuffleService& service, SparkSecrets& secrets, bool tls)
      : core_(core), service_(service), secrets_(secrets), tls_(tls) {}

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
  bool On(const spark::UnsupportedMessage& message);
  // One handler per BlockTransferMessage inside an RpcRequest, chosen the same way.
  bool OnRpc(int64_t id, spark::RegisterExecutor& m);
  bool OnRpc(int64_t id, const spark::FetchShuffleBlocks& m);
  bool OnRpc(int64_t id, const spark::OpenBlocks& m);
  bool OnRpc(int64_t id, const spark::RemoveBlocks& m);
  bool OnRpc(int64_t id, const spark::GetLocalDirsForExecutors& m);
  bool OnRpc(int64_t id, const spark::DiagnoseCorruption& m);
  bool OnRpc(int64_t id, const spark::UnsupportedRpc& m);
  // FetchShuffleBlocks and OpenBlocks: a stream of the blocks they name.
  template <typename Fetch>
  bool OpenStreamFor(int64_t id, const Fetch& fetch);
  // The handshake of spark.authenticate, before any other message.
  bool Authenticate(const spark::ClientMessage& message);
  bool HandleSasl(int64_t request_id, absl::string_view body);
  bool HandleAuthEngine(int64_t request_id, absl::string_view body);
  // Ends a handshake that failed: counted, answered with `status`, and false (the
  // connection closes).
  bool RefuseHandshake(int64_t request_id, const absl::Status& status);
  // The secret `app_id` authenticates with; a file's read runs on a blocking worker.
  absl::StatusOr<std::string> SecretOf(const std::string& app_id);
  // PERMISSION_DENIED unless the connection may act for `app_id`.
  absl::Status CheckApp(const std::string& app_id) const;
  bool ServeChunk(int64_t stream_id, int32_t chunk_index, const std::string* stream_name);
  bool SendChunkFailure(int64_t stream_id, int32_t chunk_index, const std::string* stream_name,
                        absl::string_view error);
  bool SendFrame(const std::string& frame) { return core_.SendBytes(frame); }
  bool Reply(int64_t request_id, const absl::StatusOr<std::string>& body);

  ConnectionCore& core_;
  SparkShuffleService& service_;
  SparkSecrets& secrets_;
  const bool tls_;  // the connection is TLS from its first byte
  // spark.authenticate: the exchange under way, and the application the connection
  // authenticated as.
  std::unique_ptr<spark::SaslServer> sasl_;
  std::string sasl_app_;
  int auth_messages_ = 0;
  bool authenticated_ = false;
  std::string authenticated_app_;
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
  if (secrets_.required() && !authenticated_) return Authenticate(*message);
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

bool SparkProtocol::On(const spark::OneWayMessage&) {
  return true;  // push-based shuffle's RemoveShuffleMerge; a one-way message has no reply
}

bool SparkProtocol::On(const spark::UnsupportedMessage& unsupported) {
  if (!unsupported.has_request_id) return false;  // a server's message, or an unknown type
  const bool upload = unsupported.type == spark::MessageType::kUploadStream;
  const bool told = SendFrame(spark::EncodeRpcFailure(
      unsupported.request_id,
      upload ? "UploadStream (push-based shuffle, block upload) is not supported by this "
               "shuffle service; the connection closes"
             : "MergedBlockMetaRequest (push-based shuffle) is not supported by this shuffle "
               "service"));
  // An UploadStream's body follows its frame unframed: the connection cannot go on.
  return told && !upload;
}

bool SparkProtocol::Authenticate(const spark::ClientMessage& message) {
  const auto* rpc = std::get_if<spark::RpcRequest>(&message);
  const uint8_t tag = rpc != nullptr && !rpc->body.empty() ? static_cast<uint8_t>(rpc->body[0]) : 0;
  if (tag == spark::kSaslMessageTag) return HandleSasl(rpc->request_id, rpc->body);
  // A SASL exchange under way is not switched to another handshake.
  if (tag == spark::kAuthMessageTag && sasl_ == nullptr) {
    return HandleAuthEngine(rpc->request_id, rpc->body);
  }
  // Spark's words for anything else before authentication; the connection closes.
  const absl::Status refused = absl::PermissionDeniedError(
      "Expected SaslMessage, received something else (maybe your client does not have SASL "
      "enabled?)");
  secrets_.CountHandshake(SparkSecrets::Outcome::kRefused);
  if (rpc != nullptr) {
    Reply(rpc->request_id, refused);
  } else {
    core_.EndRequest(refused);
  }
  return false;
}

absl::StatusOr<std::string> SparkProtocol::SecretOf(const std::string& app_id) {
  if (!secrets_.reads_files()) return secrets_.SecretOf(app_id);
  return service_.RunBlocking<std::string>(
      [secrets = &secrets_, app_id]() { return secrets->SecretOf(app_id); });
}

bool SparkProtocol::RefuseHandshake(int64_t request_id, const absl::Status& status) {
  // Every failure closes the connection, as Spark's service does: a client retries with
  // a new one, and a peer guessing the secret pays a connection per guess.
  secrets_.CountHandshake(SparkSecrets::Outcome::kRefused);
  Reply(request_id, status);
  return false;
}

bool SparkProtocol::HandleAuthEngine(int64_t request_id, absl::string_view body) {
  if (tls_) {
    // Spark does not run the AuthEngine's encryption inside TLS; a client that asks
    // falls back to SASL on this connection (spark.network.crypto.saslFallback). The
    // declines count against the handshake's messages, so that they cannot go on.
    if (++auth_messages_ > kMaxAuthMessages) {
      return RefuseHandshake(request_id, absl::PermissionDeniedError(absl::StrCat(
                                             "more than ", kMaxAuthMessages,
                                             " handshake messages without authenticating")));
    }
    return Reply(request_id, absl::FailedPreconditionError(
                                 "this connection is TLS already: authenticate with SASL"));
  }
  absl::StatusOr<spark::AuthMessage> challenge = spark::DecodeAuthMessage(body);
  if (!challenge.ok()) return RefuseHandshake(request_id, challenge.status());
  absl::StatusOr<std::string> secret = SecretOf(challenge->app_id);
  if (!secret.ok()) return RefuseHandshake(request_id, secret.status());
  absl::StatusOr<spark::AuthEngineAnswer> answer = spark::AnswerChallenge(*secret, *challenge);
  if (!answer.ok()) return RefuseHandshake(request_id, answer.status());
  std::vector<SparkCtrLayer::Candidate> candidates;
  if (secrets_.auth_engine_v1()) candidates.push_back({1, std::move(answer->v1)});
  candidates.push_back({2, std::move(answer->v2)});
  SparkSecrets& secrets = secrets_;
  absl::StatusOr<std::unique_ptr<SparkCtrLayer>> layer =
      SparkCtrLayer::Create(std::move(candidates), kMaxSparkRequestFrameBytes,
                            [&secrets](int version) { secrets.CountAuthEngineSession(version); });
  if (!layer.ok()) return RefuseHandshake(request_id, layer.status());
  secrets_.CountHandshake(SparkSecrets::Outcome::kEncrypted);
  authenticated_ = true;
  authenticated_app_ = challenge->app_id;
  // The response goes in clear; every byte after it, either way, is encrypted.
  const bool replied = Reply(request_id, spark::EncodeAuthMessage(answer->response));
  return core_.Secure(*std::move(layer)) && replied;
}

bool SparkProtocol::HandleSasl(int64_t request_id, absl::string_view body) {
  if (++auth_messages_ > kMaxAuthMessages) {
    return RefuseHandshake(request_id, absl::PermissionDeniedError(absl::StrCat(
                                           "SASL: more than ", kMaxAuthMessages,
                                           " handshake messages without authenticating")));
  }
  absl::StatusOr<spark::SaslMessage> message = spark::DecodeSaslMessage(body);
  if (!message.ok()) return RefuseHandshake(request_id, message.status());
  if (sasl_ == nullptr) {
    absl::StatusOr<std::string> secret = SecretOf(message->app_id);
    if (!secret.ok()) return RefuseHandshake(request_id, secret.status());
    absl::StatusOr<std::unique_ptr<spark::SaslServer>> server =
        spark::SaslServer::Create(*secret, /*offer_encryption=*/!tls_);
    if (!server.ok()) return RefuseHandshake(request_id, server.status());
    sasl_ = *std::move(server);
    sasl_app_ = message->app_id;
  } else if (message->app_id != sasl_app_) {
    return RefuseHandshake(request_id, absl::PermissionDeniedError(absl::StrCat(
                                           "SASL: a handshake begun for application ", sasl_app_,
                                           " went on for application ", message->app_id)));
  }
  absl::StatusOr<std::string> token = sasl_->Step(message->token);
  if (!token.ok()) {
    return RefuseHandshake(request_id, absl::PermissionDeniedError(absl::StrCat(
                                           "SASL authentication of application ", sasl_app_,
                                           " failed: ", token.status().message())));
  }
  if (!sasl_->complete()) return Reply(request_id, *std::move(token));
  std::unique_ptr<spark::SaslCipher> cipher = sasl_->TakeCipher();
  secrets_.CountHandshake(cipher != nullptr ? SparkSecrets::Outcome::kEncrypted
                                            : SparkSecrets::Outcome::kAuthenticated);
  authenticated_ = true;
  authenticated_app_ = std::move(sasl_app_);
  sasl_.reset();
  // The last token goes in clear; with auth-conf, every byte after it is sealed.
  const bool replied = Reply(request_id, *std::move(token));
  if (cipher != nullptr && !core_.Secure(std::make_unique<SaslLayer>(std::move(cipher)))) {
    return false;
  }
  return replied;
}

absl::Status SparkProtocol::CheckApp(const std::string& app_id) const {
  if (!secrets_.required() || app_id == authenticated_app_) return absl::OkStatus();
  // Spark's ExternalBlockHandler.checkAuth.
  return absl::PermissionDeniedError(absl::StrCat("Client for ", authenticated_app_,
                                                  " not authorized for application ", app_id, "."));
}

bool SparkProtocol::On(const spark::RpcRequest& request) {
  const int64_t id = request.request_id;
  if (!request.body.empty() && (static_cast<uint8_t>(request.body[0]) == spark::kAuthMessageTag ||
                                static_cast<uint8_t>(request.body[0]) == spark::kSaslMessageTag)) {
    return Reply(
        id, absl::FailedPreconditionError(
                secrets_.required() ? "this connection has authenticated already"
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
  absl::Status registered =
      service_.Register(std::move(m), core_.peer_host(), !authenticated_app_.empty());
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

bool SparkProtocol::OnRpc(int64_t id, const spark::UnsupportedRpc& m) {
  return Reply(id, absl::UnimplementedError(absl::StrCat(
                       "Unexpected message: ", spark::BlockTransferTypeName(m.type),
                       " (this shuffle service serves fetches only: no push-based shuffle "
                       "merges, block uploads or Mesos messages)")));
}

bool SparkProtocol::Reply(int64_t request_id, const absl::StatusOr<std::string>& body) {
  core_.EndRequest(body.status());
  if (!body.ok()) {
    return SendFrame(spark::EncodeRpcFailure(request_id, body.status().ToString()));
  }
  return SendFrame(spark::EncodeRpcResponse(request_id, *body));
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
  std::shared_ptr<const spark::ExecutorDirs> rdd_dirs = open.stream.rdd_dirs;
  ++open.next_chunk;
  if (static_cast<size_t>(open.next_chunk) == open.stream.chunks.size()) streams_.erase(it);
  // The block's name is built only for an error: not on the per-block path.
  const auto name = [&] {
    return rdd ? absl::StrCat("rdd_", chunk.block.id.shuffle_id, "_", chunk.block.id.map_id)
               : SparkName(chunk.block.id);
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
