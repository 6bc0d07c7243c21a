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

bool IsValidAppId(absl::string_view app_id) { return IsValidId(app_id) && app_id[0] != '.'; }

absl::Status CheckAppId(absl::string_view app_id) {
  if (IsValidAppId(app_id)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "app id '", app_id.substr(0, 160), "' is not [A-Za-z0-9_.-]{1,128} not starting with '.'"));
}

absl::Status CheckAppAndExecutorIds(absl::string_view app_id, absl::string_view exec_id) {
  if (IsValidAppId(app_id) && IsValidId(exec_id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("app id '", app_id.substr(0, 160), "' or executor id '", exec_id.substr(0, 160),
                   "' is not [A-Za-z0-9_.-]{1,128} (an app's not starting with '.')"));
}

}  // namespace ferry
