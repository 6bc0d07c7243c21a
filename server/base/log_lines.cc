#include "server/base/log_lines.h"

#include "absl/synchronization/mutex.h"

namespace ferry {

std::string LogEscaped(absl::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\\') {
      out += "\\\\";
    } else if (byte >= 0x20 && byte < 0x7F) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xF];
    }
  }
  return out;
}

bool LineBudget::Take(absl::Time now, uint64_t* held_back) {
  absl::MutexLock lock(&mu_);
  if (now - window_start_ >= absl::Seconds(1)) {
    window_start_ = now;
    lines_ = 0;
  }
  if (lines_ >= lines_per_second_) {
    ++held_back_;
    return false;
  }
  ++lines_;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

}  // namespace ferry
