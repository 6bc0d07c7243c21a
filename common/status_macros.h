// The two Status macros Ferry uses. Abseil 20220623 (Debian 12) has neither
// ABSL_RETURN_IF_ERROR nor ASSIGN_OR_RETURN; these are the only macros we add.
//
// They are the one way an error passes up as it is. A check is written out only where
// the code looks at the error first: a NOT_FOUND that means "skip", a status given the
// name of the block, file or peer, a cleanup that must run before returning.
#ifndef FERRY_COMMON_STATUS_MACROS_H_
#define FERRY_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns `expr`'s status from the enclosing function when it is not OK.
#define FERRY_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status ferry_status_ = (expr);         \
    if (!ferry_status_.ok()) return ferry_status_; \
  } while (0)

#define FERRY_STATUS_CONCAT_INNER_(a, b) a##b
#define FERRY_STATUS_CONCAT_(a, b) FERRY_STATUS_CONCAT_INNER_(a, b)

// `FERRY_ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns `x` from a StatusOr, or
// returns its status from the enclosing function.
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_STATUS_CONCAT_(ferry_statusor_, __LINE__), lhs, expr)

#define FERRY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // FERRY_COMMON_STATUS_MACROS_H_
