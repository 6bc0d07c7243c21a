#include "common/auth_token.h"
#include "common/status_macros.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ferry {

namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("read ", what, " file ", path));
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string pem, ReadWhole(path, "PEM"));
  if (pem.size() > (size_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is over 1 MiB: not a PEM file"));
  }
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no PEM block"));
  }
  return pem;
}

absl::StatusOr<std::string> ReadAuthToken(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string contents, ReadWhole(path, "auth token"));
  const std::string token(absl::StripAsciiWhitespace(contents));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no token"));
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the token must be printable ASCII without spaces"));
    }
  }
  return token;
}

}  // namespace ferry
