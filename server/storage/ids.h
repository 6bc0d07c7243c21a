// The ids a request names that may become part of a path (an app, a Spark executor),
// checked in one place before they touch one: [A-Za-z0-9_.-]{1,128}, not "." or "..".
#ifndef FERRY_SERVER_STORAGE_IDS_H_
#define FERRY_SERVER_STORAGE_IDS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ferry {

bool IsValidId(absl::string_view id);
// An application's id, the one rule for it everywhere (a Spark registration, Ferry's own
// data dirs, the YARN hand-off's file names; the aux service checks the same, against
// the same table of cases, tests/testdata/app_ids.tsv): an id as above that does not
// start with '.', so never a hidden or temporary file of a dir it names. Every cluster
// manager's ids are such (application_<ts>_<n>, app-<ts>-<n>, spark-<uuid>, local-<ts>).
bool IsValidAppId(absl::string_view app_id);

// INVALID_ARGUMENT naming the app id (cut short) unless it is valid (IsValidAppId).
absl::Status CheckAppId(absl::string_view app_id);
// INVALID_ARGUMENT naming both unless both are valid.
absl::Status CheckAppAndExecutorIds(absl::string_view app_id, absl::string_view exec_id);

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_IDS_H_
