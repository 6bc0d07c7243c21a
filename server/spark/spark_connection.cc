#include "server/spark/spark_connection.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/io/ops.h"
#include "common/io/ready_ops.h"
#include "common/spark_layout.h"
#include "common/spark_wire.h"
#include "server/ops/peer_log.h"

namespace ferry {

namespace {

// A connection's buffer while its requests are small: pipelined ChunkFetchRequests are
// 21 bytes each, so one read takes nearly 200. Small, since every connection holds one.
constexpr size_t kBaseBufferBytes = size_t{4} << 10;

// Request bytes held in buffers grown past kBaseBufferBytes, across connections.
std::atomic<uint64_t> grown_buffer_bytes{0};

// Tags of spark.authenticate's handshake messages, sent as RPC bodies.
constexpr uint8_t kAuthMessageTag = 0xFB;
constexpr uint8_t kSaslMessageTag = 0xEA;

std::string SparkName(const BlockId& id) {
  return spark::ShuffleBlockName(
      {id.shuffle_id, id.map_id, id.start_reduce_id, id.end_reduce_id});
}

class SparkConnection {
 public:
  SparkConnection(UniqueFd socket, SparkShuffleService& service, const ConnectionOptions& options,
                  ConnectionControl* control)
      : socket_(std::move(socket)),
        service_(service),
        options_(options),
        control_(control),
        sender_(socket_.get(), options) {}
  ~SparkConnection() { Resize(0); }

  void Serve();

 private:
  struct OpenStream {
    SparkStream stream;
    int32_t next_chunk = 0;
  };
  // How often streams past their lifetime are looked for.
  static constexpr absl::Duration kExpiryCheck = absl::Seconds(1);
  enum class Next { kFrame, kEnd };

  bool Draining() const {
    return control_ != nullptr && control_->draining != nullptr &&
           control_->draining->load(std::memory_order_relaxed);
  }
  void SetServing(bool serving) {
    if (control_ != nullptr) control_->serving = serving;
  }
  // The next whole frame (its bytes after frameLen) into *frame, valid until the next
  // call; kEnd when the connection is to close (peer gone, idle, bad frame, draining).
  Next NextFrame(absl::string_view* frame);
  // Makes the buffer hold `bytes` (0 frees it). False past the shared bound.
  bool Resize(size_t bytes);
  ssize_t Receive(char* buf, size_t len);

  // Each returns false when the connection must close.
  bool Handle(absl::string_view frame);
  // The peer's address, the key of its shares of the service's budgets.
  const std::string& Client() {
    if (client_.empty()) client_ = PeerHost(socket_.get());
    return client_;
  }
  // Closes the streams past their lifetime, at most once per kExpiryCheck.
  void CloseExpired(absl::Time now);
  bool HandleRpc(const spark::RpcRequest& request);
  bool ServeChunk(int64_t stream_id, int32_t chunk_index, const std::string* stream_name);
  bool SendChunkFailure(int64_t stream_id, int32_t chunk_index, const std::string* stream_name,
                        absl::string_view error);
  bool SendFrame(const std::string& frame);
  bool Reply(int64_t request_id, const absl::StatusOr<std::string>& body);

  // Counts the request being handled, answered with `code` (a failure is logged, with
  // `error`).
  void Count(absl::StatusCode code, absl::string_view error = "");

  UniqueFd socket_;
  SparkShuffleService& service_;
  const ConnectionOptions& options_;
  ConnectionControl* control_;
  SegmentSender sender_;
  // Whether a whole frame has arrived yet, and when the frame being read must be whole.
  bool served_any_ = false;
  absl::Time frame_deadline_ = absl::InfiniteFuture();
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
  size_t begin_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last received byte
  absl::flat_hash_map<int64_t, OpenStream> streams_;
  absl::Time next_expiry_check_ = absl::InfinitePast();
  std::string client_;  // read when first needed
  // When the request being handled was read, and when its first byte went out.
  absl::Time request_start_;
  std::optional<absl::Time> first_byte_;
};

bool SparkConnection::Resize(size_t bytes) {
  const uint64_t old_grown = capacity_ > kBaseBufferBytes ? capacity_ - kBaseBufferBytes : 0;
  const uint64_t new_grown = bytes > kBaseBufferBytes ? bytes - kBaseBufferBytes : 0;
  if (new_grown > old_grown &&
      grown_buffer_bytes.fetch_add(new_grown - old_grown, std::memory_order_relaxed) +
              (new_grown - old_grown) >
          kMaxBufferedRequestBytes) {
    grown_buffer_bytes.fetch_sub(new_grown - old_grown, std::memory_order_relaxed);
    return false;
  }
  if (new_grown < old_grown) {
    grown_buffer_bytes.fetch_sub(old_grown - new_grown, std::memory_order_relaxed);
  }
  if (bytes == 0) {
    buffer_.reset();
    capacity_ = begin_ = end_ = 0;
    return true;
  }
  // Not value-initialized: the peer's bytes fill it.
  std::unique_ptr<char[]> grown(new char[bytes]);
  const size_t held = end_ - begin_;
  if (held > 0) std::memcpy(grown.get(), buffer_.get() + begin_, held);
  buffer_ = std::move(grown);
  capacity_ = bytes;
  begin_ = 0;
  end_ = held;
  return true;
}

ssize_t SparkConnection::Receive(char* buf, size_t len) {
  if (Draining()) {
    // Serve what the peer has sent already, without waiting for more.
    const ssize_t n = ::recv(socket_.get(), buf, len, MSG_DONTWAIT);
    return n < 0 ? -errno : n;
  }
  // One deadline for a whole frame, from when the wait for it began: a peer that
  // trickles a byte at a time cannot hold the connection longer than one frame's wait.
  // A new connection gets a shorter one: a peer that connects and says nothing holds a
  // connection slot.
  if (frame_deadline_ == absl::InfiniteFuture()) {
    frame_deadline_ =
        absl::Now() + (served_any_ ? options_.idle_timeout
                                   : std::min(options_.idle_timeout,
                                              options_.first_request_timeout));
  }
  if (options_.engine == IoEngine::kInline) {
    return RecvReady(socket_.get(), buf, len, frame_deadline_);
  }
  return Recv(socket_.get(), buf, len, 0, frame_deadline_);
}

SparkConnection::Next SparkConnection::NextFrame(absl::string_view* frame) {
  for (;;) {
    size_t need = spark::kFrameLengthBytes;
    const size_t held = end_ - begin_;
    if (held >= spark::kFrameLengthBytes) {
      absl::StatusOr<uint64_t> length = spark::DecodeFrameLength(
          absl::string_view(buffer_.get() + begin_, spark::kFrameLengthBytes));
      if (!length.ok() || *length > kMaxSparkRequestFrameBytes) return Next::kEnd;
      need = spark::kFrameLengthBytes + static_cast<size_t>(*length);
      if (held >= need) {
        *frame = absl::string_view(buffer_.get() + begin_ + spark::kFrameLengthBytes,
                                   need - spark::kFrameLengthBytes);
        begin_ += need;
        served_any_ = true;
        frame_deadline_ = absl::InfiniteFuture();
        return Next::kFrame;
      }
    }
    // Room for more of the frame: shrink back after a large one, compact, or grow. The
    // buffer grows with the bytes that arrive (doubling, up to the frame's length), never
    // to a length the peer has only announced.
    if (held == 0 && capacity_ > kBaseBufferBytes) Resize(0);
    if (capacity_ == 0) Resize(kBaseBufferBytes);
    if (end_ == capacity_ && begin_ > 0) {
      std::memmove(buffer_.get(), buffer_.get() + begin_, held);
      begin_ = 0;
      end_ = held;
    } else if (end_ == capacity_ && !Resize(std::min(need, 2 * capacity_))) {
      LogPeerFailure(socket_.get(), "spark", absl::ResourceExhaustedError(absl::StrCat(
          "server busy: the Spark requests being received hold ", kMaxBufferedRequestBytes,
          " bytes beyond their connections' small buffers; closing a connection whose ",
          need, "-byte frame does not fit")));
      return Next::kEnd;
    }
    // Nothing left to serve: push what was sent before waiting on the peer.
    SetServing(false);
    sender_.EndResponse();
    const ssize_t n = Receive(buffer_.get() + end_, capacity_ - end_);
    if (n <= 0) return Next::kEnd;  // closed, reset, idle, draining or stopping
    SetServing(true);
    end_ += static_cast<size_t>(n);
  }
}

void SparkConnection::Serve() {
  if (options_.engine == IoEngine::kInline && SetNonBlocking(socket_.get(), true) < 0) return;
  // Frames are bounded in number only by the peer's patience: each must arrive within
  // the idle timeout, and a stopping scheduler cancels the wait.
  for (;;) {
    absl::string_view frame;
    if (NextFrame(&frame) != Next::kFrame) return;
    if (!Handle(frame)) return;
  }
}

void SparkConnection::Count(absl::StatusCode code, absl::string_view error) {
  if (code != absl::StatusCode::kOk) {
    LogPeerFailure(socket_.get(), "spark", absl::Status(code, error));
  }
  if (control_ == nullptr || control_->metrics == nullptr) return;
  const absl::Time done = absl::Now();
  control_->metrics->Request(FrontDoor::kSpark, code, first_byte_.value_or(done) - request_start_,
                             done - request_start_);
}

void SparkConnection::CloseExpired(absl::Time now) {
  if (streams_.empty() || now < next_expiry_check_) return;
  next_expiry_check_ = now + kExpiryCheck;
  absl::erase_if(streams_, [now](const auto& entry) { return entry.second.stream.expires <= now; });
}

bool SparkConnection::Handle(absl::string_view frame) {
  request_start_ = absl::Now();
  first_byte_.reset();
  CloseExpired(request_start_);
  absl::StatusOr<spark::ClientMessage> message = spark::DecodeClientFrame(frame);
  if (!message.ok()) {
    // Out of frame: nothing more can be read.
    LogPeerFailure(socket_.get(), "spark", message.status());
    return false;
  }
  if (auto* rpc = std::get_if<spark::RpcRequest>(&*message)) return HandleRpc(*rpc);
  if (auto* chunk = std::get_if<spark::ChunkFetchRequest>(&*message)) {
    return ServeChunk(chunk->stream_id, chunk->chunk_index, nullptr);
  }
  if (auto* stream = std::get_if<spark::StreamRequest>(&*message)) {
    // "<streamId>_<chunkIndex>", both decimal.
    const std::vector<absl::string_view> parts = absl::StrSplit(stream->stream_id, '_');
    int64_t stream_id = 0;
    int32_t chunk_index = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &stream_id) ||
        !absl::SimpleAtoi(parts[1], &chunk_index)) {
      return SendFrame(spark::EncodeStreamFailure(
          stream->stream_id,
          absl::StrCat("stream id '", stream->stream_id, "' is not <streamId>_<chunkIndex>")));
    }
    return ServeChunk(stream_id, chunk_index, &stream->stream_id);
  }
  if (std::holds_alternative<spark::OneWayMessage>(*message)) {
    return true;  // push-based shuffle's RemoveShuffleMerge; a one-way message has no reply
  }
  const auto& unsupported = std::get<spark::UnsupportedMessage>(*message);
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

bool SparkConnection::HandleRpc(const spark::RpcRequest& request) {
  const int64_t id = request.request_id;
  if (!request.body.empty() && (static_cast<uint8_t>(request.body[0]) == kAuthMessageTag ||
                                static_cast<uint8_t>(request.body[0]) == kSaslMessageTag)) {
    return SendFrame(spark::EncodeRpcFailure(
        id, "spark.authenticate is not supported by this shuffle service (ferry_server): run "
            "the application with spark.authenticate=false"));
  }
  absl::StatusOr<spark::ShuffleRpc> rpc = spark::DecodeShuffleRpc(request.body);
  if (!rpc.ok()) return Reply(id, rpc.status());
  if (auto* m = std::get_if<spark::RegisterExecutor>(&*rpc)) {
    absl::Status registered = service_.Register(std::move(*m));
    if (!registered.ok()) return Reply(id, registered);
    return Reply(id, std::string());
  }
  if (std::holds_alternative<spark::FetchShuffleBlocks>(*rpc) ||
      std::holds_alternative<spark::OpenBlocks>(*rpc)) {
    if (streams_.size() >= service_.options().max_streams_per_connection) {
      return Reply(id, absl::ResourceExhaustedError(absl::StrCat(
                           service_.options().max_streams_per_connection,
                           " streams are open on this connection; fetch their chunks first")));
    }
    absl::StatusOr<SparkStream> stream =
        std::holds_alternative<spark::FetchShuffleBlocks>(*rpc)
            ? service_.OpenStream(std::get<spark::FetchShuffleBlocks>(*rpc), Client())
            : service_.OpenStream(std::get<spark::OpenBlocks>(*rpc), Client());
    if (!stream.ok()) {
      // The server is short of something (chunks, workers, time): closing the connection
      // is what Spark's client retries; an RpcFailure it would not.
      if (absl::IsResourceExhausted(stream.status()) ||
          absl::IsDeadlineExceeded(stream.status()) || absl::IsCancelled(stream.status())) {
        Count(stream.status().code(), stream.status().message());
        return false;
      }
      return Reply(id, stream.status());
    }
    const int64_t stream_id = stream->id;
    const int32_t chunks = static_cast<int32_t>(stream->chunks.size());
    if (chunks > 0) streams_[stream_id] = OpenStream{*std::move(stream), 0};
    return Reply(id, spark::EncodeStreamHandle(stream_id, chunks));
  }
  if (auto* m = std::get_if<spark::RemoveBlocks>(&*rpc)) {
    absl::StatusOr<int32_t> removed = service_.RemoveBlocks(*m);
    if (!removed.ok()) return Reply(id, removed.status());
    return Reply(id, spark::EncodeBlocksRemoved(*removed));
  }
  if (auto* m = std::get_if<spark::GetLocalDirsForExecutors>(&*rpc)) {
    return Reply(id, service_.LocalDirs(*m));
  }
  if (auto* m = std::get_if<spark::DiagnoseCorruption>(&*rpc)) {
    absl::StatusOr<uint8_t> cause = service_.Diagnose(*m, Client());
    if (!cause.ok()) return Reply(id, cause.status());
    return Reply(id, spark::EncodeCorruptionCause(*cause));
  }
  const uint8_t type = std::get<spark::UnsupportedRpc>(*rpc).type;
  return Reply(id, absl::UnimplementedError(absl::StrCat(
                       "Unexpected message: ", spark::BlockTransferTypeName(type),
                       " (this shuffle service serves fetches only: no push-based shuffle "
                       "merges, block uploads or Mesos messages)")));
}

bool SparkConnection::Reply(int64_t request_id, const absl::StatusOr<std::string>& body) {
  Count(body.status().code(), body.status().message());
  if (!body.ok()) {
    return SendFrame(spark::EncodeRpcFailure(request_id, body.status().ToString()));
  }
  return SendFrame(spark::EncodeRpcResponse(request_id, *body));
}

bool SparkConnection::SendFrame(const std::string& frame) {
  return sender_.Send(frame.data(), frame.size(), /*more=*/false) ==
         static_cast<ssize_t>(frame.size());
}

bool SparkConnection::SendChunkFailure(int64_t stream_id, int32_t chunk_index,
                                       const std::string* stream_name, absl::string_view error) {
  Count(absl::StatusCode::kFailedPrecondition, error);
  if (stream_name != nullptr) return SendFrame(spark::EncodeStreamFailure(*stream_name, error));
  return SendFrame(spark::EncodeChunkFetchFailure(stream_id, chunk_index, error));
}

bool SparkConnection::ServeChunk(int64_t stream_id, int32_t chunk_index,
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
  ++open.next_chunk;
  if (static_cast<size_t>(open.next_chunk) == open.stream.chunks.size()) streams_.erase(it);
  const StreamBlock& block = chunk.block;
  if (!chunk.status.ok()) {
    return SendChunkFailure(stream_id, chunk_index, stream_name,
                            absl::StrCat(SparkName(block.id), ": ", chunk.status.ToString()));
  }
  // The block's name is built only for an error: not on the per-block path.
  if (stream_name == nullptr && block.length > spark::kMaxChunkBodyBytes) {
    return SendChunkFailure(
        stream_id, chunk_index, stream_name,
        absl::StrCat(SparkName(block.id), " is ", block.length,
                     " bytes, more than a Spark frame can hold; fetch it to disk "
                     "(spark.network.maxRemoteBlockSizeFetchToMem)"));
  }
  // A file that shrank since the stream was opened is caught here, before the header
  // promises bytes the file no longer has.
  struct stat st;
  if (::fstat(block.file->fd.get(), &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < block.offset + block.length) {
    return SendChunkFailure(stream_id, chunk_index, stream_name,
                            absl::StrCat(SparkName(block.id), ": data file ", block.file->path,
                                         " no longer holds the block (it ends before byte ",
                                         block.offset + block.length, ")"));
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
  sender_.StartResponse(block.length);
  // MSG_MORE lets the header share a segment with the block that follows.
  if (sender_.Send(header.data(), header.size(), /*more=*/block.length > 0) !=
      static_cast<ssize_t>(header.size())) {
    return false;
  }
  first_byte_ = absl::Now();
  // A failure past the header leaves the peer's stream out of frame: only closing the
  // connection is honest, and Spark's client retries it.
  if (!sender_.SendFile(*block.file, block.offset, block.length,
                        [&] { return SparkName(block.id); })
           .ok()) {
    return false;
  }
  if (control_ != nullptr && control_->metrics != nullptr) {
    control_->metrics->Sent(FrontDoor::kSpark, block.length, 1);
  }
  Count(absl::StatusCode::kOk);
  sender_.TakeTurns(0, 1);
  return true;
}

}  // namespace

void ServeSparkConnection(UniqueFd socket, SparkShuffleService& service,
                          const ConnectionOptions& options, ConnectionControl* control) {
  SparkConnection(std::move(socket), service, options, control).Serve();
}

}  // namespace ferry
