#include "client/shuffle_client.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/block_fetcher.h"
#include "common/io/scheduler.h"

namespace ferry {

absl::StatusOr<std::string> ResolveHost(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host == "localhost" || host.empty()) return std::string("127.0.0.1");
  in_addr ipv4;
  if (::inet_pton(AF_INET, host.c_str(), &ipv4) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", ::gai_strerror(rc)));
  }
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(result->ai_addr)->sin_addr, text,
              sizeof(text));
  ::freeaddrinfo(result);
  return std::string(text);
}

absl::StatusOr<FetchStats> ShuffleClient::Fetch(const std::string& app_id,
                                                const std::vector<BlockLocation>& blocks,
                                                BlockSink& sink, const FetchOptions& options) {
  // One stream per server, blocks in the caller's order within each.
  std::map<std::string, std::vector<size_t>> by_server;
  for (size_t i = 0; i < blocks.size(); ++i) by_server[blocks[i].server].push_back(i);

  std::vector<StreamPlan> plans;
  absl::Status status;
  for (auto& [server, indexes] : by_server) {
    std::vector<BlockId> refs;
    refs.reserve(indexes.size());
    for (size_t i : indexes) refs.push_back(blocks[i].block);
    absl::StatusOr<ferry::v1::StreamHandle> handle = control_.OpenStream(server, app_id, refs);
    if (!handle.ok()) {
      status = handle.status();
      break;
    }
    StreamPlan plan;
    plan.server = server;
    plan.handle = *std::move(handle);
    plan.caller_index = std::move(indexes);
    plan.data_port = static_cast<uint16_t>(plan.handle.data_port());
    absl::StatusOr<std::string> host =
        plan.handle.data_host().empty()
            ? ResolveHost(server)
            : ResolveHost(absl::StrCat(plan.handle.data_host(), ":0"));
    plans.push_back(std::move(plan));
    if (!host.ok()) {
      status = host.status();
      break;
    }
    plans.back().data_host = *host;
  }

  FetchStats stats;
  stats.servers = plans.size();
  if (status.ok() && !plans.empty()) {
    absl::StatusOr<std::unique_ptr<FiberScheduler>> scheduler = FiberScheduler::Create();
    if (!scheduler.ok()) {
      status = scheduler.status();
    } else {
      FetchStreamOptions stream_options;
      stream_options.verify_checksums = options.verify_checksums;
      stream_options.io_timeout = options.io_timeout;
      stream_options.max_bytes_in_flight =
          std::max<uint64_t>(1, options.max_bytes_in_flight / plans.size());
      FiberScheduler* s = scheduler->get();
      for (const StreamPlan& plan : plans) {
        absl::Status spawned = s->Spawn([&, s] {
          absl::Status result = FetchStream(plan, sink, stream_options);
          if (!result.ok() && status.ok()) {
            status = result;
            s->Stop();  // the first error ends the fetch: cancel the other servers' I/O
          }
        });
        if (!spawned.ok() && status.ok()) status = spawned;
      }
      const absl::Time start = absl::Now();
      s->Run();
      stats.elapsed = absl::Now() - start;
    }
  }
  for (const StreamPlan& plan : plans) {
    (void)control_.CloseStream(plan.server, plan.handle.ticket());
  }
  if (!status.ok()) return status;
  stats.blocks = blocks.size();
  for (const StreamPlan& plan : plans) {
    for (const auto& info : plan.handle.blocks()) stats.bytes += info.length();
  }
  return stats;
}

absl::StatusOr<std::vector<std::string>> ShuffleClient::FetchToBuffers(
    const std::string& app_id, const std::vector<BlockLocation>& blocks,
    const FetchOptions& options) {
  BuffersSink sink(blocks.size());
  absl::StatusOr<FetchStats> stats = Fetch(app_id, blocks, sink, options);
  if (!stats.ok()) return stats.status();
  return std::move(sink.blocks());
}

}  // namespace ferry
