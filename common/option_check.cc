#include "common/option_check.h"

#include "absl/strings/str_cat.h"

namespace ferry {

absl::Status CheckRange(absl::string_view flag, uint64_t value, uint64_t low, uint64_t high) {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be between ", low, " and ", high, ", not ", value));
}

absl::Status CheckPositive(absl::string_view flag, absl::Duration value) {
  if (value > absl::ZeroDuration()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be positive, not ", absl::FormatDuration(value)));
}

}  // namespace ferry
