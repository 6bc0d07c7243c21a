#include "common/openssl.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "absl/strings/str_cat.h"

namespace ferry {

std::string TakeOpenSslErrors() {
  std::string reasons;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", buf);
  }
  return reasons.empty() ? "no reason given" : reasons;
}

SSL* NewMemorySsl(SSL_CTX* ctx) {
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (ssl == nullptr || in == nullptr || out == nullptr) {
    SSL_free(ssl);
    BIO_free(in);
    BIO_free(out);
    return nullptr;
  }
  SSL_set_bio(ssl, in, out);
  return ssl;
}

}  // namespace ferry
