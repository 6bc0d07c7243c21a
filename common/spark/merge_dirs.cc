#include "common/spark/merge_dirs.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_object.h"

namespace ferry::spark {

namespace {

constexpr size_t kMaxMergeDirBytes = 255;
// Jackson reads the value into a map of strings: anything nested is no such map. The
// parse stops past this depth, so it costs time linear in the bytes and no more.
constexpr int kMaxDepth = 16;

bool IsPlainName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxMergeDirBytes || name == "." || name == "..") {
    return false;
  }
  for (char c : name) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::optional<MergeDirInfo>> ParseMergeDirInfo(absl::string_view shuffle_manager) {
  const size_t colon = shuffle_manager.find(':');
  if (colon == absl::string_view::npos) return std::nullopt;
  std::optional<JsonObject> fields =
      JsonObject::Read(shuffle_manager.substr(colon + 1), {"mergeDir", "attemptId"}, kMaxDepth);
  // Not a map of strings: Spark's service logs it and registers no merge dir.
  if (!fields.has_value() || !fields->StringsOnly()) return std::nullopt;
  JsonField* merge_dir = fields->Find("mergeDir");
  if (merge_dir == nullptr) {
    return absl::InvalidArgumentError(
        "the shuffle manager's push-based shuffle part names no mergeDir");
  }
  MergeDirInfo info;
  if (!IsPlainName(merge_dir->string)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the merge dir '", merge_dir->string.substr(0, 100), "' is not one plain path component"));
  }
  info.merge_dir = std::move(merge_dir->string);
  const JsonField* attempt = fields->Find("attemptId");
  if (attempt != nullptr && !absl::SimpleAtoi(attempt->string, &info.attempt_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the attemptId '", attempt->string.substr(0, 20), "' is not an int"));
  }
  return info;
}

std::string MergedFileName(absl::string_view app_id, int32_t shuffle_id, int32_t shuffle_merge_id,
                           int32_t reduce_id, absl::string_view suffix) {
  return absl::StrCat("shuffleMerged_", app_id, "_", shuffle_id, "_", shuffle_merge_id, "_",
                      reduce_id, ".", suffix);
}

}  // namespace ferry::spark
