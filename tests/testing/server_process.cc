#include "tests/testing/server_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/control_client.h"
#include "common/net_address.h"
#include "common/unique_fd.h"

namespace ferry::testing {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::string& data_dir, const std::vector<std::string>& args,
    const ServerProcessOptions& options) {
  std::unique_ptr<ServerProcess> p(new ServerProcess);
  p->host_ = options.host;
  const passwd* account = nullptr;
  if (!options.user.empty()) {
    account = ::getpwnam(options.user.c_str());
    if (account == nullptr) return absl::NotFoundError(absl::StrCat("no user ", options.user));
  }
  UniqueFd netns;
  if (!options.netns.empty()) {
    const std::string path = "/run/netns/" + options.netns;
    netns = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns.valid()) return absl::ErrnoToStatus(errno, "open " + path);
  }
  // The server binds port 0 and says which ports it got: a port picked here and bound
  // there could be taken by another test's server in between. Another user writes it
  // in a directory of its own beneath /tmp.
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string port_dir =
      absl::StrCat(account != nullptr || tmp == nullptr ? "/tmp" : tmp, "/ferry-ports-XXXXXX");
  if (::mkdtemp(port_dir.data()) == nullptr) {
    return absl::ErrnoToStatus(errno, "mkdtemp for the port file");
  }
  if (account != nullptr && ::chown(port_dir.c_str(), account->pw_uid, account->pw_gid) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("chown ", port_dir, " to ", options.user));
  }
  // Kept while the process may run: a successor it starts (SIGUSR2) writes it too.
  const std::string port_file = port_dir + "/ports";
  p->port_dir_ = port_dir;
  std::vector<std::string> argv_strings = {
      binary, "--data-dir=" + data_dir, "--control-address=" + FormatHostPort(options.host, 0),
      "--data-address=" + FormatHostPort(options.host, 0), "--port-file=" + port_file};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = options.log_path.empty() ? "/dev/null" : options.log_path;
  p->pid_ = ::fork();
  if (p->pid_ < 0) return absl::ErrnoToStatus(errno, "fork for ferry_server");
  if (p->pid_ == 0) {
    // Only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) {
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
    }
    // The parent may have blocked signals (a data-plane thread blocks SIGPIPE); the
    // server starts from a clean mask like any process started from a shell.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (options.fd_limit != 0) {
      const rlimit limit{static_cast<rlim_t>(options.fd_limit),
                         static_cast<rlim_t>(options.fd_limit)};
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    if (netns.valid() && ::setns(netns.get(), CLONE_NEWNET) != 0) ::_exit(125);
    if (account != nullptr && (::setgroups(options.groups.size(), options.groups.data()) != 0 ||
                               ::setgid(account->pw_gid) != 0 || ::setuid(account->pw_uid) != 0)) {
      ::_exit(126);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  absl::Status info = absl::UnavailableError("no port file yet");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (p->control_port_ == 0) {
      std::ifstream in(port_file);
      std::string line;
      while (std::getline(in, line)) {
        uint32_t port = 0;
        const size_t eq = line.find('=');
        if (eq == std::string::npos || !absl::SimpleAtoi(line.substr(eq + 1), &port)) continue;
        if (line.compare(0, eq, "control") == 0) p->control_port_ = static_cast<uint16_t>(port);
        if (line.compare(0, eq, "data") == 0) p->data_port_ = static_cast<uint16_t>(port);
        if (line.compare(0, eq, "spark") == 0) p->spark_port_ = static_cast<uint16_t>(port);
        if (line.compare(0, eq, "metrics") == 0) p->metrics_port_ = static_cast<uint16_t>(port);
      }
    }
    // A new channel each time: a channel that failed once waits out gRPC's reconnect
    // backoff (a second and growing) before it tries again.
    if (p->control_port_ != 0) {
      info = ControlClient(absl::Seconds(2)).GetServerInfo(p->control_target()).status();
    }
    if (info.ok()) return p;
    int status;
    if (::waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
      p->reaped_ = true;
      return absl::InternalError(
          absl::StrCat(binary, " exited during startup with status ", status, "; log: ", log));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(binary, " did not answer within 20 s: ", info.ToString(), "; log: ", log));
}

ServerProcess::~ServerProcess() {
  if (!port_dir_.empty()) {
    ::unlink((port_dir_ + "/ports").c_str());
    ::rmdir(port_dir_.c_str());
  }
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

std::string ServerProcess::control_target() const { return FormatHostPort(host_, control_port_); }

absl::StatusOr<int> ServerProcess::SignalAndWait(int signal, absl::Duration timeout) {
  if (reaped_) return absl::FailedPreconditionError("ferry_server was already reaped");
  if (signal != 0 && ::kill(pid_, signal) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("kill ", pid_));
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return status;
    }
    if (r < 0 && errno != EINTR) return absl::ErrnoToStatus(errno, "waitpid ferry_server");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("ferry_server (pid ", pid_, ") still runs ",
                                                      absl::FormatDuration(timeout),
                                                      " after signal ", signal));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

double ServerProcess::CpuSeconds() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
  std::string line;
  std::getline(in, line);
  // Fields after the command name, which is in parentheses and may hold spaces;
  // utime and stime are fields 14 and 15 of the whole line.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  long long utime = 0;
  long long stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double ServerProcess::RssMiB() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kb = 0;
      in >> kb;
      return kb / 1024;
    }
  }
  return 0;
}

namespace {

// What each of the process's descriptors points at ("socket:[123]", "pipe:[45]", ...).
std::vector<std::string> FdTargets(pid_t pid) {
  std::vector<std::string> targets;
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[256];
      const ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
      targets.emplace_back(target, n > 0 ? static_cast<size_t>(n) : 0);
    }
    ::closedir(d);
  }
  return targets;
}

}  // namespace

int ServerProcess::OpenFdCount() const { return static_cast<int>(FdTargets(pid_).size()); }

int ServerProcess::PipeCount() const {
  int n = 0;
  for (const std::string& t : FdTargets(pid_)) n += t.rfind("pipe:", 0) == 0 ? 1 : 0;
  return n;
}

int ServerProcess::DataConnections() const {
  // /proc/<pid>/net/tcp: "sl local_address rem_address st ...", addresses as
  // HEXIP:HEXPORT, st in hex (0A listen, 06 time-wait).
  std::ifstream in(absl::StrCat("/proc/", pid_, "/net/tcp"));
  std::string line;
  std::getline(in, line);  // the header
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const size_t colon = local.find(':');
    if (colon == std::string::npos) continue;
    const unsigned port = static_cast<unsigned>(std::stoul(local.substr(colon + 1), nullptr, 16));
    if (port == data_port_ && state != "0A" && state != "06") ++n;
  }
  return n;
}

}  // namespace ferry::testing
