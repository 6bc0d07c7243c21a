#include "client/tls_stream.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "absl/strings/str_cat.h"
#include "common/io/ops.h"
#include "common/openssl.h"

namespace ferry {

absl::StatusOr<std::unique_ptr<TlsStream>> TlsStream::Connect(int socket,
                                                              const std::string& trust_file,
                                                              const std::string& host,
                                                              absl::Time deadline) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("TLS: ", TakeOpenSslErrors()));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(ctx, trust_file.c_str(), nullptr) != 1) {
    const std::string reason = TakeOpenSslErrors();
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat("TLS trust file ", trust_file, ": ", reason));
  }
  SSL* ssl = NewMemorySsl(ctx);
  if (ssl == nullptr) {
    SSL_CTX_free(ctx);
    return absl::InternalError("TLS: out of memory");
  }
  SSL_set_connect_state(ssl);
  auto stream = std::unique_ptr<TlsStream>(new TlsStream(socket, ctx, ssl));
  // The certificate must name the host: an IP address, or a DNS name (also sent as SNI).
  unsigned char ip[16];
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (::inet_pton(AF_INET, host.c_str(), ip) == 1 || ::inet_pton(AF_INET6, host.c_str(), ip) == 1) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
  for (;;) {
    const int r = SSL_do_handshake(ssl);
    if (stream->Flush(deadline) < 0) {
      return absl::UnavailableError("TLS handshake: sending to the server failed");
    }
    if (r == 1) return stream;
    if (SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ) {
      return absl::PermissionDeniedError(absl::StrCat("TLS handshake: ", TakeOpenSslErrors()));
    }
    const ssize_t n = stream->Fill(deadline);
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat(
          "TLS handshake: the server ", n == 0 ? "closed the connection" : "did not answer"));
    }
  }
}

TlsStream::~TlsStream() {
  SSL_free(ssl_);  // and its BIOs
  SSL_CTX_free(ctx_);
}

ssize_t TlsStream::Flush(absl::Time deadline) {
  BIO* out = SSL_get_wbio(ssl_);
  const size_t pending = BIO_ctrl_pending(out);
  if (pending == 0) return 0;
  out_.resize(pending);
  const int n = BIO_read(out, out_.data(), static_cast<int>(pending));
  if (n <= 0) return 0;
  return SendAll(socket_, out_.data(), static_cast<size_t>(n), MSG_NOSIGNAL, deadline);
}

ssize_t TlsStream::Fill(absl::Time deadline) {
  char buf[16 << 10];
  const ssize_t n = Recv(socket_, buf, sizeof(buf), 0, deadline);
  if (n > 0 && BIO_write(SSL_get_rbio(ssl_), buf, static_cast<int>(n)) != n) return -ENOMEM;
  return n;
}

ssize_t TlsStream::Read(char* buf, size_t len, absl::Time deadline) {
  const int want = static_cast<int>(std::min<size_t>(len, INT_MAX / 2));
  for (;;) {
    const int n = SSL_read(ssl_, buf, want);
    if (n > 0) return n;
    const int error = SSL_get_error(ssl_, n);
    if (error == SSL_ERROR_ZERO_RETURN) return 0;
    if (error != SSL_ERROR_WANT_READ) return -EPROTO;
    // A TLS 1.3 server may have asked for something (a key update): answer it first.
    if (Flush(deadline) < 0) return -EPIPE;
    const ssize_t got = Fill(deadline);
    if (got <= 0) return got;
  }
}

ssize_t TlsStream::Write(absl::string_view bytes, absl::Time deadline) {
  const size_t total = bytes.size();
  while (!bytes.empty()) {
    const int step = static_cast<int>(std::min<size_t>(bytes.size(), INT_MAX / 2));
    if (SSL_write(ssl_, bytes.data(), step) != step) return -EPROTO;
    bytes.remove_prefix(static_cast<size_t>(step));
  }
  const ssize_t sent = Flush(deadline);
  return sent < 0 ? sent : static_cast<ssize_t>(total);
}

}  // namespace ferry
