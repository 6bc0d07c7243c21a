// The ids a request names that may become part of a path (an app, a Spark executor),
// checked in one place before they touch one: [A-Za-z0-9_.-]{1,128}, not "." or "..".
#ifndef FERRY_SERVER_STORAGE_IDS_H_
#define FERRY_SERVER_STORAGE_IDS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ferry {

bool IsValidId(absl::string_view id);

// INVALID_ARGUMENT naming the app id (cut short) unless it is valid.
absl::Status CheckAppId(absl::string_view app_id);
// INVALID_ARGUMENT naming both unless both are valid.
absl::Status CheckAppAndExecutorIds(absl::string_view app_id, absl::string_view exec_id);

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_IDS_H_
