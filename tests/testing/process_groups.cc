#include "tests/testing/process_groups.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "tests/testing/loopback.h"
#include "tests/testing/wait_for.h"

extern char** environ;

namespace ferry::testing {

namespace {

// Every process a ProcessGroups launched: ReapOrphans leaves them to their owner's
// waitpid.
class LaunchedPids {
 public:
  void Add(pid_t pid) {
    absl::MutexLock lock(&mu_);
    pids_.insert(pid);
  }
  bool Contains(pid_t pid) {
    absl::MutexLock lock(&mu_);
    return pids_.count(pid) > 0;
  }

 private:
  absl::Mutex mu_;
  std::set<pid_t> pids_ ABSL_GUARDED_BY(mu_);
};
LaunchedPids& Launched() {
  static auto* launched = new LaunchedPids();
  return *launched;
}

// The zombies whose parent is this process.
std::vector<pid_t> ZombieChildren() {
  std::vector<pid_t> zombies;
  const pid_t self = ::getpid();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::optional<ProcessStat> stat = StatOf(pid);
    if (stat.has_value() && stat->state == 'Z' && stat->parent == self) zombies.push_back(pid);
  }
  return zombies;
}

}  // namespace

void ReapOrphans() {
  static const bool started = [] {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    std::thread([] {
      for (;;) {
        for (const pid_t zombie : ZombieChildren()) {
          if (!Launched().Contains(zombie)) (void)::waitpid(zombie, nullptr, WNOHANG);
        }
        ::usleep(100 * 1000);
      }
    }).detach();
    return true;
  }();
  (void)started;
}

std::optional<ProcessStat> StatOf(pid_t pid) {
  // "pid (comm) state ppid ...": comm may hold spaces, not a ')' followed by one.
  const std::string stat = ReadTextFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t comm_end = stat.rfind(") ");
  if (comm_end == std::string::npos) return std::nullopt;
  const std::vector<std::string> fields = absl::StrSplit(stat.substr(comm_end + 2), ' ');
  ProcessStat parsed;
  if (fields.size() < 2 || fields[0].size() != 1 || !absl::SimpleAtoi(fields[1], &parsed.parent)) {
    return std::nullopt;
  }
  parsed.state = fields[0][0];
  return parsed;
}

std::string JvmFailureLines(const std::string& log_text, size_t max_lines) {
  std::vector<absl::string_view> kept;
  for (absl::string_view line : absl::StrSplit(log_text, '\n')) {
    if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "at ")) continue;
    if (absl::StrContains(line, "ERROR") || absl::StrContains(line, "WARN") ||
        absl::StrContains(line, "Exception") || absl::StrContains(line, "Caused by")) {
      kept.push_back(line);
    }
  }
  if (kept.size() > max_lines) kept.erase(kept.begin(), kept.end() - max_lines);
  return absl::StrCat(absl::StrJoin(kept, "\n"), "\n");
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> LinesContaining(const std::vector<std::string>& paths,
                                         absl::string_view containing) {
  std::vector<std::string> lines;
  for (const std::string& path : paths) {
    for (absl::string_view line : absl::StrSplit(ReadTextFile(path), '\n')) {
      if (absl::StrContains(line, containing)) lines.emplace_back(line);
    }
  }
  return lines;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

uint16_t FreeLoopbackPort() {
  // Below the kernel's ephemeral range: a port the kernel hands out for a bind to 0 or an
  // outgoing connection (another JVM's, started meanwhile) is never one of these. A port
  // is handed out once per process; another test's process may still pick it, and the
  // daemons' launchers try again on new ports when theirs is taken.
  static absl::Mutex mu(absl::kConstInit);
  static auto* given = new std::set<uint16_t>();
  int ephemeral_low = 32768;
  const std::vector<std::string> range =
      absl::StrSplit(ReadTextFile("/proc/sys/net/ipv4/ip_local_port_range"),
                     absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  if (!range.empty()) (void)absl::SimpleAtoi(range[0], &ephemeral_low);
  constexpr int kLowest = 10000;
  if (ephemeral_low - kLowest >= 1024) {
    absl::BitGen random;
    absl::MutexLock lock(&mu);
    for (int attempt = 0; attempt < 256; ++attempt) {
      const auto port = static_cast<uint16_t>(absl::Uniform(random, kLowest, ephemeral_low));
      if (given->contains(port)) continue;
      UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const sockaddr_in addr = LoopbackAddress(port);
      if (!fd.valid() ||
          ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
        continue;
      }
      given->insert(port);
      return port;
    }
  }
  uint16_t port = 0;
  UniqueFd listener = ListenLoopback(&port, 1);
  return port;
}

bool AcceptsOnLoopback(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in addr = LoopbackAddress(port);
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
}

std::string JavaHome() {
  if (const char* home = std::getenv("JAVA_HOME"); home != nullptr && *home != '\0') return home;
  for (const char* dir : {"/usr/lib/jvm/java-17-openjdk-amd64", "/usr/lib/jvm/default-java"}) {
    if (::access(absl::StrCat(dir, "/bin/java").c_str(), X_OK) == 0) return dir;
  }
  return "";
}

std::optional<int> ProcessGroups::WaitForExit(pid_t pid, absl::Time deadline) {
  UniqueFd exited(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() || !exited.valid()) return std::nullopt;
    pollfd p{exited.get(), POLLIN, 0};
    const int64_t ms = std::min<int64_t>(absl::ToInt64Milliseconds(left), INT_MAX - 1) + 1;
    (void)::poll(&p, 1, static_cast<int>(ms));
  }
}

void ProcessGroups::Kill(pid_t group) {
  groups_.erase(std::remove(groups_.begin(), groups_.end(), group), groups_.end());
  if (graceful_) {
    ::kill(-group, SIGTERM);
    (void)WaitForExit(group, absl::Now() + absl::Seconds(10));
    // The rest of the group (a worker's executors) is seen only by asking.
    if (WaitFor([group] { return ::kill(-group, 0) != 0 && errno == ESRCH; }, absl::Seconds(10))) {
      return;
    }
  }
  ::kill(-group, SIGKILL);
  (void)WaitForExit(group, absl::InfiniteFuture());
}

absl::StatusOr<pid_t> ProcessGroups::Launch(const std::vector<std::string>& argv,
                                            const std::map<std::string, std::string>& env,
                                            const std::string& log, const std::string& netns) {
  // Everything the child needs is built before fork: after it, only async-signal-safe
  // calls.
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string key = var.substr(0, var.find('='));
    if (env.count(key) == 0) vars.push_back(var);
  }
  for (const auto& [key, value] : env) vars.push_back(absl::StrCat(key, "=", value));
  std::vector<char*> cenv;
  for (std::string& v : vars) cenv.push_back(v.data());
  cenv.push_back(nullptr);
  UniqueFd out(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!out.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", log));
  UniqueFd ns;
  if (!netns.empty()) {
    ns = UniqueFd(::open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns.valid()) return absl::ErrnoToStatus(errno, "open /run/netns/" + netns);
  }
  const pid_t pid = ::fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out.get(), STDOUT_FILENO);
    ::dup2(out.get(), STDERR_FILENO);
    if (ns.valid() && ::setns(ns.get(), CLONE_NEWNET) != 0) ::_exit(125);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  groups_.push_back(pid);
  Launched().Add(pid);
  return pid;
}

ProcessGroups::~ProcessGroups() {
  // Last started first: what runs on the daemons started before it goes before them.
  while (!groups_.empty()) Kill(groups_.back());
}

}  // namespace ferry::testing
