// DataServer: the data plane's threads. Each thread runs its own FiberScheduler and
// accepts from every listening socket (one per front door: Ferry's protocol, Spark's);
// whichever thread's accept the kernel wakes hands the connection to the thread serving
// the fewest (a Post() to its scheduler when that is another thread), and from then on
// nothing on the per-block path is shared. Every connection is served by its own fiber,
// running the handler of the listener that accepted it: the handler knows the protocol
// (Ferry's is ServeFerryConnection in ferry_protocol.h, Spark's ServeSparkConnection in
// server/spark/spark_protocol.h), the DataServer only the sockets. The connection limits hold
// across all listeners.
#ifndef FERRY_SERVER_DATAPLANE_DATA_SERVER_H_
#define FERRY_SERVER_DATAPLANE_DATA_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/io/scheduler.h"
#include "common/unique_fd.h"
#include "server/dataplane/connection_core.h"
#include "server/dataplane/pipe_pool.h"
#include "server/ops/client_budget.h"
#include "server/ops/hand_over.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/storage/disk_reader.h"

namespace ferry {

struct DataServerOptions {
  // Threads, each with its own FiberScheduler and ring.
  int threads = 1;
  // Connections served at once, across threads and listeners. One more is told so in
  // its listener's protocol (Listener::refusal) and closed.
  size_t max_connections = 10000;
  // Of those, connections from one client address (any port).
  size_t max_connections_per_client = 1024;
  // Request bytes all connections' buffers together may hold past their first
  // ConnectionCore::kBaseBufferBytes (only Spark's frames grow them), and what secured
  // connections (TLS, SASL auth-conf, the AuthEngine) hold for their sealed bytes,
  // ConnectionCore::SecuredBytes each (240 KiB with TLS): about 4,000 TLS connections.
  uint64_t max_request_buffer_bytes = uint64_t{1} << 30;
  // Caps on each ring's io-wq workers, bounded and unbounded (0: the kernel's
  // default). The uring engine's splices run there, one blocked worker per connection
  // with a full socket.
  unsigned max_iowq_workers = 64;
  // How long an idle thread polls for completions before it sleeps (at most 1 ms).
  absl::Duration idle_poll = absl::ZeroDuration();
  // Each splice pipe's capacity, and how many the threads hold in all, split evenly
  // (0: what the user's pipe budget allows, PipeBudget, at most kMaxPipes; the server's
  // descriptor plan sets it).
  size_t pipe_bytes = size_t{1} << 20;
  size_t max_pipes = 0;
  static constexpr size_t kMaxPipes = 1024;

  // INVALID_ARGUMENT naming the flag of a field out of range.
  absl::Status Validate() const;
};

// The data plane's own metric families (docs/operations.md); its threads' counters and
// pipes append theirs.
#define FERRY_DATA_PLANE_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                          \
  READ("ferry_connections_open", "Data-plane connections being served, both front doors.", kGauge, \
       connections_open())                                                                         \
  COUNTER(accepted, "ferry_connections_accepted_total", "Data-plane connections accepted.")        \
  COUNTER(refused, "ferry_connections_refused_total",                                              \
          "Data-plane connections turned away over --max-connections or "                          \
          "--max-connections-per-client.")                                                         \
  READ("ferry_io_worker_threads", "io_uring worker threads (io-wq) of the process.", kGauge,       \
       IoWorkerThreads())                                                                          \
  READ("ferry_draining", "1 from the start of a drain (SIGTERM) on.", kGauge, draining() ? 1 : 0)

class DataServer {
 public:
  // Serves one accepted connection on a fiber until it ends; the control is the
  // server's view of it (drain), valid for the call.
  using Handler = std::function<void(UniqueFd socket, ConnectionControl& control)>;

  struct Listener {
    // IPv4 or IPv6 address to listen on; port 0 lets the kernel choose (read it from
    // port()).
    std::string host = "127.0.0.1";
    uint16_t port = 0;
    // What set the address, first in an error about it ("--data-address").
    std::string origin;
    // What a hand-over calls the listener and its connections ("data", "spark").
    std::string name;
    // Serves the listener's connections; must outlive the server's threads.
    Handler handler;
    // The bytes that tell a connection over the limits why it is closed (the
    // protocol's error for the status), sent if they fit at once. Null: closed untold.
    std::function<std::string(const absl::Status&)> refusal;
    // A listening socket to serve instead of binding host:port: one a server handing
    // over gave this one (its port and backlog kept).
    UniqueFd inherited;
  };

  // Binds every listener, then starts the threads. `disks` reads what the page cache
  // does not hold for every connection; it must outlive the server.
  static absl::StatusOr<std::unique_ptr<DataServer>> Start(const DataServerOptions& options,
                                                           std::vector<Listener> listeners,
                                                           DiskReader* disks);
  DataServer(const DataServer&) = delete;
  DataServer& operator=(const DataServer&) = delete;
  ~DataServer();

  // The bound port of listener `i`, in the order given to Start().
  uint16_t port(size_t i = 0) const { return listeners_[i].port; }
  const DataServerOptions& options() const { return options_; }
  uint64_t connections_accepted() const { return stats_.accepted.value(); }
  // Connections being served now, and those turned away as over the limit.
  uint64_t connections_open() const { return open_.load(std::memory_order_relaxed); }
  uint64_t connections_refused() const { return stats_.refused.value(); }
  // Connections being served now by each thread.
  std::vector<uint64_t> connections_per_thread() const;
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  // The data plane's metric families (docs/operations.md): what its threads sent and
  // answered (labelled with `mode`, the connections' data-plane mode), its connections,
  // splice pipes and io-wq workers, and whether it drains.
  void AppendMetrics(const std::string& mode, std::vector<MetricFamilySamples>* out) const;

  // What a drain did, for the log line that ends a process.
  struct DrainReport {
    size_t idle = 0;      // connections waiting for a request, closed at once
    size_t finished = 0;  // busy ones that finished what they had received
    size_t cut = 0;       // busy ones still sending at the deadline, cut
    absl::Duration took;
  };
  // A graceful stop: stops accepting (the listeners leave the port, so new connections
  // are refused), closes idle connections, and lets each busy one finish the requests
  // it has already received, then Stop()s. Connections still busy after `grace` are cut.
  // Call from outside the server's threads, once.
  DrainReport Drain(absl::Duration grace);

  // A hand-over to another server: PauseAccepting() stops accepting, keeping the
  // listeners (their ports and backlogs) open; returns once no thread accepts.
  // HandOverConnections() then releases the connections: each one waiting for a
  // request with nothing of one read, or busy and then so, leaves its fiber with its
  // protocol's state (ConnectionCore::HandOverState); one sealed by a security layer
  // closes when idle, as in Drain(), and one still busy after `grace` is cut.
  // Listeners() gives duplicates of the listening sockets, in Start()'s order.
  // ResumeAccepting() serves again (the other server failed before serving), and
  // Adopt() takes back what was released. Call from outside the server's threads.
  void PauseAccepting();
  struct HandOverReport {
    DrainReport drained;  // `idle`: waiting for a request when it began
    std::vector<HandedConnection> released;
  };
  HandOverReport HandOverConnections(absl::Duration grace);
  absl::StatusOr<std::vector<UniqueFd>> Listeners() const;
  void ResumeAccepting();
  // Serves connections another server handed over (or this one released), each as if
  // its plane's listener had accepted it, from the state its protocol gave. One whose
  // plane has no listener here, or over the connection limits, is closed. Returns how
  // many are served. Thread-safe.
  size_t Adopt(std::vector<HandedConnection> connections);

  // Stops accepting, cancels every connection's pending I/O, waits for the threads.
  // Idempotent.
  void Stop();

 private:
  struct Bound {
    Listener listener;
    UniqueFd fd;
    uint16_t port = 0;
  };
  explicit DataServer(const DataServerOptions& options)
      : options_(options),
        request_buffers_(options.max_request_buffer_bytes, options.max_request_buffer_bytes,
                         "request bytes in connections' buffers") {}
  void RunThread(size_t i);
  // Thread i's loop accepting from listener l.
  void AcceptLoop(size_t i, size_t l);
  // Ends the connections (Drain, DrainConnections) or releases them (HandOverConnections).
  DrainReport EndConnections(absl::Duration grace, bool hand_over);
  DrainReport DrainConnections(absl::Duration grace) { return EndConnections(grace, false); }
  // Counts a new connection from `client` against both connection limits; false
  // (nothing counted) with the reason in `refusal` when one is reached.
  bool Admit(const std::string& client, std::string* refusal);
  // Serves `conn` with listener `l`'s handler on thread `thread`, from a fiber there
  // (`resumed`: its state from a hand-over); the connection is already counted (Admit)
  // and in thread_open_[thread].
  void Serve(size_t thread, const std::string& client, size_t l, UniqueFd conn,
             std::optional<std::string> resumed = std::nullopt);
  // Counts `conn` from `client` (Admit) on the thread serving the fewest and serves it
  // there; `from` is the calling thread (none: outside the server's threads). Over the
  // limits it is told so (the listener's refusal) and closed: false.
  bool Dispatch(std::optional<size_t> from, size_t l, std::string client, UniqueFd conn,
                std::optional<std::string> resumed);
  // Takes a counted connection out of the counts without serving it.
  void Uncount(size_t thread, const std::string& client);

  // A counted connection on its way to another thread's scheduler. Dropped unserved (no
  // fiber stack there, or the scheduler destroyed first), it closes the connection and
  // takes it out of the counts.
  struct Handoff {
    DataServer* server;
    size_t thread;
    std::string client;
    size_t listener;
    UniqueFd conn;
    std::optional<std::string> resumed;
    Handoff(DataServer* s, size_t t, std::string a, size_t l, UniqueFd c,
            std::optional<std::string> r)
        : server(s),
          thread(t),
          client(std::move(a)),
          listener(l),
          conn(std::move(c)),
          resumed(std::move(r)) {}
    Handoff(Handoff&&) = default;
    Handoff& operator=(Handoff&&) = delete;
    ~Handoff() {
      if (conn.valid()) server->Uncount(thread, client);
    }
  };

  DataServerOptions options_;
  std::vector<Bound> listeners_;
  // The counters come before the schedulers: a Handoff destroyed with a scheduler's
  // pending work still updates them.
  std::atomic<bool> draining_{false};
  // Set by HandOverConnections(): connections release themselves (ConnectionControl).
  std::atomic<bool> handing_over_{false};
  // The connections that released themselves, by Serve() on the threads.
  absl::Mutex released_mu_;
  std::vector<HandedConnection> released_ ABSL_GUARDED_BY(released_mu_);
  // Set by PauseAccepting(): each accept loop ends at its next turn. Its pending accept
  // is cancelled (accept_ops_) and accept_loops_ counts those still running.
  std::atomic<bool> paused_{false};
  std::atomic<size_t> accept_loops_{0};
  // Per thread, per listener: the accept in flight, or null. Touched only on that thread.
  std::vector<std::vector<IoOp*>> accept_ops_;
  std::atomic<uint64_t> open_{0};  // admission reads it back: not a Gauge
  struct Stats {
    FERRY_STATS_FIELDS(FERRY_DATA_PLANE_STATS)
  };
  Stats stats_;
  ClientBudget request_buffers_;
  // Open connections by client address (numeric, without the port); touched only when
  // a connection is accepted or closed.
  absl::Mutex clients_mu_;
  absl::flat_hash_map<std::string, size_t> per_client_ ABSL_GUARDED_BY(clients_mu_);
  // Per thread: connections it serves now. An accepted connection goes to the thread
  // serving the fewest, whichever listener the kernel gave it to.
  std::unique_ptr<std::atomic<uint64_t>[]> thread_open_;
  // Per thread: its counters, written only by it, and its pipes.
  std::unique_ptr<ThreadMetrics[]> metrics_;
  std::vector<std::unique_ptr<PipePool>> pipes_;
  DiskReader* disks_ = nullptr;
  std::vector<std::unique_ptr<FiberScheduler>> schedulers_;
  std::vector<std::thread> threads_;
  // Per thread: its live connections. Touched only on that thread.
  std::vector<absl::flat_hash_set<ConnectionControl*>> live_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_DATA_SERVER_H_
