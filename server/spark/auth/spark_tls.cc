#include "server/spark/auth/spark_tls.h"

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/openssl.h"

namespace ferry {

namespace {

class TlsLayer final : public SecurityLayer {
 public:
  TlsLayer(SSL* ssl, SparkTls* tls) : ssl_(ssl), tls_(tls) {}
  // OpenSSL's per-connection state: the SSL and its handshake state, a read and a write
  // record buffer of a 16 KiB record each, and the memory BIOs' pending bytes.
  size_t MemoryBytes() const override { return size_t{48} << 10; }
  ~TlsLayer() override {
    if (!counted_) tls_->CountHandshake(false);
    SSL_free(ssl_);  // and its BIOs
  }

  absl::Status Open(absl::string_view wire, std::string* plain) override {
    if (!wire.empty() &&
        BIO_write(SSL_get_rbio(ssl_), wire.data(), static_cast<int>(wire.size())) !=
            static_cast<int>(wire.size())) {
      return absl::ResourceExhaustedError("TLS: could not buffer received bytes");
    }
    if (!SSL_is_init_finished(ssl_)) {
      const int r = SSL_do_handshake(ssl_);
      if (r != 1) {
        const int error = SSL_get_error(ssl_, r);
        if (error == SSL_ERROR_WANT_READ) return absl::OkStatus();
        return absl::PermissionDeniedError(
            absl::StrCat("TLS handshake failed: ", TakeOpenSslErrors()));
      }
      counted_ = true;
      tls_->CountHandshake(true);
    }
    char buf[16 << 10];
    for (;;) {
      const int n = SSL_read(ssl_, buf, sizeof(buf));
      if (n > 0) {
        plain->append(buf, static_cast<size_t>(n));
        continue;
      }
      const int error = SSL_get_error(ssl_, n);
      if (error == SSL_ERROR_WANT_READ) return absl::OkStatus();
      // close_notify: the peer ended the session, as a closed socket would.
      if (error == SSL_ERROR_ZERO_RETURN) return absl::CancelledError("TLS: the peer closed");
      return absl::DataLossError(absl::StrCat("TLS: ", TakeOpenSslErrors()));
    }
  }

  absl::Status Seal(absl::string_view plain, std::string* wire) override {
    while (!plain.empty()) {
      const int step = static_cast<int>(std::min<size_t>(plain.size(), INT_MAX / 2));
      // A memory BIO takes whatever is written: the write is whole or fails.
      if (SSL_write(ssl_, plain.data(), step) != step) {
        return absl::InternalError(absl::StrCat("TLS: ", TakeOpenSslErrors()));
      }
      plain.remove_prefix(static_cast<size_t>(step));
    }
    TakeOwnOutput(wire);
    return absl::OkStatus();
  }

  void TakeOwnOutput(std::string* wire) override {
    BIO* out = SSL_get_wbio(ssl_);
    const size_t pending = BIO_ctrl_pending(out);
    if (pending == 0) return;
    const size_t at = wire->size();
    wire->resize(at + pending);
    const int n = BIO_read(out, wire->data() + at, static_cast<int>(pending));
    wire->resize(at + static_cast<size_t>(n > 0 ? n : 0));
  }

 private:
  SSL* ssl_;
  SparkTls* tls_;
  bool counted_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SparkTls>> SparkTls::Load(const Options& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS on the Spark front door needs both --spark-tls-cert "
        "and --spark-tls-key");
  }
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("TLS: ", TakeOpenSslErrors()));
  auto tls = std::unique_ptr<SparkTls>(new SparkTls(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spark-tls-cert ", options.cert_file, ": ", TakeOpenSslErrors()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spark-tls-key ", options.key_file, ": ", TakeOpenSslErrors()));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--spark-tls-key ", options.key_file,
                                                   " is not the key of --spark-tls-cert ",
                                                   options.cert_file, ": ", TakeOpenSslErrors()));
  }
  return tls;
}

SparkTls::~SparkTls() { SSL_CTX_free(ctx_); }

std::unique_ptr<SecurityLayer> SparkTls::NewConnection() {
  SSL* ssl = NewMemorySsl(ctx_);
  if (ssl == nullptr) return nullptr;
  SSL_set_accept_state(ssl);
  return std::make_unique<TlsLayer>(ssl, this);
}

void SparkTls::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  FERRY_APPEND_STATS(FERRY_SPARK_TLS_STATS, {&stats_}, out);
}

}  // namespace ferry
