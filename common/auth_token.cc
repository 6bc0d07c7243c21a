#include "common/auth_token.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ferry {

absl::StatusOr<std::string> ReadAuthToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("read auth token file ", path));
  std::stringstream contents;
  contents << in.rdbuf();
  const std::string token(absl::StripAsciiWhitespace(contents.str()));
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
