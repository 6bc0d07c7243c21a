#include "client/spark_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/block_verifier.h"
#include "client/tls_stream.h"
#include "common/io/ops.h"
#include "common/io/scheduler.h"
#include "common/net_address.h"
#include "common/spark/crypto.h"
#include "common/spark/sasl.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "proto/ferry.pb.h"

namespace ferry {

namespace {

namespace sw = spark;

// The most a reply other than a block may hold (a StreamHandle, a failure's text).
constexpr uint64_t kMaxReplyBytes = uint64_t{16} << 20;
// A merged partition's chunk bitmaps, and the map indexes one may name (as the server
// bounds them).
constexpr uint64_t kMaxMergedMetaBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxMapsPerChunk = uint64_t{1} << 24;

// shuffleChunk_<shuffle>_<merge>_<reduce>, a merged partition's chunks' prefix.
std::string MergedName(const SparkMergedPartition& p) {
  return absl::StrCat("shuffleChunk_", p.shuffle_id, "_", p.merge_id, "_", p.reduce_id);
}
// frameLen and type.
constexpr size_t kFramePrefixBytes = sw::kFrameLengthBytes + 1;

absl::Status IoError(ssize_t res, absl::string_view what) {
  if (res == -ETIMEDOUT) return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
  if (res >= 0) return absl::UnavailableError(absl::StrCat(what, ": connection closed"));
  return absl::ErrnoToStatus(static_cast<int>(-res), what);
}

absl::StatusOr<SocketAddress> ParseAddress(const std::string& address) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  absl::StatusOr<SocketAddress> addr = parsed.ok() && parsed->port != 0
                                           ? SocketAddress::Numeric(parsed->host, parsed->port)
                                           : absl::InvalidArgumentError("");
  if (!addr.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", address, "' is not the numeric host:port ([IPv6]:port) of a shuffle service"));
  }
  return addr;
}

// One request: blocks that go in one FetchShuffleBlocks, and which caller block each
// chunk of its stream is.
struct Request {
  bool batch = false;
  sw::FetchShuffleBlocks message;
  std::vector<size_t> chunk_to_block;
};

// Packs blocks into requests as Spark's client builds FetchShuffleBlocks: maps in order
// of first appearance, each map's reduce ids in the order given, one range per map when
// batched (a range's request holds only ranges).
std::vector<Request> PlanRequests(const std::string& app_id, const std::string& exec_id,
                                  const std::vector<sw::ShuffleBlockId>& blocks,
                                  size_t blocks_per_request) {
  std::vector<std::vector<size_t>> groups;
  std::vector<bool> group_batch;
  absl::flat_hash_set<int64_t> maps_in_group;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const bool batch = blocks[i].end_reduce_id - blocks[i].start_reduce_id != 1;
    const bool fits = !groups.empty() && group_batch.back() == batch &&
                      groups.back().size() < std::max<size_t>(blocks_per_request, 1) &&
                      blocks[i].shuffle_id == blocks[groups.back().front()].shuffle_id &&
                      !(batch && maps_in_group.contains(blocks[i].map_id));
    if (!fits) {
      groups.emplace_back();
      group_batch.push_back(batch);
      maps_in_group.clear();
    }
    groups.back().push_back(i);
    maps_in_group.insert(blocks[i].map_id);
  }
  std::vector<Request> requests;
  for (size_t g = 0; g < groups.size(); ++g) {
    Request r;
    r.batch = group_batch[g];
    r.message = {app_id, exec_id, blocks[groups[g].front()].shuffle_id, {}, {}, r.batch};
    std::vector<std::vector<size_t>> members;  // per map, the caller's blocks
    for (size_t i : groups[g]) {
      auto it = std::find(r.message.map_ids.begin(), r.message.map_ids.end(), blocks[i].map_id);
      size_t m = static_cast<size_t>(it - r.message.map_ids.begin());
      if (it == r.message.map_ids.end()) {
        r.message.map_ids.push_back(blocks[i].map_id);
        r.message.reduce_ids.emplace_back();
        members.emplace_back();
      }
      if (r.batch) {
        r.message.reduce_ids[m] = {blocks[i].start_reduce_id, blocks[i].end_reduce_id};
      } else {
        r.message.reduce_ids[m].push_back(blocks[i].start_reduce_id);
      }
      members[m].push_back(i);
    }
    for (const std::vector<size_t>& of_map : members) {
      r.chunk_to_block.insert(r.chunk_to_block.end(), of_map.begin(), of_map.end());
    }
    requests.push_back(std::move(r));
  }
  return requests;
}

// What a connection encrypted with AES-CTR receives, frames and blocks alike, decrypted.
class CtrReader final : public PlainReader {
 public:
  CtrReader(int socket, spark::CtrCipher cipher) : socket_(socket), cipher_(std::move(cipher)) {}
  ssize_t Read(char* buf, size_t len, absl::Time deadline) override {
    const ssize_t n = Recv(socket_, buf, len, 0, deadline);
    if (n > 0) cipher_.Apply(buf, buf, static_cast<size_t>(n));
    return n;
  }

 private:
  const int socket_;
  spark::CtrCipher cipher_;
};

// What a connection with SASL's auth-conf receives, opened from its records; and what
// seals what it sends.
class SaslReader final : public PlainReader {
 public:
  SaslReader(int socket, std::unique_ptr<spark::SaslCipher> cipher)
      : socket_(socket), cipher_(std::move(cipher)) {}
  ssize_t Read(char* buf, size_t len, absl::Time deadline) override {
    while (taken_ == plain_.size()) {
      plain_.clear();
      taken_ = 0;
      wire_.resize(kWireBytes);
      const ssize_t n = Recv(socket_, wire_.data(), wire_.size(), 0, deadline);
      if (n <= 0) return n;
      if (!cipher_->Open(absl::string_view(wire_.data(), static_cast<size_t>(n)), &plain_).ok()) {
        return -EPROTO;
      }
    }
    const size_t take = std::min(len, plain_.size() - taken_);
    std::memcpy(buf, plain_.data() + taken_, take);
    taken_ += take;
    return static_cast<ssize_t>(take);
  }
  absl::Status Seal(absl::string_view plain, std::string* wire) {
    return cipher_->Seal(plain, wire);
  }

 private:
  static constexpr size_t kWireBytes = size_t{64} << 10;
  const int socket_;
  std::unique_ptr<spark::SaslCipher> cipher_;
  std::string wire_;   // what the socket gave, reused
  std::string plain_;  // what it opened to, served from taken_ on
  size_t taken_ = 0;
};

// One connection to the service, used from one fiber.
class SparkConnection {
 public:
  SparkConnection(std::string address, const SparkFetchOptions& options)
      : address_(std::move(address)), options_(options) {}

  absl::Status Connect(const SocketAddress& addr) {
    fd_ = UniqueFd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd_.valid()) return absl::ErrnoToStatus(errno, "socket");
    const int res = ferry::Connect(fd_.get(), addr.get(), addr.size(), Deadline());
    if (res < 0) return IoError(res, absl::StrCat("connect to shuffle service ", address_));
    const int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (options_.tls_trust_file.empty()) return absl::OkStatus();
    FERRY_ASSIGN_OR_RETURN(HostPort host, ParseHostPort(address_));  // parsed once already
    absl::StatusOr<std::unique_ptr<TlsStream>> tls =
        TlsStream::Connect(fd_.get(), options_.tls_trust_file, host.host, Deadline());
    if (!tls.ok()) {
      return absl::Status(tls.status().code(),
                          absl::StrCat("shuffle service ", address_, ": ", tls.status().message()));
    }
    tls_ = *std::move(tls);
    return absl::OkStatus();
  }

  // spark.authenticate's handshake as `app_id`, when the options carry a secret.
  absl::Status Authenticate(const std::string& app_id) {
    if (options_.auth_secret.empty()) return absl::OkStatus();
    if (options_.auth_engine_version != 0) return AuthenticateWithAuthEngine(app_id);
    const std::string what = absl::StrCat("SASL authentication of application ", app_id,
                                          " with shuffle service ", address_);
    FERRY_ASSIGN_OR_RETURN(
        std::unique_ptr<spark::SaslClient> sasl,
        spark::SaslClient::Create(options_.auth_secret.view(), options_.sasl_encryption));
    absl::StatusOr<std::string> token = sasl->Start();
    // DIGEST-MD5 takes two round trips; a server asking for more is not Spark's.
    for (int round = 0; token.ok() && !sasl->complete(); ++round) {
      if (round == 4) return Protocol(what, "more than 4 rounds");
      FERRY_ASSIGN_OR_RETURN(std::string reply,
                             Call(sw::EncodeSaslMessage({app_id, *std::move(token)}), what));
      token = sasl->Step(reply);
    }
    if (!token.ok())
      return absl::Status(token.status().code(),
                          absl::StrCat(what, ": ", token.status().message()));
    if (std::unique_ptr<spark::SaslCipher> cipher = sasl->TakeCipher(); cipher != nullptr) {
      sasl_.emplace(fd_.get(), std::move(cipher));
    }
    return absl::OkStatus();
  }

  // Spark's AuthEngine handshake, after which every byte is AES-CTR.
  absl::Status AuthenticateWithAuthEngine(const std::string& app_id) {
    const std::string what = absl::StrCat("AuthEngine authentication of application ", app_id,
                                          " with shuffle service ", address_);
    const auto failed = [&](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    };
    absl::StatusOr<spark::AuthEngineClient> engine =
        spark::AuthEngineClient::Create(app_id, options_.auth_secret, options_.auth_engine_version);
    if (!engine.ok()) return failed(engine.status());
    absl::StatusOr<spark::AuthMessage> challenge = engine->Challenge();
    if (!challenge.ok()) return failed(challenge.status());
    FERRY_ASSIGN_OR_RETURN(std::string reply, Call(sw::EncodeAuthMessage(*challenge), what));
    absl::StatusOr<spark::AuthMessage> response = sw::DecodeAuthMessage(reply);
    if (!response.ok()) return Protocol(what, response.status().message());
    absl::StatusOr<spark::SessionKeys> keys = engine->Finish(*challenge, *response);
    if (!keys.ok()) return failed(keys.status());
    absl::StatusOr<spark::CtrCipher> out = spark::CtrCipher::Create(keys->key.view(), keys->out_iv);
    absl::StatusOr<spark::CtrCipher> in = spark::CtrCipher::Create(keys->key.view(), keys->in_iv);
    if (!out.ok()) return failed(out.status());
    if (!in.ok()) return failed(in.status());
    out_.emplace(*std::move(out));
    in_.emplace(fd_.get(), *std::move(in));
    return absl::OkStatus();
  }

  // Sends an RPC and returns its reply's body; the service's RpcFailure as an error.
  absl::StatusOr<std::string> Call(absl::string_view body, absl::string_view what) {
    const int64_t id = next_request_id_++;
    FERRY_RETURN_IF_ERROR(SendBytes(sw::EncodeRpcRequest(id, body), what));
    return ReadReply(id, what);
  }

  // Fetches the requests' blocks into the sink. Up to kRequestsInFlight requests are
  // open at once, so the service always has the next stream's chunks queued when one
  // ends. The service answers frames in the order it receives them, so each reply is
  // matched against a queue of what was sent.
  absl::Status FetchRequests(const std::vector<const Request*>& requests,
                             const std::vector<sw::ShuffleBlockId>& blocks, BlockSink& sink,
                             SparkFetchStats& stats) {
    constexpr size_t kRequestsInFlight = 2;
    struct Expected {
      size_t request;
      int32_t chunk;  // -1: the FetchShuffleBlocks reply
    };
    std::deque<Expected> expected;
    std::vector<int64_t> stream_of(requests.size());
    size_t next = 0;
    size_t open = 0;
    auto send_next = [&]() -> absl::Status {
      for (; next < requests.size() && open < kRequestsInFlight; ++next, ++open) {
        const Request& r = *requests[next];
        const std::string what = Describe(r, blocks);
        FERRY_RETURN_IF_ERROR(SendBytes(
            sw::EncodeRpcRequest(next_request_id_++, sw::EncodeFetchShuffleBlocks(r.message)),
            what));
        expected.push_back({next, -1});
      }
      return absl::OkStatus();
    };
    FERRY_RETURN_IF_ERROR(send_next());
    while (!expected.empty()) {
      const Expected e = expected.front();
      expected.pop_front();
      const Request& r = *requests[e.request];
      if (e.chunk < 0) {
        FERRY_ASSIGN_OR_RETURN(int64_t stream, ReadStreamHandle(r, blocks));
        stream_of[e.request] = stream;
        // Every chunk asked for at once, as Spark's fetcher does.
        std::string asks;
        for (int32_t i = 0; i < static_cast<int32_t>(r.chunk_to_block.size()); ++i) {
          asks += options_.fetch_to_disk ? sw::EncodeStreamRequest(absl::StrCat(stream, "_", i))
                                         : sw::EncodeChunkFetchRequest({stream, i});
          expected.push_back({e.request, i});
        }
        FERRY_RETURN_IF_ERROR(SendBytes(std::move(asks), Describe(r, blocks)));
        continue;
      }
      const size_t block = r.chunk_to_block[static_cast<size_t>(e.chunk)];
      FERRY_ASSIGN_OR_RETURN(uint64_t got, ReceiveChunk(stream_of[e.request], e.chunk, block,
                                                        BlockName(blocks[block]), sink));
      stats.bytes += got;
      ++stats.blocks;
      if (static_cast<size_t>(e.chunk) + 1 == r.chunk_to_block.size()) {
        --open;
        FERRY_RETURN_IF_ERROR(send_next());
      }
    }
    return absl::OkStatus();
  }

  std::string BlockName(const sw::ShuffleBlockId& id) const {
    return absl::StrCat(sw::ShuffleBlockName(id), " from ", address_);
  }

  // A merged partition's chunk bitmaps: a MergedBlockMetaRequest answered with
  // MergedBlockMetaSuccess, whose body is one bitmap per chunk.
  absl::StatusOr<std::vector<spark::Bitmap>> MergedMeta(const std::string& app_id,
                                                        const SparkMergedPartition& p) {
    const std::string what =
        absl::StrCat("the chunk bitmaps of ", MergedName(p), " from ", address_);
    const int64_t id = next_request_id_++;
    FERRY_RETURN_IF_ERROR(SendBytes(
        sw::EncodeMergedBlockMetaRequest({id, app_id, p.shuffle_id, p.merge_id, p.reduce_id}),
        what));
    FERRY_ASSIGN_OR_RETURN(sw::ServerMessage reply, ReadMessage(what, kMaxMergedMetaBytes));
    auto* meta = std::get_if<sw::MergedBlockMetaSuccess>(&reply);
    if (meta == nullptr || meta->request_id != id) {
      return Protocol(what, "a reply that is not the request's MergedBlockMetaSuccess");
    }
    if (meta->num_chunks < 0) {
      return Protocol(what, absl::StrCat(meta->num_chunks, " chunks"));
    }
    std::vector<spark::Bitmap> bitmaps;
    absl::string_view rest = meta->body;
    for (int32_t c = 0; c < meta->num_chunks; ++c) {
      absl::StatusOr<spark::Bitmap> bitmap = spark::Bitmap::Read(&rest, kMaxMapsPerChunk);
      if (!bitmap.ok()) {
        return Protocol(what, absl::StrCat("chunk ", c, "'s bitmap: ", bitmap.status().message()));
      }
      bitmaps.push_back(*std::move(bitmap));
    }
    if (!rest.empty()) {
      return Protocol(
          what, absl::StrCat(rest.size(), " bytes after ", meta->num_chunks, " chunks' bitmaps"));
    }
    return bitmaps;
  }

  // A merged partition's chunks [0, chunks): a FetchShuffleBlockChunks answered with a
  // stream of them, each asked for with a ChunkFetchRequest; chunk i to `sink` as block
  // first_index + i.
  absl::Status MergedChunks(const std::string& app_id, const std::string& exec_id,
                            const SparkMergedPartition& p, int32_t chunks, size_t first_index,
                            BlockSink& sink, SparkFetchStats& stats) {
    const std::string what = absl::StrCat("the chunks of ", MergedName(p), " from ", address_);
    sw::FetchShuffleBlockChunks request{app_id,     exec_id,       p.shuffle_id,
                                        p.merge_id, {p.reduce_id}, {{}}};
    for (int32_t c = 0; c < chunks; ++c) request.chunk_ids[0].push_back(c);
    FERRY_ASSIGN_OR_RETURN(std::string handle,
                           Call(sw::EncodeFetchShuffleBlockChunks(request), what));
    absl::StatusOr<sw::ShuffleReply> reply = sw::DecodeShuffleReply(handle);
    const auto* stream = reply.ok() ? std::get_if<sw::StreamHandle>(&*reply) : nullptr;
    if (stream == nullptr || stream->num_chunks != chunks) {
      return Protocol(what, stream == nullptr
                                ? "a reply that is not a stream handle"
                                : absl::StrCat("a stream handle of ", stream->num_chunks,
                                               " chunks for ", chunks));
    }
    std::string asks;
    for (int32_t c = 0; c < chunks; ++c)
      asks += sw::EncodeChunkFetchRequest({stream->stream_id, c});
    FERRY_RETURN_IF_ERROR(SendBytes(std::move(asks), what));
    for (int32_t c = 0; c < chunks; ++c) {
      FERRY_ASSIGN_OR_RETURN(
          uint64_t got,
          ReceiveChunk(stream->stream_id, c, first_index + static_cast<size_t>(c),
                       absl::StrCat(MergedName(p), "_", c, " from ", address_), sink));
      stats.bytes += got;
      ++stats.blocks;
    }
    return absl::OkStatus();
  }

 private:
  struct Frame {
    std::string bytes;    // from its type byte, as far as read (a block's body excluded)
    uint64_t length = 0;  // frameLen: its bytes after the length field
  };

  std::string Describe(const Request& r, const std::vector<sw::ShuffleBlockId>& blocks) const {
    return absl::StrCat("FetchShuffleBlocks of ", BlockName(blocks[r.chunk_to_block.front()]),
                        r.chunk_to_block.size() > 1
                            ? absl::StrCat(" and ", r.chunk_to_block.size() - 1, " more")
                            : "");
  }

  // The stream id of the request's reply, checked against the request.
  absl::StatusOr<int64_t> ReadStreamHandle(const Request& request,
                                           const std::vector<sw::ShuffleBlockId>& blocks) {
    const std::string what = Describe(request, blocks);
    FERRY_ASSIGN_OR_RETURN(std::string handle, ReadReply(std::nullopt, what));
    absl::StatusOr<sw::ShuffleReply> reply = sw::DecodeShuffleReply(handle);
    const auto* stream = reply.ok() ? std::get_if<sw::StreamHandle>(&*reply) : nullptr;
    if (stream == nullptr) {
      return Protocol(what, reply.ok() ? "a reply that is not a stream handle"
                                       : std::string(reply.status().message()));
    }
    if (stream->num_chunks != static_cast<int32_t>(request.chunk_to_block.size())) {
      return Protocol(what, absl::StrCat("a stream handle of ", stream->num_chunks, " chunks for ",
                                         request.chunk_to_block.size(), " blocks"));
    }
    return stream->stream_id;
  }

  // The next frame, whole (at most `max_bytes`), decoded; the service's RpcFailure as an
  // error.
  absl::StatusOr<sw::ServerMessage> ReadMessage(absl::string_view what,
                                                uint64_t max_bytes = kMaxReplyBytes) {
    FERRY_ASSIGN_OR_RETURN(Frame frame, ReadFrame(what));
    FERRY_RETURN_IF_ERROR(ReadRest(frame, frame.length - 1, what, max_bytes));
    absl::StatusOr<sw::ServerMessage> reply = sw::DecodeServerFrame(frame.bytes, kMaxReplyBytes);
    if (!reply.ok()) return Protocol(what, reply.status().message());
    if (auto* failure = std::get_if<sw::RpcFailure>(&*reply)) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": shuffle service ", address_, " says: ", failure->error));
    }
    return *std::move(reply);
  }

  // The next frame as an RPC's reply body (of request `id`, when given).
  absl::StatusOr<std::string> ReadReply(std::optional<int64_t> id, absl::string_view what) {
    FERRY_ASSIGN_OR_RETURN(sw::ServerMessage reply, ReadMessage(what));
    auto* response = std::get_if<sw::RpcResponse>(&reply);
    if (response == nullptr || (id.has_value() && response->request_id != *id)) {
      return Protocol(what, "a reply that is not the RPC's");
    }
    return std::move(response->body);
  }

  absl::Time Deadline() const { return absl::Now() + options_.io_timeout; }

  static absl::Status Unserved(absl::string_view name, absl::string_view error) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": the shuffle service could not serve it: ", error));
  }

  absl::Status Protocol(absl::string_view what, absl::string_view got) const {
    return absl::InternalError(
        absl::StrCat(what, ": protocol error: shuffle service ", address_, " sent ", got));
  }

  absl::Status SendBytes(std::string bytes, absl::string_view what) {
    if (out_.has_value()) out_->Apply(bytes.data(), bytes.data(), bytes.size());
    if (sasl_.has_value()) {
      std::string sealed;
      if (absl::Status s = sasl_->Seal(bytes, &sealed); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
      }
      bytes = std::move(sealed);
    }
    const ssize_t sent =
        tls_ != nullptr ? tls_->Write(bytes, Deadline())
                        : SendAll(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL, Deadline());
    if (sent < 0) return IoError(sent, absl::StrCat(what, ": send to ", address_));
    return absl::OkStatus();
  }

  absl::Status ReadExactly(char* buf, size_t n, absl::string_view what) {
    PlainReader* reader = Reader();
    ssize_t got = 0;
    if (reader == nullptr) {
      got = ReadFull(fd_.get(), buf, n, -1, Deadline());
    } else {
      const absl::Time deadline = Deadline();
      while (static_cast<size_t>(got) < n) {
        const ssize_t r = reader->Read(buf + got, n - static_cast<size_t>(got), deadline);
        if (r <= 0) {
          got = r;
          break;
        }
        got += r;
      }
    }
    if (got != static_cast<ssize_t>(n)) {
      return IoError(got < 0 ? got : 0, absl::StrCat(what, ": read from ", address_));
    }
    return absl::OkStatus();
  }

  // What decrypts the connection's bytes; null for a plain one.
  PlainReader* Reader() {
    if (tls_ != nullptr) return tls_.get();
    if (sasl_.has_value()) return &*sasl_;
    return in_.has_value() ? &*in_ : nullptr;
  }

  // Reads a frame's length and type (ReadRest reads more of it).
  absl::StatusOr<Frame> ReadFrame(absl::string_view what) {
    char prefix[kFramePrefixBytes];
    FERRY_RETURN_IF_ERROR(ReadExactly(prefix, sizeof(prefix), what));
    absl::StatusOr<uint64_t> length =
        sw::DecodeFrameLength(absl::string_view(prefix, sw::kFrameLengthBytes));
    if (!length.ok()) return Protocol(what, length.status().message());
    Frame frame;
    frame.bytes.assign(1, prefix[sw::kFrameLengthBytes]);
    frame.length = *length;
    return frame;
  }

  // Reads `n` more bytes of `frame` (bounded by `max` and the frame).
  absl::Status ReadRest(Frame& frame, uint64_t n, absl::string_view what,
                        uint64_t max = kMaxReplyBytes) {
    if (n > max || frame.bytes.size() + n > frame.length) {
      return Protocol(what, absl::StrCat("a frame of ", frame.length, " bytes"));
    }
    const size_t at = frame.bytes.size();
    frame.bytes.resize(at + static_cast<size_t>(n));
    return ReadExactly(frame.bytes.data() + at, static_cast<size_t>(n), what);
  }

  // Reads chunk `chunk` of the stream into the sink as block `block`: its size.
  absl::StatusOr<uint64_t> ReceiveChunk(int64_t stream_id, int32_t chunk, size_t block,
                                        const std::string& name, BlockSink& sink) {
    FERRY_ASSIGN_OR_RETURN(Frame frame, ReadFrame(name));
    // A ChunkFetchSuccess's header only: its block goes to the sink. Any other frame
    // whole: a StreamResponse's block follows it.
    const bool in_frame =
        static_cast<sw::MessageType>(frame.bytes[0]) == sw::MessageType::kChunkFetchSuccess;
    FERRY_RETURN_IF_ERROR(
        ReadRest(frame, in_frame ? sw::kChunkFetchSuccessHeaderBytes - 1 : frame.length - 1, name));
    absl::StatusOr<sw::ServerMessage> reply = sw::DecodeServerFrame(frame.bytes, kMaxReplyBytes);
    if (!reply.ok()) return Protocol(name, reply.status().message());
    uint64_t body = 0;
    if (auto* success = std::get_if<sw::ChunkFetchSuccess>(&*reply)) {
      if (success->stream_id != stream_id || success->chunk_index != chunk) {
        return Protocol(name, absl::StrCat("chunk ", success->stream_id, "/", success->chunk_index,
                                           " for ", stream_id, "/", chunk));
      }
      body = frame.length - sw::kChunkFetchSuccessHeaderBytes;
    } else if (auto* response = std::get_if<sw::StreamResponse>(&*reply)) {
      if (response->stream_id != absl::StrCat(stream_id, "_", chunk)) {
        return Protocol(name, absl::StrCat("a StreamResponse for '", response->stream_id, "'"));
      }
      body = static_cast<uint64_t>(response->byte_count);
    } else if (auto* failure = std::get_if<sw::ChunkFetchFailure>(&*reply)) {
      return Unserved(name, failure->error);
    } else if (auto* stream_failure = std::get_if<sw::StreamFailure>(&*reply)) {
      return Unserved(name, stream_failure->error);
    } else {
      return Protocol(name, absl::StrCat("frame type ", int{static_cast<uint8_t>(frame.bytes[0])},
                                         " for a chunk"));
    }
    static const ferry::v1::BlockInfo kNoChecksums;
    BlockVerifier verifier(kNoChecksums, name, /*enabled=*/false);
    FERRY_RETURN_IF_ERROR(
        sink.Receive(BlockSource{fd_.get(), Reader()}, block, 0, body, verifier, name, Deadline()));
    return body;
  }

  const std::string address_;
  const SparkFetchOptions& options_;
  UniqueFd fd_;
  int64_t next_request_id_ = 1;
  // After Spark's AuthEngine: what is sent, and what is received.
  std::optional<spark::CtrCipher> out_;
  std::optional<CtrReader> in_;
  // After SASL with auth-conf: both ways.
  std::optional<SaslReader> sasl_;
  // spark.ssl.rpc.enabled: every byte through TLS.
  std::unique_ptr<TlsStream> tls_;
};

// Runs `fn` as the one fiber of a scheduler on this thread.
absl::Status RunOnFiber(absl::AnyInvocable<void()> fn) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<FiberScheduler> scheduler, FiberScheduler::Create());
  FERRY_RETURN_IF_ERROR(scheduler->Spawn(std::move(fn)));
  scheduler->Run();
  return absl::OkStatus();
}

// One connection on a fiber of its own scheduler: `fn` runs once it is connected and
// authenticated as `app_id`.
absl::Status WithConnection(const std::string& address, const std::string& app_id,
                            const SparkFetchOptions& options,
                            absl::FunctionRef<absl::Status(SparkConnection&)> fn) {
  FERRY_ASSIGN_OR_RETURN(SocketAddress addr, ParseAddress(address));
  absl::Status result;
  absl::Status ran = RunOnFiber([&] {
    SparkConnection connection(address, options);
    result = connection.Connect(addr);
    if (result.ok()) result = connection.Authenticate(app_id);
    if (result.ok()) result = fn(connection);
  });
  return ran.ok() ? result : ran;
}

}  // namespace

absl::Status SparkShuffleClient::RegisterExecutor(const std::string& address,
                                                  const spark::RegisterExecutor& registration,
                                                  const SparkFetchOptions& options) {
  return WithConnection(address, registration.app_id, options, [&](SparkConnection& c) {
    return c
        .Call(sw::EncodeRegisterExecutor(registration),
              absl::StrCat("RegisterExecutor of executor ", registration.exec_id, " of app ",
                           registration.app_id))
        .status();
  });
}

absl::StatusOr<std::vector<spark::Bitmap>> SparkShuffleClient::FetchMergedMeta(
    const std::string& address, const std::string& app_id, const SparkMergedPartition& partition,
    const SparkFetchOptions& options) {
  std::vector<spark::Bitmap> bitmaps;
  FERRY_RETURN_IF_ERROR(
      WithConnection(address, app_id, options, [&](SparkConnection& c) -> absl::Status {
        FERRY_ASSIGN_OR_RETURN(bitmaps, c.MergedMeta(app_id, partition));
        return absl::OkStatus();
      }));
  return bitmaps;
}

absl::StatusOr<SparkFetchStats> SparkShuffleClient::FetchMergedChunks(
    const std::string& address, const std::string& app_id, const std::string& exec_id,
    const SparkMergedPartition& partition, int32_t chunks, BlockSink& sink,
    const SparkFetchOptions& options) {
  SparkFetchStats stats;
  if (chunks <= 0) return stats;
  const absl::Time start = absl::Now();
  FERRY_RETURN_IF_ERROR(WithConnection(address, app_id, options, [&](SparkConnection& c) {
    return c.MergedChunks(app_id, exec_id, partition, chunks, 0, sink, stats);
  }));
  stats.elapsed = absl::Now() - start;
  return stats;
}

absl::StatusOr<SparkFetchStats> SparkShuffleClient::FetchMergedPartitions(
    const std::string& address, const std::string& app_id, const std::string& exec_id,
    const std::vector<SparkMergedPartition>& partitions, BlockSink& sink,
    std::vector<std::vector<spark::Bitmap>>* bitmaps, const SparkFetchOptions& options) {
  SparkFetchStats stats;
  const absl::Time start = absl::Now();
  const absl::Status read =
      WithConnection(address, app_id, options, [&](SparkConnection& c) -> absl::Status {
        for (const SparkMergedPartition& p : partitions) {
          FERRY_ASSIGN_OR_RETURN(std::vector<spark::Bitmap> meta, c.MergedMeta(app_id, p));
          const auto chunks = static_cast<int32_t>(meta.size());
          if (chunks > 0) {
            FERRY_RETURN_IF_ERROR(c.MergedChunks(app_id, exec_id, p, chunks,
                                                 static_cast<size_t>(stats.blocks), sink, stats));
          }
          if (bitmaps != nullptr) bitmaps->push_back(std::move(meta));
        }
        return absl::OkStatus();
      });
  if (!read.ok()) return read;
  stats.elapsed = absl::Now() - start;
  return stats;
}

absl::StatusOr<SparkFetchStats> SparkShuffleClient::Fetch(
    const std::string& address, const std::string& app_id, const std::string& exec_id,
    const std::vector<spark::ShuffleBlockId>& blocks, BlockSink& sink,
    const SparkFetchOptions& options) {
  FERRY_ASSIGN_OR_RETURN(SocketAddress addr, ParseAddress(address));
  for (const spark::ShuffleBlockId& b : blocks) {
    if (b.shuffle_id < 0 || b.map_id < 0 || b.start_reduce_id < 0 ||
        b.end_reduce_id <= b.start_reduce_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("block ", spark::ShuffleBlockName(b), " is not a valid shuffle block"));
    }
  }
  SparkFetchStats stats;
  if (blocks.empty()) return stats;
  const std::vector<Request> requests =
      PlanRequests(app_id, exec_id, blocks, options.blocks_per_request);
  const size_t connections =
      std::clamp<size_t>(static_cast<size_t>(std::max(options.connections, 1)), 1, requests.size());
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<FiberScheduler> scheduler, FiberScheduler::Create());
  FiberScheduler* s = scheduler.get();
  absl::Status first_error;
  for (size_t c = 0; c < connections; ++c) {
    absl::Status spawned = s->Spawn([&, c, s] {
      SparkConnection connection(address, options);
      absl::Status status = connection.Connect(addr);
      if (status.ok()) status = connection.Authenticate(app_id);
      // Requests go round-robin over the connections.
      std::vector<const Request*> mine;
      for (size_t r = c; r < requests.size(); r += connections) mine.push_back(&requests[r]);
      if (status.ok()) status = connection.FetchRequests(mine, blocks, sink, stats);
      if (!status.ok() && first_error.ok()) {
        first_error = status;
        s->Stop();  // the other connections' I/O is cancelled
      }
    });
    if (!spawned.ok()) return spawned;
  }
  const absl::Time start = absl::Now();
  s->Run();
  stats.elapsed = absl::Now() - start;
  if (!first_error.ok()) return first_error;
  return stats;
}

}  // namespace ferry
