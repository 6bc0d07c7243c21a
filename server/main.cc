// ferry_server: serves shuffle blocks from a directory of Spark shuffle files.
//
//   ferry_server --data-dir=/var/lib/ferry --control-address=0.0.0.0:7070
//                --data-address=0.0.0.0:7071 --threads=2 --mode=splice
//
// Files live under <data-dir>/<appId>/shuffle_<shuffleId>_<mapId>_0.{data,index,...}.
// SIGTERM or SIGINT shuts the server down cleanly.
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>
#include <grpc/support/log.h>
#include <systemd/sd-daemon.h>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flag_names.h"
#include "common/net_address.h"
#include "common/version.h"
#include "server/base/log_lines.h"
#include "server/base/replace_file.h"
#include "server/ferry_server.h"
#include "server/flags.h"
#include "server/ops/hand_over.h"

// The process's own flags. Those that set FerryServerOptions are declared beside the
// options they set (server/flags.h).
ABSL_FLAG(std::string, port_file, "",
          "Once serving, write the ports listened on to this file (control=, data=, spark=, "
          "metrics=, one per line; written whole, by rename): for addresses with port 0.");
ABSL_FLAG(std::string, log_level, "info", "Least severe log lines kept: info, warning or error.");
ABSL_FLAG(std::string, log_file, "",
          "Append log lines to this file instead of stderr; SIGHUP reopens it (logrotate).");
ABSL_FLAG(bool, check_config, false,
          "Check the configuration (flags and --flagfile, and the files and dirs they name) "
          "without serving: print what would be served and exit 0, or the first error, "
          "naming the flag file's line where there is one, and exit 2 (bad flags) or 1. "
          "Also -t.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM/SIGINT: how long connections may go on sending the requests they "
          "have already received before they are cut; 0 cuts them at once.");
ABSL_FLAG(bool, idle_after_hand_over, false,
          "Once handed over to a new server, stay, holding nothing, until SIGTERM instead of "
          "exiting: for a container whose exit would start it again (a DaemonSet's pod "
          "while a surge rollout replaces it).");
ABSL_FLAG(bool, take_over, false,
          "Take over from the ferry_server running with the same --state-dir (an upgrade "
          "or restart without a gap): take its listening sockets and state once it has "
          "ended its connections (within its --drain-timeout), then serve; it exits. With "
          "no server running there, start as usual. Needs --state-dir.");

namespace {

// Raises the soft open-file limit to the hard one: a data-plane connection holds up to
// three descriptors, and the usual soft default (1,024) runs out long before the
// connection limit does.
void RaiseFileLimit() {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur >= nofile.rlim_max) return;
  const rlim_t before = nofile.rlim_cur;
  nofile.rlim_cur = nofile.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) {
    PLOG(WARNING) << "ferry_server: cannot raise the open-file limit from " << before;
  }
}

// Points stderr (where the log lines go) at --log-file, when one is given.
bool OpenLogFile() {
  const std::string path = absl::GetFlag(FLAGS_log_file);
  if (path.empty()) return true;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) {
    std::fprintf(stderr, "ferry_server: cannot open --log-file %s: %s\n", path.c_str(),
                 std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

// Lines an operator needs at every --log-level: that the server serves (where, with
// which auth), and how it stopped. glog writes to stderr the lines at --log-level and
// above; Announce()'s lines below it go through this sink, formatted as glog formats.
thread_local bool announcing = false;

class AnnounceSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char* /*full_filename*/, const char* base_filename,
            int line, const google::LogMessageTime& time, const char* message,
            size_t message_len) override {
    if (!announcing || severity >= FLAGS_stderrthreshold) return;
    const std::string text =
        ToString(severity, base_filename, line, time, message, message_len) + "\n";
    // One write: the line stays whole beside other threads' lines.
    if (::write(STDERR_FILENO, text.data(), text.size()) < 0) return;
  }
};

void Announce(const std::string& line) {
  announcing = true;
  LOG(INFO) << line;
  announcing = false;
}

// gRPC's own log lines (a TLS handshake a peer failed, say), kept within what glog
// keeps: on one line, escaped, cut at 300 characters, and at most 10 a second, since a
// peer can cause them.
void LogGrpcLine(gpr_log_func_args* args) {
  static auto* budget = new ferry::LineBudget(10);
  uint64_t held_back = 0;
  if (!budget->Take(absl::Now(), &held_back)) return;
  const std::string line =
      absl::StrCat("grpc: ", ferry::LogEscaped(absl::string_view(args->message).substr(0, 300)),
                   held_back > 0 ? absl::StrCat(" (", held_back, " such lines held back)") : "");
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    LOG(ERROR) << line;
  } else {
    LOG(INFO) << line;
  }
}

// Tells systemd (Type=notify) `state` from a thread of its own, in order: sd_notify
// blocks while the manager's socket queue is full, and the main thread, which waits for
// SIGTERM, must never wait for it. A line not sent by exit is not sent.
class SystemdNotifier {
 public:
  void Tell(std::string state) { Queue(std::move(state), nullptr); }
  // Tells `state`, then waits (up to `timeout`) until systemd has read it
  // (sd_notify_barrier): a MAINPID= must be read before the old main process exits.
  // Whether it was read; false at once when no manager listens.
  bool TellAndConfirm(std::string state, absl::Duration timeout) {
    if (std::getenv("NOTIFY_SOCKET") == nullptr) return false;
    auto read = std::make_shared<absl::Notification>();
    Queue(std::move(state), read);
    return read->WaitForNotificationWithTimeout(timeout);
  }

 private:
  struct Message {
    std::string state;
    std::shared_ptr<absl::Notification> read;  // null: not waited for
  };
  void Queue(std::string state, std::shared_ptr<absl::Notification> read) {
    absl::MutexLock lock(&mu_);
    if (!started_) {
      std::thread([this] { Run(); }).detach();
      started_ = true;
    }
    queue_.push_back({std::move(state), std::move(read)});
  }
  void Run() {
    for (;;) {
      Message message;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<Message>* q) { return !q->empty(); }, &queue_));
        message = std::move(queue_.front());
        queue_.pop_front();
      }
      const std::string& state = message.state;
      if (const int told = sd_notify(0, state.c_str()); told < 0) {
        LOG(WARNING) << "ferry_server: cannot tell systemd " << state.substr(0, state.find('\n'))
                     << ": " << std::strerror(-told);
      } else if (message.read != nullptr && sd_notify_barrier(0, 5 * 1000 * 1000) >= 0) {
        message.read->Notify();
      }
    }
  }
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Message> queue_ ABSL_GUARDED_BY(mu_);
};

SystemdNotifier& Notifier() {
  // Outlives main(): its thread may still be blocked in a send at exit.
  static auto* notifier = new SystemdNotifier();
  return *notifier;
}

// How this process was started, for a successor (SIGUSR2): its arguments, and the path
// of its binary as it was then, which a package upgrade fills with the new one.
std::vector<std::string>& StartedWith() {
  static auto* argv = new std::vector<std::string>();
  return *argv;
}
std::string& StartedFrom() {
  static auto* path = new std::string();
  return *path;
}

// SIGUSR2 (systemctl reload): starts the binary at this one's path with its arguments
// and --take-over; it takes over from this server. A successor that exits before it
// does is one WARNING line, and this server serves on.
void StartSuccessor() {
  std::vector<std::string> args = StartedWith();
  if (std::find(args.begin(), args.end(), "--take-over") == args.end()) {
    args.push_back("--take-over");
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const char* path = StartedFrom().c_str();
  const pid_t child = ::fork();
  if (child < 0) {
    PLOG(WARNING) << "ferry_server: SIGUSR2: cannot start a new server";
    return;
  }
  if (child == 0) {
    // Only async-signal-safe calls until exec: the successor starts with no signal
    // blocked, as from a shell.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(path, argv.data());
    ::_exit(127);
  }
  LOG(INFO) << "ferry_server: SIGUSR2: started " << path << " (pid " << child << ") to take over";
  std::thread([child] {
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      LOG(WARNING) << "ferry_server: the new server (pid " << child << ") exited with status "
                   << status << " before it took over; this one serves on";
    }
  }).detach();
}

// An address as configured, with the port the server listens on (for port 0).
std::string Where(const std::string& address, uint16_t port) {
  absl::StatusOr<ferry::HostPort> parsed = ferry::ParseHostPort(address);
  return parsed.ok() ? ferry::FormatHostPort(parsed->host, port) : address;
}

// `message` with "FILE:LINE: " first when it starts with a flag a flag file set.
std::string WithOrigin(absl::string_view message) {
  if (!absl::StartsWith(message, "--")) return std::string(message);
  const size_t end = message.find_first_of(" =:", 2);
  const std::string origin = ferry::FlagOrigin(message.substr(2, end - 2));
  return origin.empty() ? std::string(message) : absl::StrCat(origin, ": ", message);
}

// The start-up log's lines on what the server holds: threads, the Spark front door,
// the descriptor plan, the limits as served.
void LogLimits(const ferry::FerryServer& server, const ferry::FerryServerOptions& options) {
  LOG(INFO) << "ferry_server: data plane: " << options.data.threads << " threads, mode "
            << AbslUnparseFlag(options.connection.mode) << ", io engine "
            << AbslUnparseFlag(options.connection.engine);
  if (const ferry::SparkFrontDoor* spark = server.spark_door()) {
    LOG(INFO) << "ferry_server: " << spark->Describe();
  }
  const ferry::DescriptorPlan& fds = server.descriptors();
  LOG(INFO) << "ferry_server: " << fds.limit << " descriptors: " << fds.reserve
            << " reserved, up to " << fds.max_data_files << " data files ("
            << fds.max_cached_map_outputs << " cached), " << fds.max_connections << " connections ("
            << options.data.max_connections_per_client << " per client)"
            << (fds.spark_units > 0
                    ? absl::StrCat(", ", fds.spark_units, " ",
                                   ferry::SparkFrontDoor::DescriptorsOf(options.spark).what)
                    : "");
  if (fds.clamped_a_setting) {
    LOG(WARNING) << "ferry_server: " << fds.clamped;
  } else if (!fds.clamped.empty()) {
    LOG(INFO) << "ferry_server: " << fds.clamped;
  }
  const ferry::FerryServerOptions& served = server.options();
  LOG(INFO) << "ferry_server: limits: " << served.data.max_connections << " connections ("
            << served.data.max_connections_per_client << " per client), "
            << served.tickets.max_streams << " streams (" << served.tickets.max_streams_per_client
            << " per client), " << served.tickets.max_blocks << " stream blocks, "
            << served.store.max_cached_map_outputs << " cached map outputs; first request within "
            << absl::FormatDuration(served.connection.first_request_timeout) << ", idle "
            << absl::FormatDuration(served.connection.idle_timeout) << ", io "
            << absl::FormatDuration(served.connection.io_timeout) << ", ticket ttl "
            << absl::FormatDuration(served.control.ticket_ttl);
}

// How the server stopped: what the drain did, and the streams left open.
void LogStopped(ferry::FerryServer& server, absl::Duration drain,
                const ferry::DataServer::DrainReport& drained) {
  // Streams reducers opened and have not closed: they fetch what is left elsewhere (or
  // here, after a restart).
  const size_t streams = server.tickets().size();
  const std::string summary =
      drain <= absl::ZeroDuration()
          ? absl::StrCat("without a drain (--drain-timeout=0): every connection cut at once; ",
                         streams, " streams open")
          : absl::StrCat("drained in ",
                         absl::FormatDuration(absl::Trunc(drained.took, absl::Milliseconds(1))),
                         ": ", drained.idle, " idle connections closed, ", drained.finished,
                         " finished the requests they had received, ", drained.cut,
                         " cut at --drain-timeout=", absl::FormatDuration(drain), "; ", streams,
                         " streams open");
  if (drained.cut > 0) {
    LOG(WARNING) << "ferry_server: stopped, " << summary;
  } else {
    Announce(absl::StrCat("ferry_server: stopped, ", summary));
  }
}

int Main() {
  ferry::FerryServerOptions options;
  // Every limit follows one rule: a value outside its range is refused with an error
  // naming the flag, never clamped in silence.
  absl::Status valid = ferry::ApplyServerFlags(&options);
  if (valid.ok()) valid = options.Validate();
  if (!valid.ok()) {
    LOG(ERROR) << "ferry_server: " << WithOrigin(valid.message());
    return 2;
  }
  if (absl::GetFlag(FLAGS_check_config)) {
    absl::StatusOr<std::string> checked = ferry::FerryServer::CheckConfig(options);
    if (!checked.ok()) {
      std::fprintf(stderr, "ferry_server: %s\n", WithOrigin(checked.status().message()).c_str());
      return 1;
    }
    std::printf("%sferry_server: the configuration is good\n", checked->c_str());
    return 0;
  }

  // Block the shutdown signals before any thread starts, so every thread inherits the
  // mask and sigwait() below is the only place they arrive. SIGUSR1 is the hand-over
  // point's: this server handed over. SIGUSR2 starts a successor (StartSuccessor).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGUSR1);
  sigaddset(&signals, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  RaiseFileLimit();
  const std::string& state_dir = options.spark.executors.state_dir;
  const std::string hand_over_path =
      state_dir.empty() ? "" : absl::StrCat(state_dir, "/ferry_server.sock");
  const bool take_over = absl::GetFlag(FLAGS_take_over);
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  if (take_over && hand_over_path.empty()) {
    LOG(ERROR) << "ferry_server: --take-over needs --state-dir (where the running server "
                  "keeps its state and its hand-over socket)";
    return 2;
  }
  std::optional<ferry::TakenOver> taken;
  std::unique_ptr<ferry::HandOverPoint> point;
  absl::StatusOr<std::unique_ptr<ferry::FerryServer>> server;
  // The server once it serves; the point's callbacks read it on the point's thread (a
  // request may come while this server still starts: it is refused).
  static std::atomic<ferry::FerryServer*> serving_server{nullptr};
  const auto start_point = [&](bool replace) -> absl::Status {
    if (hand_over_path.empty()) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<ferry::HandOverPoint>> started = ferry::HandOverPoint::Listen(
        {.path = hand_over_path, .replace = replace},
        [drain]() -> absl::StatusOr<ferry::HandedSockets> {
          ferry::FerryServer* serving = serving_server.load();
          if (serving == nullptr) return absl::UnavailableError("this server is starting");
          return serving->PrepareHandOver(drain);
        },
        [](bool served, const std::string& why) {
          if (served) {
            ::kill(::getpid(), SIGUSR1);
            return;
          }
          LOG(WARNING) << "ferry_server: the hand-over failed (" << why << "); serving again";
          serving_server.load()->ResumeAfterHandOver();  // set: Prepare succeeded
        });
    if (!started.ok()) return started.status();
    point = *std::move(started);
    return absl::OkStatus();
  };
  if (take_over) {
    // The running server ends its connections first: up to its drain timeout, taken as
    // this one's.
    absl::StatusOr<std::optional<ferry::TakenOver>> asked =
        ferry::TakeOver(hand_over_path, drain + absl::Seconds(30));
    if (absl::IsUnavailable(asked.status())) {
      // It went before it handed anything over: its ports and state are free.
      LOG(WARNING) << "ferry_server: " << asked.status().message() << "; starting";
      asked = std::optional<ferry::TakenOver>();
    }
    if (!asked.ok()) {
      LOG(ERROR) << "ferry_server: cannot take over: " << asked.status().message();
      return 1;
    }
    taken = *std::move(asked);
    if (!taken.has_value()) {
      LOG(INFO) << "ferry_server: no server answers on " << hand_over_path
                << " to take over from; starting";
    }
  }
  // Before the state files are opened: two servers on one state dir would corrupt them.
  // A server that takes over binds its point once it serves, in the old one's place.
  if (!taken.has_value()) {
    if (absl::Status started = start_point(false); !started.ok()) {
      LOG(ERROR) << "ferry_server: " << started.message();
      return 1;
    }
  }
  server = ferry::FerryServer::Start(
      options, taken.has_value() ? std::move(taken->listeners) : ferry::HandedSockets());
  if (!server.ok()) {
    LOG(ERROR) << "ferry_server: " << WithOrigin(server.status().message());
    return 1;
  }
  serving_server.store(server->get());
  // Before a server taken over from hears that this one serves: whatever fails until
  // then leaves it serving.
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    const absl::Status written = ferry::ReplaceFile(
        path,
        absl::StrCat("control=", (*server)->control_port(), "\ndata=", (*server)->data_port(),
                     "\nspark=", (*server)->spark_port(), "\nmetrics=", (*server)->metrics_port(),
                     "\n"),
        0644);
    if (!written.ok()) {
      LOG(ERROR) << "ferry_server: cannot write --port-file: " << written;
      return 1;
    }
  }
  if (taken.has_value()) {
    if (absl::Status started = start_point(true); !started.ok()) {
      LOG(ERROR) << "ferry_server: " << started.message();
      return 1;
    }
    // Under systemd (started by the old server on SIGUSR2): this process is the unit's
    // main one from now on, which systemd must have read before the old one exits.
    if (std::getenv("NOTIFY_SOCKET") != nullptr &&
        !Notifier().TellAndConfirm(absl::StrCat("MAINPID=", ::getpid()), absl::Seconds(6))) {
      LOG(WARNING) << "ferry_server: systemd did not confirm this server as the main process";
    }
    if (absl::Status told = ferry::Served(*taken); !told.ok()) {
      LOG(WARNING) << "ferry_server: the server taken over from (pid " << taken->from
                   << ") did not hear that this one serves: " << told.message();
    }
  }
  // At every --log-level: that it serves, where, and who may ask.
  std::string serving =
      absl::StrCat("ferry_server ", ferry::kFerryVersion, " serving ", options.data_dir,
                   ": control plane on ", Where(options.control_address, (*server)->control_port()),
                   options.tls_cert_chain.empty() ? " (plaintext, " : " (TLS, ",
                   options.control.auth_token.empty() ? "no auth token)" : "auth token required)",
                   ", data plane on ", Where(options.data_address, (*server)->data_port()));
  if (const ferry::SparkFrontDoor* spark = (*server)->spark_door()) {
    absl::StrAppend(&serving, ", Spark on ", Where(options.spark.address, (*server)->spark_port()),
                    " (spark.authenticate ", spark->secrets()->required() ? "required" : "off",
                    spark->tls() ? ", TLS)" : ")");
  }
  if ((*server)->metrics_port() != 0) {
    absl::StrAppend(&serving, ", metrics on ",
                    Where(options.metrics_address, (*server)->metrics_port()), "/metrics");
  }
  if (taken.has_value()) absl::StrAppend(&serving, "; taken over from pid ", taken->from);
  Announce(serving);
  LogLimits(**server, options);
  // systemd's Type=notify: ready once both planes (and Spark's, and the metrics) listen.
  SystemdNotifier* systemd = &Notifier();
  systemd->Tell(absl::StrCat("READY=1\nSTATUS=", serving));
  int signal = 0;
  for (;;) {
    sigwait(&signals, &signal);
    if (signal == SIGUSR2) {
      if (point == nullptr) {
        LOG(WARNING) << "ferry_server: SIGUSR2: no hand-over without --state-dir";
      } else {
        StartSuccessor();
      }
      continue;
    }
    if (signal != SIGHUP) break;
    // logrotate moved the file away: write to a fresh one under the same name.
    if (!OpenLogFile()) return 1;
    LOG(INFO) << "ferry_server: SIGHUP, log file reopened";
  }
  if (signal == SIGUSR1) {
    point.reset();
    (*server)->Shutdown();
    serving_server.store(nullptr);
    server->reset();  // what it held goes now, not at exit
    if (!absl::GetFlag(FLAGS_idle_after_hand_over)) {
      Announce("ferry_server: stopped, handed over to the new server");
      return 0;
    }
    Announce("ferry_server: handed over to the new server; idle until SIGTERM");
    sigdelset(&signals, SIGUSR2);  // nothing left to hand over
    do {
      sigwait(&signals, &signal);
    } while (signal != SIGTERM && signal != SIGINT);
    Announce("ferry_server: stopped, handed over to the new server");
    return 0;
  }
  LOG(INFO) << "ferry_server: " << strsignal(signal) << ", shutting down";
  systemd->Tell("STOPPING=1\nSTATUS=draining");
  // No hand-over from here on (one under way is abandoned: this server serves on until
  // its own drain).
  point.reset();
  const ferry::DataServer::DrainReport drained = (*server)->Shutdown(drain);
  LogStopped(**server, drain, drained);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves shuffle blocks over a gRPC control plane and a "
      "zero-copy data plane.");
  ferry::SetEssentialFlags({"data-dir",
                            "control-address",
                            "data-address",
                            "mode",
                            "threads",
                            "metrics-address",
                            "auth-token-file",
                            "tls-cert-file",
                            "tls-key-file",
                            "spark-address",
                            "spark-dir-roots",
                            "state-dir",
                            "spark-yarn-dir",
                            "spark-apps-dir",
                            "spark-auth-yarn",
                            "spark-auth-apps",
                            "spark-auth-secret-file",
                            "log-level",
                            "log-file",
                            "check-config"});
  StartedWith().assign(argv, argv + argc);
  if (char self[PATH_MAX]; ::realpath("/proc/self/exe", self) != nullptr) StartedFrom() = self;
  ferry::ParseFlags(argc, argv);
#ifdef NDEBUG
  // Debian's abseil is built without NDEBUG, so each Mutex::Lock also runs its deadlock
  // detector: a process-wide graph behind one spinlock, 3.7x the cost of an uncontended
  // lock pair here and about 5% of the server's CPU merging 2 KiB pushes. Builds with
  // assertions (the tests') keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  const std::string level = absl::GetFlag(FLAGS_log_level);
  if (level != "info" && level != "warning" && level != "error") {
    std::fprintf(stderr, "ferry_server: --log-level must be info, warning or error, not '%s'\n",
                 level.c_str());
    return 2;
  }
  if (!OpenLogFile()) return 2;
  google::InitGoogleLogging(argv[0]);
  // Every line reaches the sinks (Announce's among them); those at --log-level and up
  // go to stderr, none to glog's own files.
  FLAGS_minloglevel = google::GLOG_INFO;
  FLAGS_logtostderr = false;
  FLAGS_stderrthreshold = level == "info"      ? google::GLOG_INFO
                          : level == "warning" ? google::GLOG_WARNING
                                               : google::GLOG_ERROR;
  for (int severity = google::GLOG_INFO; severity < google::NUM_SEVERITIES; ++severity) {
    google::SetLogDestination(severity, "");
  }
  static AnnounceSink announce;
  google::AddLogSink(&announce);
  gpr_set_log_function(LogGrpcLine);
  return Main();
}
