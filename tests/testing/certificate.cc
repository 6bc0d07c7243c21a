#include "tests/testing/certificate.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace ferry::testing {

absl::StatusOr<CertificateFiles> MakeSelfSignedCertificate(const std::string& dir) {
  CertificateFiles files{dir + "/cert.pem", dir + "/key.pem"};
  const std::string log = dir + "/openssl.log";
  const std::string command = absl::StrCat(
      "/usr/bin/openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 "
      "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '",
      files.key, "' -out '", files.cert, "' >'", log, "' 2>&1");
  if (std::system(command.c_str()) != 0) {
    std::ifstream in(log);
    return absl::InternalError(
        absl::StrCat("openssl failed: ", std::string(std::istreambuf_iterator<char>(in), {})));
  }
  return files;
}

}  // namespace ferry::testing
