#include "common/secret.h"

#include <openssl/crypto.h>

namespace ferry {

void Secret::Wipe(std::string& s) {
  Wipe(s.data(), s.capacity());
  s.clear();
}

void Secret::Wipe(void* data, size_t size) { OPENSSL_cleanse(data, size); }

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), b.size()) == 0;
}

}  // namespace ferry
