// Writing log lines about what peers do, so that no peer can forge a line or fill the
// disk with them.
//
// LogEscaped: text a peer or a file supplied, made safe to put in a log line. Bytes
// outside printable ASCII (newlines, carriage returns, escape sequences, NUL, UTF-8)
// become \xNN and a backslash becomes \\, so that no peer can start a line of the log
// or make one look like another; everything else is as it was.
//
// LineBudget: at most N lines a second of one kind; a line that may be written says how
// many were held back since the last one. Thread-safe.
#ifndef FERRY_SERVER_BASE_LOG_LINES_H_
#define FERRY_SERVER_BASE_LOG_LINES_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ferry {

std::string LogEscaped(absl::string_view text);

class LineBudget {
 public:
  explicit LineBudget(int lines_per_second) : lines_per_second_(lines_per_second) {}

  // Whether a line may be written at `now`; if so, `held_back` is what was not written
  // since the last line that was (and is reset).
  bool Take(absl::Time now, uint64_t* held_back);

 private:
  const int lines_per_second_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int lines_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t held_back_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ferry

#endif  // FERRY_SERVER_BASE_LOG_LINES_H_
