#include "common/option_flags.h"

#include "absl/strings/str_replace.h"

namespace ferry::option_flags_internal {

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

}  // namespace ferry::option_flags_internal
