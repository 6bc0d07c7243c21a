#include "tests/testing/spark_ess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"

namespace ferry::testing {

namespace {

// Forks and execs argv with stdout and stderr on `out_fd`; the child dies with us.
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

}  // namespace

std::string SparkEssDir(std::string* why) {
  const char* dir = std::getenv("SPARK_ESS_DIR");
  std::string reason;
  std::string result;
  if (dir == nullptr || *dir == '\0') {
    reason = "SPARK_ESS_DIR is not set (../shared/spark-ess is missing?)";
  } else {
    const char* build = std::getenv("SPARK_ESS_BUILD_DIR");
    const std::string jar = absl::StrCat(build != nullptr && *build != '\0'
                                             ? std::string(build)
                                             : absl::StrCat(dir, "/build"),
                                         "/spark-ess.jar");
    struct stat st;
    if (::stat(jar.c_str(), &st) != 0) {
      reason = absl::StrCat(jar, " is missing: run ", dir, "/build.sh");
    } else if (::access("/usr/bin/java", X_OK) != 0) {
      reason = "no Java runtime (scripts/setup installs it)";
    } else {
      result = dir;
    }
  }
  if (why != nullptr) *why = reason;
  return result;
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

absl::StatusOr<std::unique_ptr<SparkEssServer>> SparkEssServer::Start(
    const std::vector<std::string>& args) {
  const std::string dir = SparkEssDir();
  if (dir.empty()) return absl::FailedPreconditionError("spark-ess is not available");
  std::unique_ptr<SparkEssServer> server(new SparkEssServer);
  char port_file[] = "/tmp/spark-ess-port-XXXXXX";
  UniqueFd port_fd(::mkstemp(port_file));
  if (!port_fd.valid()) return absl::ErrnoToStatus(errno, "mkstemp");
  ::unlink(port_file);
  // The launcher writes the port once it listens; the file is read until then.
  const std::string port_path = absl::StrCat(port_file, ".port");
  std::vector<std::string> argv = {absl::StrCat(dir, "/spark-ess-server"), "--port", "0",
                                   "--port-file", port_path};
  argv.insert(argv.end(), args.begin(), args.end());
  UniqueFd log(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  absl::StatusOr<pid_t> pid = Spawn(argv, log.get());
  if (!pid.ok()) return pid.status();
  server->pid_ = *pid;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    std::ifstream in(port_path);
    std::string text;
    uint32_t port = 0;
    if (std::getline(in, text) && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) &&
        port > 0 && port < 65536) {
      server->port_ = static_cast<uint16_t>(port);
      ::unlink(port_path.c_str());
      return server;
    }
    int status = 0;
    if (::waitpid(*pid, &status, WNOHANG) == *pid) {
      server->pid_ = -1;
      return absl::InternalError("spark-ess-server exited before it listened");
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ::unlink(port_path.c_str());
  return absl::DeadlineExceededError("spark-ess-server did not listen within 30 s");
}

SparkEssServer::~SparkEssServer() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
    absl::SleepFor(absl::Milliseconds(25));
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

}  // namespace ferry::testing
