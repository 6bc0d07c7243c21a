#include "server/storage/ids.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ferry {

bool IsValidId(absl::string_view id) {
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

absl::Status CheckAppId(absl::string_view app_id) {
  if (IsValidId(app_id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("app id '", app_id.substr(0, 160), "' is not [A-Za-z0-9_.-]{1,128}"));
}

absl::Status CheckAppAndExecutorIds(absl::string_view app_id, absl::string_view exec_id) {
  if (IsValidId(app_id) && IsValidId(exec_id)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("app id '", app_id.substr(0, 160),
                                                 "' or executor id '", exec_id.substr(0, 160),
                                                 "' is not [A-Za-z0-9_.-]{1,128}"));
}

}  // namespace ferry
