// A self-signed certificate for 127.0.0.1 and localhost, made with Debian's openssl
// (scripts/setup installs it): what a test gives a TLS server, and its clients to trust.
#ifndef FERRY_TESTS_TESTING_CERTIFICATE_H_
#define FERRY_TESTS_TESTING_CERTIFICATE_H_

#include <string>

#include "absl/status/statusor.h"

namespace ferry::testing {

struct CertificateFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key (PKCS#8, RSA 2048)
};

// Writes cert.pem and key.pem in `dir`; the error holds openssl's output.
absl::StatusOr<CertificateFiles> MakeSelfSignedCertificate(const std::string& dir);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_CERTIFICATE_H_
