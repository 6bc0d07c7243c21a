// A TLS client session over a connected socket, driven on the calling fiber: OpenSSL
// over memory BIOs, the socket read and written with the fiber ops (common/io/ops.h).
// What Ferry's Spark client speaks to a service with Spark 4's spark.ssl.rpc.enabled.
#ifndef FERRY_CLIENT_TLS_STREAM_H_
#define FERRY_CLIENT_TLS_STREAM_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/block_sink.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace ferry {

class TlsStream final : public PlainReader {
 public:
  // Runs the handshake on `socket` (which must outlive the stream), trusting only the
  // PEM certificates in `trust_file` and checking that the server's names `host` (an IP
  // address or a DNS name). The error says why (OpenSSL's words, or the socket's).
  static absl::StatusOr<std::unique_ptr<TlsStream>> Connect(int socket,
                                                            const std::string& trust_file,
                                                            const std::string& host,
                                                            absl::Time deadline);
  ~TlsStream() override;
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  ssize_t Read(char* buf, size_t len, absl::Time deadline) override;
  // Sends all of `bytes`: their length, or -errno.
  ssize_t Write(absl::string_view bytes, absl::Time deadline);

 private:
  TlsStream(int socket, SSL_CTX* ctx, SSL* ssl) : socket_(socket), ctx_(ctx), ssl_(ssl) {}
  // Sends what OpenSSL has written; -errno on failure.
  ssize_t Flush(absl::Time deadline);
  // Feeds OpenSSL what the socket has: bytes received, 0 at the peer's close, -errno.
  ssize_t Fill(absl::Time deadline);

  const int socket_;
  SSL_CTX* ctx_;
  SSL* ssl_;
  std::string out_;  // reused for what goes to the socket
};

}  // namespace ferry

#endif  // FERRY_CLIENT_TLS_STREAM_H_
