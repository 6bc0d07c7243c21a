// A raw client of Spark's shuffle protocol for tests: frames built with
// common/spark/wire.h sent over a blocking loopback socket, and the server's frames read
// back whole, so a test can send what Spark's client sends or what an attacker would.
#ifndef FERRY_TESTS_E2E_SPARK_RAW_CLIENT_H_
#define FERRY_TESTS_E2E_SPARK_RAW_CLIENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/spark/crypto.h"
#include "common/spark/wire.h"
#include "common/unique_fd.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace ferry::testing {

// A server's frame, as read back.
struct Reply {
  spark::MessageType type{};
  int64_t id = 0;           // requestId or streamId
  int32_t chunk_index = 0;  // chunk frames; MergedBlockMetaSuccess: numChunks
  std::string stream_id;    // stream frames
  std::string text;         // failures' error
  std::string body;         // in-frame body, or the bytes after a StreamResponse
};

class SparkClient {
 public:
  // Connects to 127.0.0.1:port from `source` (another loopback address, for a second
  // client address); reads time out after 10 s.
  explicit SparkClient(uint16_t port, const char* source = nullptr);
  ~SparkClient();
  // TLS from now on (before anything is sent), trusting only the certificate in
  // `ca_file` (PEM); the handshake's failure as an error.
  absl::Status StartTls(const std::string& ca_file);
  void Send(const std::string& bytes);
  bool ReadExactly(std::string* out, size_t n);
  // The next frame, or nullopt when the server closed the connection.
  std::optional<Reply> Read();
  // Sends an RPC and reads its reply.
  Reply Call(const std::string& body);
  int fd() const { return fd_.get(); }
  // From now on every byte sent is encrypted and every byte read decrypted with `keys`
  // (the client's side of an AuthEngine session), as Spark's client does after the
  // handshake; `cut` the plaintext of what is sent in two sends.
  void Encrypt(const spark::SessionKeys& keys);
  // The server closed the connection: nothing more arrives (end of stream, or a reset
  // when the close left bytes of ours unread).
  bool Closed();

 private:
  UniqueFd fd_;
  int64_t next_request_ = 0x0102030405060708;
  std::optional<spark::CtrCipher> out_;
  std::optional<spark::CtrCipher> in_;
  SSL_CTX* tls_ctx_ = nullptr;
  SSL* tls_ = nullptr;
};

// (streamId, numChunks) from a StreamHandle reply.
std::pair<int64_t, int32_t> StreamHandleOf(const Reply& reply);

// Spark's AuthEngine handshake as `app` with `secret` (version 1 or 2) on `client`,
// which encrypts from then on; the server's refusal, or the client's, as an error.
absl::Status AuthenticateWithAuthEngine(SparkClient& client, const std::string& app,
                                        const std::string& secret, int version);

// Opens a stream with `request` (a FetchShuffleBlocks or OpenBlocks payload) and fetches
// its chunk 0: the block's bytes, or "rpc failure: ...", "chunk failure: ..." or "closed".
std::string FetchFirstChunk(SparkClient& client, const std::string& request);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_E2E_SPARK_RAW_CLIENT_H_
