// A ferry_server child process on free loopback ports: for tests of the binary itself
// (signals, exit codes) and for benchmarks that measure the server apart from the
// client (its CPU time and RSS).
#ifndef FERRY_TESTS_TESTING_SERVER_PROCESS_H_
#define FERRY_TESTS_TESTING_SERVER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ferry::testing {

struct ServerProcessOptions {
  // Where its stdout and stderr go (nowhere when empty), never to an inherited pipe.
  std::string log_path;
  // Other than 0: its RLIMIT_NOFILE, soft and hard.
  uint64_t fd_limit = 0;
  // Runs it as that user (and its group, with no supplementary groups), as a packaged
  // service runs: this process must be root, and the binary and every path it is given
  // must be reachable by that user (not beneath /root).
  std::string user;
  // With `user`: supplementary groups it keeps (a service user in the group of another
  // service's files, as ferry in the NodeManager's).
  std::vector<gid_t> groups;
  // A network namespace (a name under /run/netns; see HostCluster) to run it in.
  std::string netns;
  // The numeric address both planes listen on (ports the kernel picks), and the control
  // target names: "127.0.0.1", or a host's "10.213.0.2" or "fd00:f3:0::2".
  std::string host = "127.0.0.1";
};

class ServerProcess {
 public:
  // Starts `binary --data-dir=<data_dir> --control-address=... --data-address=...
  // <args>` and waits (up to 20 s) until its control plane answers GetServerInfo. It is
  // killed if this process dies.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::string& binary,
                                                              const std::string& data_dir,
                                                              const std::vector<std::string>& args,
                                                              const ServerProcessOptions& options);
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::string& data_dir, const std::vector<std::string>& args,
      const std::string& log_path = "", uint64_t fd_limit = 0, const std::string& user = "") {
    ServerProcessOptions options;
    options.log_path = log_path;
    options.fd_limit = fd_limit;
    options.user = user;
    return Start(binary, data_dir, args, options);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  // Kills the process if it still runs, and reaps it.
  ~ServerProcess();

  pid_t pid() const { return pid_; }
  std::string control_target() const;
  uint16_t data_port() const { return data_port_; }
  // The Spark front door's port; 0 when it is off.
  uint16_t spark_port() const { return spark_port_; }
  // The metrics endpoint's port; 0 when it is off.
  uint16_t metrics_port() const { return metrics_port_; }

  // Sends `signal` (if not 0), then waits up to `timeout` for the process to exit.
  // Returns its wait status (see WIFEXITED), or DEADLINE_EXCEEDED if it still runs.
  absl::StatusOr<int> SignalAndWait(int signal, absl::Duration timeout);

  // User + system CPU seconds so far, and resident memory now (from /proc).
  double CpuSeconds() const;
  double RssMiB() const;
  // Entries in /proc/<pid>/fd now; of them, pipes.
  int OpenFdCount() const;
  int PipeCount() const;
  // The server's open data-plane connections: TCP sockets on its data port other than
  // listeners (and TIME_WAIT remnants, which hold no descriptor).
  int DataConnections() const;

 private:
  ServerProcess() = default;

  pid_t pid_ = -1;
  std::string port_dir_;  // holds the port file; removed with this object
  bool reaped_ = false;
  std::string host_;
  uint16_t control_port_ = 0;
  uint16_t data_port_ = 0;
  uint16_t spark_port_ = 0;
  uint16_t metrics_port_ = 0;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_SERVER_PROCESS_H_
