#include "server/dataplane/data_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/io/ops.h"
#include "common/net_address.h"
#include "common/option_check.h"
#include "common/status_macros.h"

namespace ferry {

namespace {

absl::StatusOr<UniqueFd> BindListener(const DataServer::Listener& l) {
  absl::StatusOr<SocketAddress> addr = SocketAddress::Numeric(l.host, l.port);
  absl::StatusOr<UniqueFd> fd = addr.ok() ? Listen(*addr, 4096) : addr.status();
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat(l.origin.empty() ? "data plane" : l.origin,
                                                         ": ", fd.status().message()));
  }
  return fd;
}

uint16_t LocalPort(int fd) {
  absl::StatusOr<SocketAddress> local = SocketAddress::LocalOf(fd);
  return local.ok() ? local->port() : 0;
}

}  // namespace

absl::Status DataServerOptions::Validate() const {
  FERRY_RETURN_IF_ERROR(
      CheckRange("threads", static_cast<uint64_t>(std::max(threads, 0)), 1, 4096));
  FERRY_RETURN_IF_ERROR(CheckRange("max-connections", max_connections, 1, kMaxLimit));
  FERRY_RETURN_IF_ERROR(
      CheckRange("max-connections-per-client", max_connections_per_client, 1, kMaxLimit));
  FERRY_RETURN_IF_ERROR(CheckRange("max-iowq-workers", max_iowq_workers, 0, 1 << 16));
  FERRY_RETURN_IF_ERROR(CheckRange("pipe-size", pipe_bytes, 4096, uint64_t{1} << 30));
  FERRY_RETURN_IF_ERROR(CheckRange("max-pipes", max_pipes, 0, 1 << 20));
  // At least one connection's base buffer.
  FERRY_RETURN_IF_ERROR(
      CheckRange("max-request-buffer-bytes", max_request_buffer_bytes, 4096, kMaxLimit));
  if (idle_poll < absl::ZeroDuration() || idle_poll > absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("--idle-poll must be between 0 and 1ms, not ",
                                                   absl::FormatDuration(idle_poll)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DataServer>> DataServer::Start(const DataServerOptions& options,
                                                              std::vector<Listener> listeners,
                                                              DiskReader* disks) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  SchedulerOptions scheduler_options;
  scheduler_options.max_bounded_workers = options.max_iowq_workers;
  scheduler_options.max_unbounded_workers = options.max_iowq_workers;
  scheduler_options.idle_poll = options.idle_poll;
  std::unique_ptr<DataServer> server(new DataServer(options));
  for (Listener& l : listeners) {
    UniqueFd fd = std::move(l.inherited);
    if (!fd.valid()) {
      FERRY_ASSIGN_OR_RETURN(fd, BindListener(l));
    }
    const uint16_t port = LocalPort(fd.get());
    server->listeners_.push_back(Bound{std::move(l), std::move(fd), port});
  }
  for (int i = 0; i < options.threads; ++i) {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<FiberScheduler> scheduler,
                           FiberScheduler::Create(scheduler_options));
    server->schedulers_.push_back(std::move(scheduler));
  }
  server->live_.resize(server->schedulers_.size());
  server->accept_ops_.assign(server->schedulers_.size(),
                             std::vector<IoOp*>(server->listeners_.size(), nullptr));
  server->accept_loops_ = server->schedulers_.size() * server->listeners_.size();
  server->thread_open_ = std::make_unique<std::atomic<uint64_t>[]>(server->schedulers_.size());
  server->metrics_ = std::make_unique<ThreadMetrics[]>(server->schedulers_.size());
  const size_t threads = server->schedulers_.size();
  const size_t pipes = options.max_pipes > 0
                           ? options.max_pipes
                           : PipeBudget(options.pipe_bytes, DataServerOptions::kMaxPipes);
  for (size_t i = 0; i < threads; ++i) {
    server->pipes_.push_back(
        std::make_unique<PipePool>(std::max<size_t>(1, pipes / threads), options.pipe_bytes));
  }
  server->disks_ = disks;
  for (size_t i = 0; i < server->schedulers_.size(); ++i) {
    server->threads_.emplace_back([s = server.get(), i] { s->RunThread(i); });
  }
  return server;
}

void DataServer::RunThread(size_t i) {
  // splice(2) into a socket whose peer is gone raises SIGPIPE, and unlike send() it has
  // no MSG_NOSIGNAL. The signal is sent to the thread that made the call, so blocking it
  // here keeps a vanished client from killing the process (the call still fails with
  // EPIPE, which the connection handles) without touching other threads' signals.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);

  for (size_t l = 0; l < listeners_.size(); ++l) {
    (void)schedulers_[i]->Spawn([this, i, l] { AcceptLoop(i, l); });
  }
  schedulers_[i]->RunUntilStopped();
}

void DataServer::AcceptLoop(size_t i, size_t l) {
  FiberScheduler* scheduler = schedulers_[i].get();
  const Bound& bound = listeners_[l];
  const int listener = bound.fd.get();
  while (!scheduler->stopping() && !paused_.load(std::memory_order_acquire)) {
    IoOp accept;
    PrepAccept(accept, listener, nullptr, nullptr, SOCK_CLOEXEC);
    accept_ops_[i][l] = &accept;
    const int fd = accept.Wait();
    accept_ops_[i][l] = nullptr;
    if (fd == -ECANCELED) break;
    if (draining_.load(std::memory_order_relaxed)) {
      // Drain() shut the listener down, which ends the accept with EINVAL. A
      // connection that won the race is closed unserved; its client retries.
      if (fd >= 0) ::close(fd);
      break;
    }
    if (fd == -EMFILE || fd == -ENFILE || fd == -ENOBUFS || fd == -ENOMEM) {
      // Out of descriptors or memory: back off instead of spinning on the error;
      // pending connections wait in the backlog.
      (void)Sleep(absl::Milliseconds(10));
      continue;
    }
    if (fd < 0) continue;  // the connection died in the backlog (ECONNABORTED, ...)
    UniqueFd conn(fd);
    stats_.accepted.Add();
    absl::StatusOr<SocketAddress> peer = SocketAddress::PeerOf(conn.get());
    if (!peer.ok()) continue;  // gone already
    (void)Dispatch(i, l, peer->host(), std::move(conn), std::nullopt);
  }
  accept_loops_.fetch_sub(1, std::memory_order_acq_rel);
}

bool DataServer::Dispatch(std::optional<size_t> from, size_t l, std::string client, UniqueFd conn,
                          std::optional<std::string> resumed) {
  if (std::string refusal; !Admit(client, &refusal)) {
    stats_.refused.Add();
    // Told, not dropped, where the protocol can say it: the client sees a retryable
    // error. The bytes fit in an empty socket buffer, so a non-blocking send either
    // goes out whole or not at all.
    if (const Listener& listener = listeners_[l].listener; listener.refusal) {
      const std::string busy = listener.refusal(absl::ResourceExhaustedError(refusal));
      (void)::send(conn.get(), busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    return false;
  }
  // The thread serving the fewest connections takes it; this one on a tie. The
  // counts may be a moment stale, which only makes the balance approximate.
  size_t target = from.value_or(0);
  for (size_t t = 0; t < schedulers_.size(); ++t) {
    if (thread_open_[t].load(std::memory_order_relaxed) <
        thread_open_[target].load(std::memory_order_relaxed)) {
      target = t;
    }
  }
  thread_open_[target].fetch_add(1, std::memory_order_relaxed);
  if (target != from) {
    schedulers_[target]->Post([h = Handoff(this, target, std::move(client), l, std::move(conn),
                                           std::move(resumed))]() mutable {
      h.server->Serve(h.thread, h.client, h.listener, std::move(h.conn), std::move(h.resumed));
    });
    return true;
  }
  absl::Status spawned = schedulers_[target]->Spawn(
      [this, target, client, l, c = std::move(conn), r = std::move(resumed)]() mutable {
        Serve(target, client, l, std::move(c), std::move(r));
      });
  // Without a stack the connection cannot be served; its descriptor closed with the
  // failed closure, which the peer sees as a reset.
  if (!spawned.ok()) Uncount(target, client);
  return spawned.ok();
}

bool DataServer::Admit(const std::string& client, std::string* refusal) {
  if (open_.fetch_add(1, std::memory_order_relaxed) >= options_.max_connections) {
    open_.fetch_sub(1, std::memory_order_relaxed);
    *refusal =
        absl::StrCat("server busy: ", options_.max_connections, " connections open; retry later");
    return false;
  }
  absl::MutexLock lock(&clients_mu_);
  size_t& mine = per_client_[client];
  if (mine >= options_.max_connections_per_client) {
    open_.fetch_sub(1, std::memory_order_relaxed);
    *refusal = absl::StrCat("server busy: ", options_.max_connections_per_client,
                            " connections open from ", client, "; retry later");
    return false;
  }
  ++mine;
  return true;
}

void DataServer::Serve(size_t thread, const std::string& client, size_t l, UniqueFd conn,
                       std::optional<std::string> resumed) {
  ConnectionControl control{.fd = conn.get(),
                            .draining = &draining_,
                            .handing_over = &handing_over_,
                            .resumed = std::move(resumed),
                            .metrics = &metrics_[thread],
                            .request_buffers = &request_buffers_,
                            .pipes = pipes_[thread].get(),
                            .disks = disks_};
  live_[thread].insert(&control);
  listeners_[l].listener.handler(std::move(conn), control);
  live_[thread].erase(&control);
  if (control.released.valid()) {
    absl::MutexLock lock(&released_mu_);
    released_.push_back(HandedConnection{.plane = listeners_[l].listener.name,
                                         .socket = std::move(control.released),
                                         .state = std::move(control.released_state)});
  }
  Uncount(thread, client);
}

size_t DataServer::Adopt(std::vector<HandedConnection> connections) {
  size_t adopted = 0;
  for (HandedConnection& handed : connections) {
    size_t l = 0;
    while (l < listeners_.size() && listeners_[l].listener.name != handed.plane) ++l;
    absl::StatusOr<SocketAddress> peer = SocketAddress::PeerOf(handed.socket.get());
    if (l == listeners_.size() || !peer.ok()) continue;  // closed: no such door, or gone
    adopted +=
        Dispatch(std::nullopt, l, peer->host(), std::move(handed.socket), std::move(handed.state));
  }
  return adopted;
}

void DataServer::Uncount(size_t thread, const std::string& client) {
  thread_open_[thread].fetch_sub(1, std::memory_order_relaxed);
  open_.fetch_sub(1, std::memory_order_relaxed);
  absl::MutexLock lock(&clients_mu_);
  auto it = per_client_.find(client);
  if (--it->second == 0) per_client_.erase(it);
}

std::vector<uint64_t> DataServer::connections_per_thread() const {
  std::vector<uint64_t> counts;
  for (size_t t = 0; t < schedulers_.size(); ++t) {
    counts.push_back(thread_open_[t].load(std::memory_order_relaxed));
  }
  return counts;
}

void DataServer::AppendMetrics(const std::string& mode,
                               std::vector<MetricFamilySamples>* out) const {
  std::vector<const ThreadMetrics*> threads;
  for (size_t t = 0; t < schedulers_.size(); ++t) threads.push_back(&metrics_[t]);
  AppendThreadMetrics(threads, mode, out);
  FERRY_APPEND_STATS(FERRY_DATA_PLANE_STATS, {&stats_}, out);
  std::vector<const PipePool*> pools;
  for (const auto& pool : pipes_) pools.push_back(pool.get());
  PipePool::AppendMetrics(pools, out);
}

DataServer::DrainReport DataServer::Drain(absl::Duration grace) {
  draining_.store(true, std::memory_order_relaxed);
  // shutdown() on a listening socket takes it out of the port (connections still in its
  // backlog are reset) and wakes every thread's pending accept with EINVAL. Paused for a
  // hand-over, the sockets may be another server's too: left as they are.
  if (!paused_.load(std::memory_order_acquire)) {
    for (const Bound& l : listeners_) ::shutdown(l.fd.get(), SHUT_RDWR);
  }
  DrainReport report = DrainConnections(grace);
  Stop();
  return report;
}

DataServer::HandOverReport DataServer::HandOverConnections(absl::Duration grace) {
  HandOverReport report;
  report.drained = EndConnections(grace, /*hand_over=*/true);
  absl::MutexLock lock(&released_mu_);
  report.released = std::move(released_);
  released_.clear();
  return report;
}

DataServer::DrainReport DataServer::EndConnections(absl::Duration grace, bool hand_over) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + grace;
  (hand_over ? handing_over_ : draining_).store(true, std::memory_order_relaxed);
  // Shared with the closures posted to the threads, which may run after a wait here
  // gives up.
  struct Counts {
    std::atomic<size_t> idle{0};
    std::atomic<size_t> busy{0};
    std::atomic<size_t> threads_done{0};
  };
  auto counts = std::make_shared<Counts>();
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    schedulers_[i]->Post([this, i, counts, hand_over] {
      // Idle connections wait for a request that must not be served now: end the wait
      // with EOF, or, handing over, by cancelling it (the socket goes on). Busy ones see
      // draining_ or handing_over_ when their request is done; so do those whose next
      // request has arrived and is not read yet (FIONREAD), which a drain answers.
      for (ConnectionControl* c : live_[i]) {
        int unread = 0;
        if (!c->serving && (hand_over || ::ioctl(c->fd, FIONREAD, &unread) != 0 || unread == 0)) {
          if (hand_over) {
            schedulers_[i]->CancelOpsOn(c->fd);
          } else {
            ::shutdown(c->fd, SHUT_RD);
          }
          counts->idle.fetch_add(1, std::memory_order_relaxed);
        } else {
          counts->busy.fetch_add(1, std::memory_order_relaxed);
        }
      }
      counts->threads_done.fetch_add(1, std::memory_order_release);
    });
  }
  // Bounded by `grace`: polling the counter keeps the connections' path free of any
  // wake-up bookkeeping for a once-per-process event.
  const auto wait = [&](const std::atomic<size_t>& threads_done, absl::Time until) {
    while ((open_.load(std::memory_order_relaxed) > 0 ||
            threads_done.load(std::memory_order_acquire) < schedulers_.size()) &&
           absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  if (!hand_over) wait(counts->threads_done, deadline);
  // Handing over, a connection woken between two waits of its own (an idle poll, a
  // request that came in) waits again: those waiting are woken again every 5 ms.
  while (hand_over) {
    wait(counts->threads_done, std::min(absl::Now() + absl::Milliseconds(5), deadline));
    if (absl::Now() >= deadline ||
        (open_.load(std::memory_order_relaxed) == 0 &&
         counts->threads_done.load(std::memory_order_acquire) == schedulers_.size())) {
      break;
    }
    for (size_t i = 0; i < schedulers_.size(); ++i) {
      schedulers_[i]->Post([this, i] {
        for (ConnectionControl* c : live_[i]) {
          if (!c->serving) schedulers_[i]->CancelOpsOn(c->fd);
        }
      });
    }
  }
  DrainReport report;
  report.cut = open_.load(std::memory_order_relaxed);
  if (report.cut > 0 && paused_.load(std::memory_order_relaxed)) {
    // A hand-over, which no Stop() follows: what is still busy is cut here.
    auto cut = std::make_shared<std::atomic<size_t>>(0);
    for (size_t i = 0; i < schedulers_.size(); ++i) {
      schedulers_[i]->Post([this, i, cut] {
        for (ConnectionControl* c : live_[i]) ::shutdown(c->fd, SHUT_RDWR);
        cut->fetch_add(1, std::memory_order_release);
      });
    }
    wait(*cut, absl::Now() + absl::Seconds(5));
  }
  report.idle = counts->idle.load(std::memory_order_relaxed);
  const size_t busy = counts->busy.load(std::memory_order_relaxed);
  report.finished = busy > report.cut ? busy - report.cut : 0;
  report.took = absl::Now() - start;
  return report;
}

void DataServer::PauseAccepting() {
  paused_.store(true, std::memory_order_release);
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    schedulers_[i]->Post([this, i] {
      for (IoOp* accept : accept_ops_[i]) {
        if (accept != nullptr) accept->Cancel();
      }
    });
  }
  // Each loop ends at once when its accept is cancelled; bounded in case a thread is
  // stuck elsewhere.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (accept_loops_.load(std::memory_order_acquire) > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::StatusOr<std::vector<UniqueFd>> DataServer::Listeners() const {
  std::vector<UniqueFd> out;
  for (const Bound& l : listeners_) {
    UniqueFd copy(::fcntl(l.fd.get(), F_DUPFD_CLOEXEC, 0));
    if (!copy.valid()) return absl::ErrnoToStatus(errno, "duplicate a listening socket");
    out.push_back(std::move(copy));
  }
  return out;
}

void DataServer::ResumeAccepting() {
  draining_.store(false, std::memory_order_relaxed);
  handing_over_.store(false, std::memory_order_relaxed);
  paused_.store(false, std::memory_order_release);
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    for (size_t l = 0; l < listeners_.size(); ++l) {
      accept_loops_.fetch_add(1, std::memory_order_acq_rel);
      schedulers_[i]->Post([this, i, l] {
        if (!schedulers_[i]->Spawn([this, i, l] { AcceptLoop(i, l); }).ok()) {
          accept_loops_.fetch_sub(1, std::memory_order_acq_rel);
        }
      });
    }
  }
}

void DataServer::Stop() {
  for (auto& s : schedulers_) s->Stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  // Close the listeners too, so the ports are free for a restarted server at once.
  for (Bound& l : listeners_) l.fd.Reset();
}

DataServer::~DataServer() { Stop(); }

}  // namespace ferry
