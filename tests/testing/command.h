// Running a program from a test: its output captured, bounded in time.
#ifndef FERRY_TESTS_TESTING_COMMAND_H_
#define FERRY_TESTS_TESTING_COMMAND_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ferry::testing {

struct CommandResult {
  int exit_code = -1;  // -1: killed at the timeout or by a signal
  std::string output;  // stdout and stderr together
};

// Runs `argv` (argv[0] a path), its output captured, killed after `timeout`.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout);

// The same, for a command that must succeed: an error naming it, with its output,
// unless it exits 0.
absl::Status RunChecked(const std::vector<std::string>& argv, absl::Duration timeout);

// Starts `argv` with stdout and stderr on `out_fd`; the child dies with the test.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int out_fd);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_COMMAND_H_
