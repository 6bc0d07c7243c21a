// The data plane's flags: its threads (DataServerOptions) and each connection's
// sending (ConnectionOptions). common/option_flags.h says how they bind.
#include <algorithm>
#include <thread>

#include "common/option_flags.h"
#include "server/dataplane/data_server.h"
#include "server/dataplane/segment_sender.h"

namespace ferry {
namespace {

absl::Status SetThreads(int threads, DataServerOptions& options) {
  if (threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be 0 (one per core) or more, not ", threads));
  }
  options.threads =
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return absl::OkStatus();
}

}  // namespace
}  // namespace ferry

FERRY_OPTION_FLAG_FN(ferry::DataServerOptions, int, threads, 0,
                     "Data-plane threads; 0 means one per core.", ferry::SetThreads);
FERRY_OPTION_FLAG(ferry::DataServerOptions, max_connections, max_connections,
                  "Data-plane connections served at once; more get a RESOURCE_EXHAUSTED error "
                  "frame. Lowered at start when the open-file limit cannot hold them.");
FERRY_OPTION_FLAG(ferry::DataServerOptions, max_connections_per_client, max_connections_per_client,
                  "Data-plane connections served at once from one client address.");
FERRY_OPTION_FLAG(ferry::DataServerOptions, max_request_buffer_bytes, max_request_buffer_bytes,
                  "Bytes all data-plane connections' request buffers may hold past their "
                  "first 4 KiB, and secured connections' sealed bytes (TLS, SASL auth-conf, "
                  "the AuthEngine; 240 KiB each with TLS); a connection past it is refused.");
FERRY_OPTION_FLAG(ferry::DataServerOptions, max_iowq_workers, max_iowq_workers,
                  "Cap on each data-plane ring's io-wq workers, bounded and unbounded (0: "
                  "kernel default).");
FERRY_OPTION_FLAG(ferry::DataServerOptions, idle_poll, idle_poll,
                  "How long an idle data-plane thread polls for work before it sleeps (0: at "
                  "once; at most 1ms). Faster one-block-per-round-trip fetches, for CPU while "
                  "polling.");
FERRY_OPTION_FLAG(ferry::DataServerOptions, pipe_size, pipe_bytes,
                  "Capacity in bytes of each splice pipe (the threads pool them: --max-pipes).");
FERRY_OPTION_FLAG(ferry::DataServerOptions, max_pipes, max_pipes,
                  "Splice pipes the data-plane threads hold in all; 0: as many as the service "
                  "user's pipe budget (fs.pipe-user-pages-soft) allows. A segment waits for one "
                  "when all are in use.");

FERRY_OPTION_FLAG(ferry::ConnectionOptions, mode, mode,
                  "Data-plane mode: splice (file -> pipe -> socket, zero copy) or copy (read, "
                  "then send; the baseline).");
FERRY_OPTION_FLAG(ferry::ConnectionOptions, io_engine, engine,
                  "inline: direct non-blocking syscalls, io_uring polls when a socket is full or "
                  "empty; uring: every operation an io_uring request (splice runs on io-wq).");
FERRY_OPTION_FLAG(ferry::ConnectionOptions, copy_buffer_size, copy_buffer_bytes,
                  "Copy-mode buffer in bytes per connection.");
FERRY_OPTION_FLAG(ferry::ConnectionOptions, first_request_timeout, first_request_timeout,
                  "Close a new data connection whose first request has not arrived within this.");
FERRY_OPTION_FLAG(ferry::ConnectionOptions, idle_timeout, idle_timeout,
                  "Close a data connection that sends no request for this long.");
FERRY_OPTION_FLAG(ferry::ConnectionOptions, io_timeout, io_timeout,
                  "Drop a data connection whose peer accepts no bytes for this long.");
