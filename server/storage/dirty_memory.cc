#include "server/storage/dirty_memory.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/base/small_file.h"

namespace ferry {
namespace {

// A "Name:   123 kB" line's value in bytes.
absl::StatusOr<uint64_t> MeminfoBytes(absl::string_view meminfo, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    const bool kib = absl::ConsumeSuffix(&line, " kB");
    uint64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value) ||
        value > (uint64_t{1} << 50)) {
      return absl::InvalidArgumentError(absl::StrCat("/proc/meminfo: a bad ", name, " line"));
    }
    return kib ? value << 10 : value;
  }
  return absl::NotFoundError(absl::StrCat("/proc/meminfo has no ", name));
}

absl::StatusOr<uint64_t> ProcNumber(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, 64));
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no number"));
  }
  return value;
}

}  // namespace

absl::StatusOr<bool> DirtyMemoryLow(absl::string_view meminfo, uint64_t background_bytes,
                                    uint64_t background_ratio) {
  FERRY_ASSIGN_OR_RETURN(const uint64_t dirty, MeminfoBytes(meminfo, "Dirty"));
  FERRY_ASSIGN_OR_RETURN(const uint64_t writeback, MeminfoBytes(meminfo, "Writeback"));
  FERRY_ASSIGN_OR_RETURN(const uint64_t available, MeminfoBytes(meminfo, "MemAvailable"));
  const uint64_t background = background_bytes > 0
                                  ? background_bytes
                                  : available / 100 * std::min<uint64_t>(background_ratio, 100);
  return dirty + writeback < background / 2;
}

absl::StatusOr<bool> DirtyMemoryLow() {
  FERRY_ASSIGN_OR_RETURN(std::string meminfo, ReadSmallFile("/proc/meminfo", 64 << 10));
  FERRY_ASSIGN_OR_RETURN(const uint64_t bytes, ProcNumber("/proc/sys/vm/dirty_background_bytes"));
  FERRY_ASSIGN_OR_RETURN(const uint64_t ratio, ProcNumber("/proc/sys/vm/dirty_background_ratio"));
  return DirtyMemoryLow(meminfo, bytes, ratio);
}

}  // namespace ferry
