#include "tests/testing/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"

namespace ferry::testing {

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, int out_fd) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(out_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe");
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  absl::StatusOr<pid_t> pid = Spawn(argv, write_end.get());
  if (!pid.ok()) return pid.status();
  write_end.Reset();
  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  bool killed = false;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      ::kill(*pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer is gone: the child exited
    result.output.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = !killed && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

absl::Status RunChecked(const std::vector<std::string>& argv, absl::Duration timeout) {
  absl::StatusOr<CommandResult> ran = RunCommand(argv, timeout);
  if (!ran.ok()) return ran.status();
  if (ran->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(argv, " "), " exited ", ran->exit_code, ": ", ran->output));
  }
  return absl::OkStatus();
}

}  // namespace ferry::testing
