// ferry_server: serves shuffle blocks from a directory of Spark shuffle files.
//
//   ferry_server --data-dir=/var/lib/ferry --control-address=0.0.0.0:7070
//                --data-address=0.0.0.0:7071 --threads=2 --mode=splice
//
// Files live under <data-dir>/<appId>/shuffle_<shuffleId>_<mapId>_0.{data,index,...}.
// SIGTERM or SIGINT shuts the server down cleanly.
#include <signal.h>
#include <sys/resource.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <glog/logging.h>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/auth_token.h"
#include "common/flag_names.h"
#include "common/replace_file.h"
#include "common/version.h"
#include "server/ferry_server.h"

namespace {

// Every default below is the options struct's own: written once, where the part that
// uses it is.
const ferry::FerryServerOptions& Defaults() {
  static const ferry::FerryServerOptions defaults;
  return defaults;
}

int64_t Default(uint64_t value) { return static_cast<int64_t>(value); }

}  // namespace

ABSL_FLAG(std::string, data_dir, "", "Directory holding <appId>/ shuffle file folders.");
ABSL_FLAG(std::string, control_address, "127.0.0.1:7070",
          "host:port of the gRPC control plane.");
ABSL_FLAG(std::string, data_address, "127.0.0.1:7071",
          "host:port (or [IPv6]:port) of the data plane, numeric; port 0 picks a free one.");
ABSL_FLAG(std::string, advertise_data_address, "",
          "host:port clients must dial for the data plane, when it differs from "
          "--data-address (NAT, a proxy).");
ABSL_FLAG(int, threads, 0, "Data-plane threads; 0 means one per core.");
ABSL_FLAG(ferry::DataPlaneMode, mode, Defaults().connection.mode,
          "Data-plane mode: splice (file -> pipe -> socket, zero copy) or copy (read, then "
          "send; the baseline).");
ABSL_FLAG(ferry::IoEngine, io_engine, Defaults().connection.engine,
          "inline: direct non-blocking syscalls, io_uring polls when a socket is full or "
          "empty; uring: every operation an io_uring request (splice runs on io-wq).");
ABSL_FLAG(int64_t, pipe_size, Default(Defaults().data.pipe_bytes),
          "Capacity in bytes of each splice pipe (the threads pool them: --max-pipes).");
ABSL_FLAG(int64_t, max_pipes, Default(Defaults().data.max_pipes),
          "Splice pipes the data-plane threads hold in all; 0: as many as the service "
          "user's pipe budget (fs.pipe-user-pages-soft) allows. A segment waits for one "
          "when all are in use.");
ABSL_FLAG(int64_t, disk_workers, Default(Defaults().disks.workers_per_disk),
          "Threads per disk that read what the page cache does not hold.");
ABSL_FLAG(int64_t, disk_queue, Default(Defaults().disks.max_queued_per_disk),
          "Reads waiting for one disk's workers; more fail RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, disk_readahead, Default(Defaults().disks.readahead_bytes),
          "Bytes of a segment the kernel is asked to read ahead at its first page-cache "
          "miss (POSIX_FADV_WILLNEED), on disks whose own read_ahead_kb is smaller; 0: "
          "only the kernel's own read-ahead.");
ABSL_FLAG(int64_t, copy_buffer_size, Default(Defaults().connection.copy_buffer_bytes),
          "Copy-mode buffer in bytes per connection.");
ABSL_FLAG(int64_t, max_connections, Default(Defaults().data.max_connections),
          "Data-plane connections served at once; more get a RESOURCE_EXHAUSTED error frame. "
          "Lowered at start when the open-file limit cannot hold them.");
ABSL_FLAG(int64_t, max_connections_per_client, Default(Defaults().data.max_connections_per_client),
          "Data-plane connections served at once from one client address.");
ABSL_FLAG(int64_t, max_iowq_workers, Default(Defaults().data.max_iowq_workers),
          "Cap on each data-plane ring's io-wq workers, bounded and unbounded (0: kernel default).");
ABSL_FLAG(int64_t, max_open_streams, Default(Defaults().tickets.max_streams),
          "Streams open at once; OpenStream past it answers RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_streams_per_client, Default(Defaults().tickets.max_streams_per_client),
          "Streams open at once for one client address.");
ABSL_FLAG(int64_t, max_stream_blocks, Default(Defaults().tickets.max_blocks),
          "Blocks held by all open streams together (about 64 bytes each).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a shared secret; when set, every control-plane call must carry "
          "'authorization: Bearer <secret>'.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain for the control plane; with --tls-key-file, the control "
          "plane speaks only TLS.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls-cert-file.");
ABSL_FLAG(absl::Duration, idle_poll, Defaults().data.idle_poll,
          "How long an idle data-plane thread polls for work before it sleeps (0: at once; "
          "at most 1ms). Faster one-block-per-round-trip fetches, for CPU while polling.");
ABSL_FLAG(int64_t, max_open_files, Default(Defaults().store.max_cached_map_outputs),
          "Map outputs kept in the cache, each an index with its data file open. Lowered at "
          "start when the open-file limit cannot hold them.");
ABSL_FLAG(absl::Duration, ticket_ttl, Defaults().control.ticket_ttl,
          "How long a stream ticket lives.");
ABSL_FLAG(absl::Duration, first_request_timeout, Defaults().connection.first_request_timeout,
          "Close a new data connection whose first request has not arrived within this.");
ABSL_FLAG(absl::Duration, idle_timeout, Defaults().connection.idle_timeout,
          "Close a data connection that sends no request for this long.");
ABSL_FLAG(absl::Duration, io_timeout, Defaults().connection.io_timeout,
          "Drop a data connection whose peer accepts no bytes for this long.");
ABSL_FLAG(std::string, spark_address, "",
          "host:port of the Spark front door: Spark's shuffle protocol (Spark's default port "
          "is 7337) on the data plane's threads. Empty: off.");
ABSL_FLAG(std::vector<std::string>, spark_dir_roots, {},
          "Comma-separated directories that Spark executors' local dirs must lie beneath "
          "(required with --spark-address; symlinks below them are not followed).");
ABSL_FLAG(std::string, spark_auth_secret_file, "",
          "spark.authenticate on the Spark front door: a file holding the secret every "
          "application authenticates with (the cluster's spark.authenticate.secret). Spark "
          "clients must then authenticate (SASL DIGEST-MD5, or Spark's AuthEngine with "
          "spark.network.crypto.enabled) before anything else.");
ABSL_FLAG(std::string, spark_auth_secrets_dir, "",
          "spark.authenticate with a secret per application: a directory with a file per "
          "application id holding its secret, read at each handshake (an application "
          "without one uses --spark-auth-secret-file, if set).");
ABSL_FLAG(bool, spark_auth_engine_v1, true,
          "Serve clients of Spark's AuthEngine version 1 (spark.network.crypto."
          "authEngineVersion=1, Spark's default), whose session key is the X25519 secret "
          "itself; false: only version 2. Either is told from the client's first frame.");
ABSL_FLAG(std::string, state_dir, "",
          "Directory where Spark executors' registrations are kept across restarts. Empty: "
          "in memory only.");
ABSL_FLAG(int64_t, max_spark_executors, Default(Defaults().spark_executors.max_executors),
          "Spark executors registered at once.");
ABSL_FLAG(int64_t, max_spark_streams_per_connection,
          Default(Defaults().spark.max_streams_per_connection),
          "Spark streams one connection may hold open.");
ABSL_FLAG(int64_t, max_spark_open_chunks, Default(Defaults().spark.max_open_chunks),
          "Chunks of all open Spark streams together.");
ABSL_FLAG(int64_t, max_spark_open_chunks_per_client,
          Default(Defaults().spark.max_open_chunks_per_client),
          "Chunks of the open Spark streams of one client address.");
ABSL_FLAG(std::string, spark_tls_cert, "",
          "TLS on the Spark front door (Spark 4's spark.ssl.rpc.enabled): a PEM file of the "
          "certificate and its chain, the cluster's spark.ssl.rpc.certChain. With "
          "--spark-tls-key.");
ABSL_FLAG(std::string, spark_tls_key, "",
          "The PEM private key of --spark-tls-cert (the cluster's spark.ssl.rpc.privateKey).");
ABSL_FLAG(bool, spark_rdd_blocks, false,
          "Serve Spark executors' cached RDD blocks (OpenBlocks of rdd_<rdd>_<split>) from "
          "their local dirs, also after the executor is gone, for applications with "
          "spark.shuffle.service.fetch.rdd.enabled.");
ABSL_FLAG(int64_t, max_spark_registry_bytes, Default(Defaults().spark_executors.max_bytes),
          "Bytes of all Spark executors' registrations together (as kept in the state file).");
ABSL_FLAG(int64_t, blocking_threads, Default(Defaults().blocking.threads),
          "Threads for the data plane's blocking work (index loads, file opens, deletes).");
ABSL_FLAG(std::string, metrics_address, "",
          "host:port serving Prometheus metrics at /metrics (docs/operations.md). Empty: off.");
ABSL_FLAG(std::string, port_file, "",
          "Once serving, write the ports listened on to this file (control=, data=, spark=, "
          "metrics=, one per line; written whole, by rename): for addresses with port 0.");
ABSL_FLAG(std::string, log_level, "info", "Least severe log lines kept: info, warning or error.");
ABSL_FLAG(std::string, log_file, "",
          "Append log lines to this file instead of stderr; SIGHUP reopens it (logrotate).");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM/SIGINT: how long connections may go on sending the requests they "
          "have already received before they are cut; 0 cuts them at once.");

namespace {

// A count flag into its field. A negative value is refused here; the field's own range
// is its options struct's to check (FerryServerOptions::Validate).
template <typename T>
bool SetCount(const char* flag, const absl::Flag<int64_t>& from, T* to) {
  const int64_t value = absl::GetFlag(from);
  if (value < 0) {
    LOG(ERROR) << "--" << flag << " must be zero or more, not " << value;
    return false;
  }
  *to = static_cast<T>(value);
  return true;
}

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

int Main() {
  ferry::FerryServerOptions options;
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (options.data_dir.empty()) {
    LOG(ERROR) << "--data-dir is required";
    return 2;
  }
  options.control_address = absl::GetFlag(FLAGS_control_address);
  options.data_address = absl::GetFlag(FLAGS_data_address);
  options.advertise_data_address = absl::GetFlag(FLAGS_advertise_data_address);
  options.data.threads = absl::GetFlag(FLAGS_threads);
  if (options.data.threads <= 0) {
    options.data.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  options.data.idle_poll = absl::GetFlag(FLAGS_idle_poll);
  options.connection.mode = absl::GetFlag(FLAGS_mode);
  options.connection.engine = absl::GetFlag(FLAGS_io_engine);
  options.connection.first_request_timeout = absl::GetFlag(FLAGS_first_request_timeout);
  options.connection.idle_timeout = absl::GetFlag(FLAGS_idle_timeout);
  options.connection.io_timeout = absl::GetFlag(FLAGS_io_timeout);
  options.control.ticket_ttl = absl::GetFlag(FLAGS_ticket_ttl);
  options.spark_address = absl::GetFlag(FLAGS_spark_address);
  options.spark_executors.dir_roots = absl::GetFlag(FLAGS_spark_dir_roots);
  options.spark_executors.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.spark_auth.secret_file = absl::GetFlag(FLAGS_spark_auth_secret_file);
  options.spark_auth.secrets_dir = absl::GetFlag(FLAGS_spark_auth_secrets_dir);
  options.spark_auth.auth_engine_v1 = absl::GetFlag(FLAGS_spark_auth_engine_v1);
  options.spark.serve_rdd_blocks = absl::GetFlag(FLAGS_spark_rdd_blocks);
  options.spark_tls.cert_file = absl::GetFlag(FLAGS_spark_tls_cert);
  options.spark_tls.key_file = absl::GetFlag(FLAGS_spark_tls_key);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  if (!SetCount("pipe-size", FLAGS_pipe_size, &options.data.pipe_bytes) ||
      !SetCount("max-pipes", FLAGS_max_pipes, &options.data.max_pipes) ||
      !SetCount("disk-workers", FLAGS_disk_workers, &options.disks.workers_per_disk) ||
      !SetCount("disk-queue", FLAGS_disk_queue, &options.disks.max_queued_per_disk) ||
      !SetCount("disk-readahead", FLAGS_disk_readahead, &options.disks.readahead_bytes) ||
      !SetCount("copy-buffer-size", FLAGS_copy_buffer_size, &options.connection.copy_buffer_bytes) ||
      !SetCount("max-connections", FLAGS_max_connections, &options.data.max_connections) ||
      !SetCount("max-connections-per-client", FLAGS_max_connections_per_client,
                &options.data.max_connections_per_client) ||
      !SetCount("max-iowq-workers", FLAGS_max_iowq_workers, &options.data.max_iowq_workers) ||
      !SetCount("max-open-files", FLAGS_max_open_files, &options.store.max_cached_map_outputs) ||
      !SetCount("max-open-streams", FLAGS_max_open_streams, &options.tickets.max_streams) ||
      !SetCount("max-streams-per-client", FLAGS_max_streams_per_client,
                &options.tickets.max_streams_per_client) ||
      !SetCount("max-stream-blocks", FLAGS_max_stream_blocks, &options.tickets.max_blocks) ||
      !SetCount("max-spark-executors", FLAGS_max_spark_executors,
                &options.spark_executors.max_executors) ||
      !SetCount("max-spark-registry-bytes", FLAGS_max_spark_registry_bytes,
                &options.spark_executors.max_bytes) ||
      !SetCount("max-spark-streams-per-connection", FLAGS_max_spark_streams_per_connection,
                &options.spark.max_streams_per_connection) ||
      !SetCount("max-spark-open-chunks", FLAGS_max_spark_open_chunks,
                &options.spark.max_open_chunks) ||
      !SetCount("max-spark-open-chunks-per-client", FLAGS_max_spark_open_chunks_per_client,
                &options.spark.max_open_chunks_per_client) ||
      !SetCount("blocking-threads", FLAGS_blocking_threads, &options.blocking.threads)) {
    return 2;
  }
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ferry::ReadAuthToken(path);
    if (!token.ok()) {
      LOG(ERROR) << "ferry_server: " << token.status();
      return 2;
    }
    options.control.auth_token = *std::move(token);
  }
  const std::string cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key_file = absl::GetFlag(FLAGS_tls_key_file);
  if (cert_file.empty() != key_file.empty()) {
    LOG(ERROR) << "ferry_server: --tls-cert-file and --tls-key-file go together";
    return 2;
  }
  if (!cert_file.empty()) {
    absl::StatusOr<std::string> cert = ferry::ReadPemFile(cert_file);
    absl::StatusOr<std::string> key =
        cert.ok() ? ferry::ReadPemFile(key_file) : absl::StatusOr<std::string>(cert.status());
    if (!key.ok()) {
      LOG(ERROR) << "ferry_server: " << key.status();
      return 2;
    }
    options.tls_cert_chain = *std::move(cert);
    options.tls_private_key = *std::move(key);
  }
  // Every limit follows one rule: a value outside its range is refused with an error
  // naming the flag, never clamped in silence.
  if (absl::Status valid = options.Validate(); !valid.ok()) {
    LOG(ERROR) << "ferry_server: " << valid.message();
    return 2;
  }

  // Block the shutdown signals before any thread starts, so every thread inherits the
  // mask and sigwait() below is the only place they arrive.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  RaiseFileLimit();
  absl::StatusOr<std::unique_ptr<ferry::FerryServer>> server = ferry::FerryServer::Start(options);
  if (!server.ok()) {
    LOG(ERROR) << "ferry_server: " << server.status();
    return 1;
  }
  LOG(INFO) << "ferry_server " << ferry::kFerryVersion << " serving " << options.data_dir
            << ": control plane on port " << (*server)->control_port() << " ("
            << options.control_address << "), data plane on port " << (*server)->data_port()
            << " (" << options.data_address << "), " << options.data.threads << " threads, mode "
            << AbslUnparseFlag(options.connection.mode) << ", io engine "
            << AbslUnparseFlag(options.connection.engine)
            << (options.tls_cert_chain.empty() ? "" : ", control plane over TLS");
  if ((*server)->spark_port() != 0) {
    LOG(INFO) << "ferry_server: Spark front door on port " << (*server)->spark_port() << " ("
              << options.spark_address << "), executors' local dirs beneath "
              << absl::StrJoin(options.spark_executors.dir_roots, ",") << ", "
              << (*server)->spark_executors()->size() << " executors registered"
              << (options.spark_executors.state_dir.empty()
                      ? " (registrations kept in memory only)"
                      : absl::StrCat(" (kept in ", options.spark_executors.state_dir, ")"))
              << ", spark.authenticate "
              << (options.spark_auth.secret_file.empty() && options.spark_auth.secrets_dir.empty()
                      ? "off"
                      : absl::StrCat("required (SASL DIGEST-MD5 with QOP auth, or AuthEngine v",
                                     options.spark_auth.auth_engine_v1 ? "1/2" : "2",
                                     " with AES-CTR; secrets from ",
                                     options.spark_auth.secrets_dir.empty()
                                         ? ""
                                         : absl::StrCat(options.spark_auth.secrets_dir, "/<app>"),
                                     !options.spark_auth.secrets_dir.empty() &&
                                             !options.spark_auth.secret_file.empty()
                                         ? ", else "
                                         : "",
                                     options.spark_auth.secret_file, ")"));
  }
  if ((*server)->metrics_port() != 0) {
    LOG(INFO) << "ferry_server: metrics on port " << (*server)->metrics_port() << " ("
              << options.metrics_address << "), /metrics";
  }
  const ferry::DescriptorPlan& fds = (*server)->descriptors();
  LOG(INFO) << "ferry_server: " << fds.limit << " descriptors: " << fds.reserve
            << " reserved, up to " << fds.max_data_files << " data files ("
            << fds.max_cached_map_outputs << " cached), "
            << fds.max_connections << " connections (" << options.data.max_connections_per_client
            << " per client)";
  if (!fds.clamped.empty()) LOG(WARNING) << "ferry_server: " << fds.clamped;
  const ferry::FerryServerOptions& served = (*server)->options();
  LOG(INFO) << "ferry_server: limits: " << served.data.max_connections << " connections ("
            << served.data.max_connections_per_client << " per client), "
            << served.tickets.max_streams << " streams (" << served.tickets.max_streams_per_client
            << " per client), " << served.tickets.max_blocks << " stream blocks, "
            << served.store.max_cached_map_outputs << " cached map outputs; first request within "
            << absl::FormatDuration(served.connection.first_request_timeout) << ", idle "
            << absl::FormatDuration(served.connection.idle_timeout) << ", io "
            << absl::FormatDuration(served.connection.io_timeout) << ", ticket ttl "
            << absl::FormatDuration(served.control.ticket_ttl);
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    const absl::Status written = ferry::ReplaceFile(
        path,
        absl::StrCat("control=", (*server)->control_port(), "\ndata=", (*server)->data_port(),
                     "\nspark=", (*server)->spark_port(), "\nmetrics=",
                     (*server)->metrics_port(), "\n"),
        0644);
    if (!written.ok()) {
      LOG(ERROR) << "ferry_server: cannot write --port-file: " << written;
      return 1;
    }
  }
  int signal = 0;
  for (;;) {
    sigwait(&signals, &signal);
    if (signal != SIGHUP) break;
    // logrotate moved the file away: write to a fresh one under the same name.
    if (!OpenLogFile()) return 1;
    LOG(INFO) << "ferry_server: SIGHUP, log file reopened";
  }
  LOG(INFO) << "ferry_server: " << strsignal(signal) << ", shutting down";
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  const size_t cut = (*server)->Shutdown(drain);
  if (cut > 0) {
    LOG(WARNING) << "ferry_server: " << cut << " connections were still sending after "
                 << absl::FormatDuration(drain) << " and were cut";
  }
  LOG(INFO) << "ferry_server: stopped";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Serves shuffle blocks over a gRPC control plane and a "
                               "zero-copy data plane.");
  ferry::ParseFlags(argc, argv);
  const std::string level = absl::GetFlag(FLAGS_log_level);
  if (level != "info" && level != "warning" && level != "error") {
    std::fprintf(stderr, "ferry_server: --log-level must be info, warning or error, not '%s'\n",
                 level.c_str());
    return 2;
  }
  if (!OpenLogFile()) return 2;
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = level == "info" ? google::GLOG_INFO
                      : level == "warning" ? google::GLOG_WARNING
                                           : google::GLOG_ERROR;
  return Main();
}
