#include "common/json_object.h"

#include <algorithm>
#include <utility>

#include "common/secret.h"
#include "nlohmann/json.hpp"

namespace ferry {

// The SAX events of one value, into a JsonObject's fields.
class JsonObjectReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  static JsonField Of(JsonField::Kind kind, bool boolean = false) {
    JsonField field;
    field.kind = kind;
    field.boolean = boolean;
    return field;
  }
  JsonObjectReader(JsonObject* out, const std::vector<absl::string_view>& keep, int max_depth)
      : out_(out), keep_(keep), max_depth_(max_depth) {}
  bool object() const { return object_; }

  bool null() override { return Value(Of(JsonField::kNull)); }
  bool boolean(bool b) override { return Value(Of(JsonField::kBool, b)); }
  bool number_integer(number_integer_t) override { return Value(Of(JsonField::kNumber)); }
  bool number_unsigned(number_unsigned_t) override { return Value(Of(JsonField::kNumber)); }
  bool number_float(number_float_t, const string_t&) override {
    return Value(Of(JsonField::kNumber));
  }
  bool binary(binary_t&) override { return Value(Of(JsonField::kObject)); }  // not in text
  bool string(string_t& s) override {
    JsonField field = Of(JsonField::kString);
    if (depth_ == 1 && std::find(keep_.begin(), keep_.end(), key_) != keep_.end()) {
      field.string = std::move(s);
    }
    Secret::Wipe(s);
    return Value(std::move(field));
  }
  bool start_object(std::size_t) override {
    if (depth_ == 0) object_ = true;
    if (depth_ == 1) Value(Of(JsonField::kObject));
    return ++depth_ <= max_depth_;
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
    if (depth_ == 1) Value(Of(JsonField::kArray));
    return depth_ > 0 && ++depth_ <= max_depth_;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  // A value: a top-level field when at depth 1. Anything but an object at the top is
  // no object.
  bool Value(JsonField field) {
    if (depth_ == 0) return false;
    if (depth_ != 1) return true;
    JsonField& slot = out_->fields_[key_];
    Secret::Wipe(slot.string);
    slot = std::move(field);
    return true;
  }

  JsonObject* const out_;
  const std::vector<absl::string_view>& keep_;
  const int max_depth_;
  int depth_ = 0;
  bool object_ = false;
  std::string key_;
};

JsonObject::~JsonObject() {
  for (auto& [name, field] : fields_) Secret::Wipe(field.string);
}

std::optional<JsonObject> JsonObject::Read(absl::string_view json,
                                           const std::vector<absl::string_view>& keep,
                                           int max_depth) {
  JsonObject object;
  JsonObjectReader reader(&object, keep, max_depth);
  // Not strict: what follows the value is ignored, as Jackson ignores it.
  const bool parsed = nlohmann::json::sax_parse(json.begin(), json.end(), &reader,
                                                nlohmann::json::input_format_t::json,
                                                /*strict=*/false);
  if (!parsed || !reader.object()) return std::nullopt;
  return object;
}

JsonField* JsonObject::Find(absl::string_view name) {
  auto it = fields_.find(name);
  return it == fields_.end() ? nullptr : &it->second;
}

bool JsonObject::StringsOnly() const {
  return std::all_of(fields_.begin(), fields_.end(),
                     [](const auto& f) { return f.second.kind == JsonField::kString; });
}

}  // namespace ferry
