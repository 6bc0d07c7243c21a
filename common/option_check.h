// The checks an Options struct's Validate() makes of its fields, worded for the user,
// who sets them by flag: "--max-connections must be between 1 and 1099511627776, not 0".
#ifndef FERRY_COMMON_OPTION_CHECK_H_
#define FERRY_COMMON_OPTION_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ferry {

// The largest count a limit takes: far above any machine's, far below overflow.
inline constexpr uint64_t kMaxLimit = uint64_t{1} << 40;

// INVALID_ARGUMENT naming `flag` unless low <= value <= high.
absl::Status CheckRange(absl::string_view flag, uint64_t value, uint64_t low, uint64_t high);
// INVALID_ARGUMENT naming `flag` unless value > 0.
absl::Status CheckPositive(absl::string_view flag, absl::Duration value);

}  // namespace ferry

#endif  // FERRY_COMMON_OPTION_CHECK_H_
