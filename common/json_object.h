// A JSON text's top-level object read as Jackson reads one into a Map (Spark's readers
// of the YARN service data and of a shuffle manager's push-based shuffle part): each
// top-level field's kind, the last of a name winning; nested values skipped over, at
// most `max_depth` deep; what follows the object ignored. Only the text of the string
// fields asked for is kept, and it is wiped when the object goes (it may be a secret).
#ifndef FERRY_COMMON_JSON_OBJECT_H_
#define FERRY_COMMON_JSON_OBJECT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace ferry {

struct JsonField {
  enum Kind { kNull, kBool, kNumber, kString, kObject, kArray };
  Kind kind = kNull;
  bool boolean = false;
  std::string string;  // a kept field's text
};

class JsonObject {
 public:
  JsonObject() = default;
  JsonObject(JsonObject&&) = default;
  JsonObject& operator=(JsonObject&&) = delete;
  JsonObject(const JsonObject&) = delete;
  JsonObject& operator=(const JsonObject&) = delete;
  ~JsonObject();

  // The object at the start of `json`; nullopt when `json` does not start with a
  // well-formed object (another value, a syntax error, deeper than `max_depth`).
  // `keep`: the top-level fields whose string values are kept.
  static std::optional<JsonObject> Read(absl::string_view json,
                                        const std::vector<absl::string_view>& keep, int max_depth);

  // The top-level field `name`, or null when the object has none.
  JsonField* Find(absl::string_view name);
  // Whether every top-level field is a string.
  bool StringsOnly() const;

 private:
  friend class JsonObjectReader;
  absl::flat_hash_map<std::string, JsonField> fields_;
};

}  // namespace ferry

#endif  // FERRY_COMMON_JSON_OBJECT_H_
