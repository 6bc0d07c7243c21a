// What Ferry's TLS endpoints share of OpenSSL: its error text, and a session over
// memory BIOs that a fiber drives (bytes go in and out through the caller's socket
// I/O, never OpenSSL's).
#ifndef FERRY_COMMON_OPENSSL_H_
#define FERRY_COMMON_OPENSSL_H_

#include <string>

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace ferry {

// The reasons on this thread's OpenSSL error queue, oldest first ("; "-joined), and the
// queue emptied; "no reason given" when it is empty.
std::string TakeOpenSslErrors();

// A session of `ctx` reading from and writing to memory BIOs of its own (SSL_get_rbio,
// SSL_get_wbio), freed with it; null when out of memory.
SSL* NewMemorySsl(SSL_CTX* ctx);

}  // namespace ferry

#endif  // FERRY_COMMON_OPENSSL_H_
