#include "client/shuffle_client.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "client/block_fetcher.h"
#include "common/control_plane.h"
#include "common/net_address.h"
#include "common/io/scheduler.h"

namespace ferry {

absl::StatusOr<std::string> ResolveHost(const std::string& address) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<SocketAddress> resolved = SocketAddress::Resolve(parsed->host, parsed->port);
  if (!resolved.ok()) return resolved.status();
  return resolved->host();
}


absl::Status ShuffleClient::FetchRound(const std::string& app_id,
                                       const std::vector<BlockLocation>& blocks,
                                       const std::vector<size_t>& pending,
                                       const std::vector<std::string>& server_of, BlockSink& sink,
                                       const FetchOptions& options, std::vector<bool>& done,
                                       bool* retryable, FetchStats& stats) {
  *retryable = true;
  absl::Status first_error;
  auto fail = [&](const absl::Status& s, bool retry_helps) {
    if (!retry_helps) *retryable = false;
    if (first_error.ok()) first_error = s;
  };
  auto fail_status = [&](const absl::Status& s) { fail(s, IsRetryable(s)); };
  std::vector<StreamPlan> plans;
  for (auto& [server, indexes] : PlanStreams(blocks, pending, server_of)) {
    std::vector<BlockId> refs;
    refs.reserve(indexes.size());
    for (size_t i : indexes) refs.push_back(blocks[i].block);
    absl::StatusOr<ferry::v1::StreamHandle> handle = control_.OpenStream(server, app_id, refs, options.spark_exec_id);
    if (!handle.ok()) {
      fail_status(handle.status());
      continue;  // the other servers' blocks can still arrive this round
    }
    StreamPlan plan;
    plan.server = server;
    plan.handle = *std::move(handle);
    plan.caller_index = std::move(indexes);
    plan.data_port = static_cast<uint16_t>(plan.handle.data_port());
    absl::StatusOr<std::string> host =
        plan.handle.data_host().empty()
            ? ResolveHost(server)
            : ResolveHost(FormatHostPort(plan.handle.data_host(), 0));
    if (!host.ok()) {
      (void)control_.CloseStream(server, plan.handle.ticket());
      fail_status(host.status());
      continue;
    }
    plan.data_host = *host;
    plans.push_back(std::move(plan));
  }
  // Streams that failed on a checksum mismatch, diagnosed once the round is over.
  struct Corrupt {
    const StreamPlan* plan;
    StreamProgress progress;
    absl::Status status;
  };
  std::vector<Corrupt> corrupt;
  if (!plans.empty() && (first_error.ok() || *retryable)) {
    absl::StatusOr<std::unique_ptr<FiberScheduler>> scheduler = FiberScheduler::Create();
    if (!scheduler.ok()) {
      fail_status(scheduler.status());
    } else {
      FetchStreamOptions stream_options;
      stream_options.verify_checksums = options.verify_checksums;
      stream_options.io_timeout = options.io_timeout;
      stream_options.max_bytes_in_flight =
          std::max<uint64_t>(1, options.max_bytes_in_flight / plans.size());
      FiberScheduler* s = scheduler->get();
      for (const StreamPlan& plan : plans) {
        absl::Status spawned = s->Spawn([&, s] {
          StreamProgress progress;
          absl::Status result = FetchStream(plan, sink, stream_options, &progress);
          for (size_t k = 0; k < progress.whole_blocks; ++k) {
            done[plan.caller_index[k]] = true;
            stats.bytes += plan.handle.blocks(static_cast<int>(k)).length();
          }
          if (result.ok()) return;
          if (progress.corrupt_partition.has_value()) {
            // Whether a refetch can help is for the server to say, after the round.
            corrupt.push_back({&plan, progress, result});
            return;
          }
          // A fatal error ends the fetch: cancel the other servers' I/O. A retryable one
          // leaves the other servers running; their blocks count.
          if (!IsRetryable(result)) s->Stop();
          fail_status(result);
        });
        if (!spawned.ok()) fail_status(spawned);
      }
      const absl::Time start = absl::Now();
      s->Run();
      stats.elapsed += absl::Now() - start;
    }
  }
  for (const Corrupt& c : corrupt) {
    // Spark's corruption diagnosis: the server rereads the partition and compares the
    // stored, on-disk and received checksums. Only damage in transfer is worth a refetch.
    absl::StatusOr<ferry::v1::CorruptionDiagnosis> diagnosis =
        control_.DiagnoseCorruption(c.plan->server, app_id, *c.progress.corrupt_partition,
                                    c.progress.corrupt_received_checksum,
                                    options.spark_exec_id);
    const std::string verdict =
        diagnosis.ok() ? diagnosis->explanation()
                       : absl::StrCat("no diagnosis (", diagnosis.status().message(), ")");
    fail(absl::DataLossError(absl::StrCat(c.status.message(), "; ", verdict)),
         diagnosis.ok() && diagnosis->cause() == ferry::v1::CAUSE_TRANSFER);
  }
  for (const StreamPlan& plan : plans) {
    (void)control_.CloseStream(plan.server, plan.handle.ticket());
  }
  stats.servers = std::max(stats.servers, plans.size());
  return first_error;
}

absl::StatusOr<FetchStats> ShuffleClient::Fetch(const std::string& app_id,
                                                const std::vector<BlockLocation>& blocks,
                                                BlockSink& sink, const FetchOptions& options) {
  FetchStats stats;
  std::vector<bool> done(blocks.size(), false);
  std::vector<std::string> server_of(blocks.size());
  Backoff backoff(options.retry_backoff, options.max_retry_backoff);
  absl::BitGen jitter;
  absl::Status status;
  const int attempts = std::max(1, options.max_attempts);
  // A busy server (RESOURCE_EXHAUSTED) asks to be tried again later: such rounds use up
  // no attempt until busy_retry_time has passed. The bound on rounds is a backstop.
  const absl::Time busy_deadline = absl::Now() + options.busy_retry_time;
  int failed_attempts = 0;
  for (int round = 0; round < 10000; ++round) {
    std::vector<size_t> pending;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (done[i]) continue;
      pending.push_back(i);
      server_of[i] = LocationForAttempt(blocks[i], failed_attempts);
    }
    if (pending.empty()) {
      status = absl::OkStatus();  // everything arrived; an error after the last block is moot
      break;
    }
    if (round > 0) {
      // The calling thread sleeps between rounds: no fiber runs.
      absl::SleepFor(backoff.Next(jitter));
    }
    bool retryable = true;
    status = FetchRound(app_id, blocks, pending, server_of, sink, options, done, &retryable,
                        stats);
    if (status.ok() || !retryable) break;
    const bool busy = absl::IsResourceExhausted(status) && absl::Now() < busy_deadline;
    if (!busy && ++failed_attempts >= attempts) break;
  }
  if (!status.ok()) {
    const size_t missing = static_cast<size_t>(std::count(done.begin(), done.end(), false));
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", missing, " of ", blocks.size(),
                                     " blocks not fetched)"));
  }
  stats.blocks = blocks.size();
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
