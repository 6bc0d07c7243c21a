// FERRY_CHECK: a broken invariant ends the process with the condition, file and line.
//
// Abseil 20220623 (Debian 12) predates absl/log/check.h, so Ferry keeps this one small
// header. A CHECK is for bugs, never for bad input: input errors are absl::Status.
#ifndef FERRY_COMMON_CHECK_H_
#define FERRY_COMMON_CHECK_H_

namespace ferry::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition);
}  // namespace ferry::internal

#define FERRY_CHECK(condition)                                        \
  do {                                                                \
    if (__builtin_expect(!(condition), 0)) {                          \
      ::ferry::internal::CheckFailed(__FILE__, __LINE__, #condition); \
    }                                                                 \
  } while (0)

#ifdef NDEBUG
#define FERRY_DCHECK(condition) \
  do {                          \
    if (false && (condition)) { \
    }                           \
  } while (0)
#else
#define FERRY_DCHECK(condition) FERRY_CHECK(condition)
#endif

#endif  // FERRY_COMMON_CHECK_H_
