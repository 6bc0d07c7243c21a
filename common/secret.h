// A secret's bytes (a spark.authenticate secret, a key derived from one, the control
// plane's token, a TLS private key) that wipe themselves: every Secret overwrites its
// buffer when it is destroyed, assigned over or moved from, so a secret lives only as
// long as some Secret holds it. Copies are Secrets too and wipe their own buffers. The
// bytes are never printed: a Secret has no operator<< and no conversion to a string.
#ifndef FERRY_COMMON_SECRET_H_
#define FERRY_COMMON_SECRET_H_

#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace ferry {

class Secret {
 public:
  Secret() = default;
  // Copies `bytes`; the caller wipes its own copy if it has one.
  explicit Secret(absl::string_view bytes) : bytes_(bytes) {}
  explicit Secret(const char* bytes) : bytes_(bytes) {}
  // Takes `bytes` and wipes what the move may have left in them (a short string's
  // bytes stay in its own buffer).
  explicit Secret(std::string&& bytes) : bytes_(std::move(bytes)) { Wipe(bytes); }
  Secret(const Secret& other) : bytes_(other.bytes_) {}
  Secret(Secret&& other) noexcept : bytes_(std::move(other.bytes_)) { Wipe(other.bytes_); }
  Secret& operator=(const Secret& other) {
    if (this != &other) {
      Wipe(bytes_);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  Secret& operator=(Secret&& other) noexcept {
    if (this != &other) {
      Wipe(bytes_);
      bytes_ = std::move(other.bytes_);
      Wipe(other.bytes_);
    }
    return *this;
  }
  ~Secret() { Wipe(bytes_); }

  absl::string_view view() const { return bytes_; }
  bool empty() const { return bytes_.empty(); }
  size_t size() const { return bytes_.size(); }

  // Overwrites the whole of `s`'s buffer (its capacity, not only its length) and
  // empties it.
  static void Wipe(std::string& s);
  // Overwrites `size` bytes at `data` (key material in a buffer of a library's).
  static void Wipe(void* data, size_t size);

 private:
  std::string bytes_;
};

// The one comparison of secrets, MACs and digests: its time does not depend on where
// `a` and `b` differ (only on whether their lengths do).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

inline bool operator==(const Secret& a, absl::string_view b) {
  return ConstantTimeEquals(a.view(), b);
}
inline bool operator==(const Secret& a, const Secret& b) { return a == b.view(); }

}  // namespace ferry

#endif  // FERRY_COMMON_SECRET_H_
