#include "common/secret.h"

#include <openssl/crypto.h>

namespace ferry {

void Secret::Wipe(std::string& s) {
  OPENSSL_cleanse(s.data(), s.capacity());
  s.clear();
}

bool operator==(const Secret& a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.view().data(), b.data(), b.size()) == 0;
}

}  // namespace ferry
