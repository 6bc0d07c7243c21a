#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace ferry::internal {

void CheckFailed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "%s:%d: FERRY_CHECK failed: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ferry::internal
