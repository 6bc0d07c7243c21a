#include "common/auth_token.h"
#include "common/status_macros.h"

#include <cerrno>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ferry {

namespace {

constexpr size_t kMaxCredentialFileBytes = size_t{1} << 20;

// The whole file, into a Secret (the bytes are wiped wherever they were held).
absl::StatusOr<Secret> ReadWhole(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("read ", what, " file ", path));
  std::string bytes(kMaxCredentialFileBytes + 1, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.bad()) return absl::DataLossError(absl::StrCat("read ", what, " file ", path));
  bytes.resize(static_cast<size_t>(in.gcount()));
  Secret contents(std::move(bytes));
  if (contents.size() > kMaxCredentialFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is over 1 MiB: not a ", what, " file"));
  }
  return contents;
}

}  // namespace

absl::StatusOr<Secret> ReadPemFile(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(Secret pem, ReadWhole(path, "PEM"));
  if (!absl::StrContains(pem.view(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no PEM block"));
  }
  return pem;
}

absl::StatusOr<Secret> ReadAuthToken(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(Secret contents, ReadWhole(path, "auth token"));
  const Secret token(absl::StripAsciiWhitespace(contents.view()));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no token"));
  for (char c : token.view()) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the token must be printable ASCII without spaces"));
    }
  }
  return token;
}

}  // namespace ferry
