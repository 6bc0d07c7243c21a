#include "tests/e2e/spark_raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <variant>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"

namespace ferry::testing {

namespace sw = ::ferry::spark;

SparkClient::SparkClient(uint16_t port, const char* source) {
  if (source == nullptr) {
    fd_ = ConnectLoopback(port);
  } else {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    sockaddr_in to = LoopbackAddress(port);
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0) << errno;
    EXPECT_EQ(::connect(fd_.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0) << errno;
  }
  timeval tv{10, 0};
  ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

SparkClient::~SparkClient() {
  SSL_free(tls_);
  SSL_CTX_free(tls_ctx_);
}

absl::Status SparkClient::StartTls(const std::string& ca_file) {
  tls_ctx_ = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(tls_ctx_, SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(tls_ctx_, ca_file.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load ", ca_file));
  }
  tls_ = SSL_new(tls_ctx_);
  SSL_set_fd(tls_, fd_.get());
  if (SSL_connect(tls_) != 1) {
    char reason[256] = "";
    ERR_error_string_n(ERR_get_error(), reason, sizeof(reason));
    return absl::UnavailableError(absl::StrCat("TLS handshake: ", reason));
  }
  return absl::OkStatus();
}

void SparkClient::Encrypt(const sw::SessionKeys& keys) {
  absl::StatusOr<sw::CtrCipher> out = sw::CtrCipher::Create(keys.key.view(), keys.out_iv);
  absl::StatusOr<sw::CtrCipher> in = sw::CtrCipher::Create(keys.key.view(), keys.in_iv);
  ASSERT_TRUE(out.ok() && in.ok());
  out_ = *std::move(out);
  in_ = *std::move(in);
}

void SparkClient::Send(const std::string& bytes) {
  std::string sealed = bytes;
  if (out_.has_value()) out_->Apply(sealed.data(), sealed.data(), sealed.size());
  if (tls_ != nullptr) {
    ASSERT_EQ(SSL_write(tls_, sealed.data(), static_cast<int>(sealed.size())),
              static_cast<int>(sealed.size()));
    return;
  }
  ASSERT_EQ(::send(fd_.get(), sealed.data(), sealed.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(sealed.size()));
}

bool SparkClient::ReadExactly(std::string* out, size_t n) {
  out->resize(n);
  for (size_t done = 0; done < n;) {
    const ssize_t r = tls_ != nullptr
                          ? SSL_read(tls_, out->data() + done, static_cast<int>(n - done))
                          : ::recv(fd_.get(), out->data() + done, n - done, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  if (in_.has_value()) in_->Apply(out->data(), out->data(), n);
  return true;
}

std::optional<Reply> SparkClient::Read() {
  std::string len;
  if (!ReadExactly(&len, 8)) return std::nullopt;
  absl::StatusOr<uint64_t> length = sw::DecodeFrameLength(len);
  EXPECT_TRUE(length.ok());
  std::string frame;
  if (!length.ok() || !ReadExactly(&frame, *length)) return std::nullopt;
  absl::StatusOr<sw::ServerMessage> message = sw::DecodeServerFrame(frame);
  EXPECT_TRUE(message.ok()) << message.status();
  if (!message.ok()) return std::nullopt;
  Reply reply;
  reply.type = static_cast<sw::MessageType>(frame[0]);
  struct Fill {
    Reply& r;
    void operator()(sw::ChunkFetchSuccess& m) {
      r.id = m.stream_id;
      r.chunk_index = m.chunk_index;
      r.body = std::move(m.body);
    }
    void operator()(sw::ChunkFetchFailure& m) {
      r.id = m.stream_id;
      r.chunk_index = m.chunk_index;
      r.text = std::move(m.error);
    }
    void operator()(sw::RpcResponse& m) {
      r.id = m.request_id;
      r.body = std::move(m.body);
    }
    void operator()(sw::RpcFailure& m) {
      r.id = m.request_id;
      r.text = std::move(m.error);
    }
    void operator()(sw::StreamResponse& m) { r.stream_id = std::move(m.stream_id); }
    void operator()(sw::StreamFailure& m) {
      r.stream_id = std::move(m.stream_id);
      r.text = std::move(m.error);
    }
    void operator()(sw::MergedBlockMetaSuccess& m) {
      r.id = m.request_id;
      r.chunk_index = m.num_chunks;
      r.body = std::move(m.body);
    }
  };
  std::visit(Fill{reply}, *message);
  if (const auto* response = std::get_if<sw::StreamResponse>(&*message)) {
    if (!ReadExactly(&reply.body, static_cast<size_t>(response->byte_count))) return std::nullopt;
  }
  return reply;
}

Reply SparkClient::Call(const std::string& body) {
  const int64_t id = next_request_++;
  Send(sw::EncodeRpcRequest(id, body));
  std::optional<Reply> reply = Read();
  EXPECT_TRUE(reply.has_value());
  if (!reply.has_value()) return Reply{};
  EXPECT_EQ(reply->id, id);
  return *reply;
}

bool SparkClient::Closed() {
  char c;
  ssize_t n;
  if (tls_ != nullptr) {
    // The server ends a TLS connection by closing it (or with close_notify).
    n = SSL_read(tls_, &c, 1);
    if (n <= 0) return true;
    ADD_FAILURE() << "a byte after the last frame: " << int{c};
    return false;
  }
  do {
    n = ::recv(fd_.get(), &c, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  ADD_FAILURE() << "recv gave " << n
                << (n < 0 ? absl::StrCat(", errno ", errno) : absl::StrCat(", byte ", int{c}));
  return false;
}

absl::Status AuthenticateWithAuthEngine(SparkClient& client, const std::string& app,
                                        const std::string& secret, int version) {
  absl::StatusOr<sw::AuthEngineClient> engine =
      sw::AuthEngineClient::Create(app, Secret(secret), version);
  if (!engine.ok()) return engine.status();
  absl::StatusOr<sw::AuthMessage> challenge = engine->Challenge();
  if (!challenge.ok()) return challenge.status();
  const Reply reply = client.Call(sw::EncodeAuthMessage(*challenge));
  if (reply.type != sw::MessageType::kRpcResponse) {
    return absl::PermissionDeniedError(absl::StrCat("the server refused: ", reply.text));
  }
  absl::StatusOr<sw::AuthMessage> response = sw::DecodeAuthMessage(reply.body);
  if (!response.ok()) return response.status();
  absl::StatusOr<sw::SessionKeys> keys = engine->Finish(*challenge, *response);
  if (!keys.ok()) return keys.status();
  client.Encrypt(*keys);
  return absl::OkStatus();
}

std::pair<int64_t, int32_t> StreamHandleOf(const Reply& reply) {
  EXPECT_EQ(reply.type, sw::MessageType::kRpcResponse) << reply.text;
  absl::StatusOr<sw::ShuffleReply> decoded = sw::DecodeShuffleReply(reply.body);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  const auto* handle = decoded.ok() ? std::get_if<sw::StreamHandle>(&*decoded) : nullptr;
  EXPECT_NE(handle, nullptr) << "a reply that is not a stream handle";
  if (handle == nullptr) return {0, 0};
  return {handle->stream_id, handle->num_chunks};
}

std::string FetchFirstChunk(SparkClient& client, const std::string& request) {
  const Reply handle = client.Call(request);
  if (handle.type != sw::MessageType::kRpcResponse) return "rpc failure: " + handle.text;
  client.Send(sw::EncodeChunkFetchRequest({StreamHandleOf(handle).first, 0}));
  std::optional<Reply> chunk = client.Read();
  if (!chunk.has_value()) return "closed";
  return chunk->type == sw::MessageType::kChunkFetchSuccess ? chunk->body
                                                            : "chunk failure: " + chunk->text;
}

}  // namespace ferry::testing
