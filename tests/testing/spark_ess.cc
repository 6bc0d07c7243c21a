#include "tests/testing/spark_ess.h"

#include <fcntl.h>
#include <signal.h>
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

std::string SparkEssDir(std::string* why) {
  const char* dir = std::getenv("SPARK_ESS_DIR");
  std::string reason;
  std::string result;
  if (dir == nullptr || *dir == '\0') {
    reason = "SPARK_ESS_DIR is not set (../shared/spark-ess is missing?)";
  } else {
    const char* build = std::getenv("SPARK_ESS_BUILD_DIR");
    const std::string jar = absl::StrCat(
        build != nullptr && *build != '\0' ? std::string(build) : absl::StrCat(dir, "/build"),
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
