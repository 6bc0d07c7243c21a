#include "common/spark/merge_dirs.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

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

// The top-level object's string fields, the last of a name winning, as Jackson's map
// holds them; whether the value was an object of strings only.
class Fields : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<std::string> merge_dir;
  std::optional<std::string> attempt_id;
  bool object = false;
  bool strings_only = true;

  bool null() override { return Other(); }
  bool boolean(bool) override { return Other(); }
  bool number_integer(number_integer_t) override { return Other(); }
  bool number_unsigned(number_unsigned_t) override { return Other(); }
  bool number_float(number_float_t, const string_t&) override { return Other(); }
  bool binary(binary_t&) override { return Other(); }
  bool string(string_t& s) override {
    if (depth_ != 1) return depth_ > 0;
    if (key_ == "mergeDir") merge_dir = std::move(s);
    if (key_ == "attemptId") attempt_id = std::move(s);
    return true;
  }
  bool start_object(std::size_t) override {
    if (depth_ == 0) object = true;
    if (depth_ == 1) strings_only = false;
    return ++depth_ <= kMaxDepth;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 1) strings_only = false;
    return depth_ > 0 && ++depth_ <= kMaxDepth;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool Other() {
    if (depth_ == 1) strings_only = false;
    return depth_ > 0;
  }
  int depth_ = 0;
  std::string key_;
};

}  // namespace

absl::StatusOr<std::optional<MergeDirInfo>> ParseMergeDirInfo(absl::string_view shuffle_manager) {
  const size_t colon = shuffle_manager.find(':');
  if (colon == absl::string_view::npos) return std::nullopt;
  const absl::string_view json = shuffle_manager.substr(colon + 1);
  Fields fields;
  // Not strict: what follows the value is ignored, as Jackson ignores it.
  const bool parsed = nlohmann::json::sax_parse(json.begin(), json.end(), &fields,
                                                nlohmann::json::input_format_t::json,
                                                /*strict=*/false);
  // Not a map of strings: Spark's service logs it and registers no merge dir.
  if (!parsed || !fields.object || !fields.strings_only) return std::nullopt;
  if (!fields.merge_dir.has_value()) {
    return absl::InvalidArgumentError(
        "the shuffle manager's push-based shuffle part names no mergeDir");
  }
  MergeDirInfo info;
  if (!IsPlainName(*fields.merge_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the merge dir '", fields.merge_dir->substr(0, 100), "' is not one plain path component"));
  }
  info.merge_dir = *std::move(fields.merge_dir);
  if (fields.attempt_id.has_value() && !absl::SimpleAtoi(*fields.attempt_id, &info.attempt_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the attemptId '", fields.attempt_id->substr(0, 20), "' is not an int"));
  }
  return info;
}

std::string MergedFileName(absl::string_view app_id, int32_t shuffle_id, int32_t shuffle_merge_id,
                           int32_t reduce_id, absl::string_view suffix) {
  return absl::StrCat("shuffleMerged_", app_id, "_", shuffle_id, "_", shuffle_merge_id, "_",
                      reduce_id, ".", suffix);
}

}  // namespace ferry::spark
