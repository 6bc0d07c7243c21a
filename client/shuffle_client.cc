#include "client/shuffle_client.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "client/block_fetcher.h"
#include "common/block_id.h"
#include "common/control_plane.h"
#include "common/io/scheduler.h"
#include "common/io/sync.h"
#include "common/net_address.h"
#include "common/status_macros.h"

namespace ferry {

absl::StatusOr<std::string> ResolveHost(const std::string& address) {
  FERRY_ASSIGN_OR_RETURN(HostPort parsed, ParseHostPort(address));
  FERRY_ASSIGN_OR_RETURN(SocketAddress resolved, SocketAddress::Resolve(parsed.host, parsed.port));
  return resolved.host();
}

absl::Status ShuffleClient::FetchRound(FiberScheduler& scheduler, const std::string& app_id,
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
  const std::vector<PlannedStream> planned = PlanStreams(blocks, pending, server_of);
  // Bytes in flight: the total shared evenly among the round's streams, and no more
  // than a server's bound among that server's streams.
  std::map<std::string, size_t> streams_at;
  for (const PlannedStream& p : planned) ++streams_at[p.server];
  // Streams that failed on a checksum mismatch, diagnosed once the round is over.
  struct Corrupt {
    const StreamPlan* plan;
    StreamProgress progress;
    absl::Status status;
  };
  std::vector<Corrupt> corrupt;
  std::vector<StreamPlan> plans(planned.size());
  size_t opened = 0;
  for (size_t k = 0; k < planned.size(); ++k) {
    StreamPlan& plan = plans[k];
    plan.server = planned[k].server;
    plan.caller_index = planned[k].indexes;
    FetchStreamOptions stream_options;
    stream_options.verify_checksums = options.verify_checksums;
    stream_options.io_timeout = options.io_timeout;
    stream_options.max_bytes_in_flight = std::max<uint64_t>(
        1, std::min(options.max_bytes_in_flight / planned.size(),
                    options.max_bytes_in_flight_per_server / streams_at[plan.server]));
    // Each stream on a fiber of its own, from OpenStream to CloseStream: every server is
    // asked at once, and one that is slow to answer holds back only its own blocks.
    absl::Status spawned = scheduler.Spawn([&, stream_options] {
      std::vector<BlockId> refs;
      refs.reserve(plan.caller_index.size());
      for (size_t i : plan.caller_index) refs.push_back(blocks[i].block);
      absl::StatusOr<ferry::v1::StreamHandle> handle =
          AwaitCall<absl::StatusOr<ferry::v1::StreamHandle>>(
              scheduler, [&](absl::AnyInvocable<void(absl::StatusOr<ferry::v1::StreamHandle>)> d) {
                return control_.StartOpenStream(plan.server, app_id, refs, options.spark_exec_id,
                                                std::move(d));
              });
      if (!handle.ok()) {
        fail_status(handle.status());
        return;  // the other servers' blocks can still arrive this round
      }
      plan.handle = *std::move(handle);
      plan.data_port = static_cast<uint16_t>(plan.handle.data_port());
      ++opened;
      absl::StatusOr<std::string> host =
          plan.handle.data_host().empty() ? ResolveHost(plan.server)
                                          : ResolveHost(FormatHostPort(plan.handle.data_host(), 0));
      StreamProgress progress;
      absl::Status result = host.status();
      if (host.ok()) {
        plan.data_host = *host;
        result = FetchStream(plan, sink, stream_options, &progress);
      }
      for (size_t b = 0; b < progress.whole_blocks; ++b) {
        done[plan.caller_index[b]] = true;
        stats.bytes += plan.handle.blocks(static_cast<int>(b)).length();
      }
      // A server that answered is told at once, and waited for, so that its streams are
      // closed when Fetch returns. One that failed may not answer at all: its close is
      // not waited for (the server expires the ticket if it never arrives).
      const bool answered = result.ok() || progress.corrupt_partition.has_value();
      if (answered) {
        (void)AwaitCall<absl::Status>(scheduler, [&](absl::AnyInvocable<void(absl::Status)> d) {
          return control_.StartCloseStream(plan.server, plan.handle.ticket(), std::move(d));
        });
      } else {
        control_.StartCloseStream(plan.server, plan.handle.ticket(), [](absl::Status) {});
      }
      if (result.ok()) return;
      if (progress.corrupt_partition.has_value()) {
        // Whether a refetch can help is for the server to say, after the round.
        corrupt.push_back({&plan, progress, result});
        return;
      }
      // A fatal error ends the fetch: cancel the other servers' calls and I/O. A
      // retryable one leaves the other servers running; their blocks count.
      if (!IsRetryable(result)) scheduler.Stop();
      fail_status(result);
    });
    if (!spawned.ok()) fail_status(spawned);
  }
  const absl::Time start = absl::Now();
  scheduler.Run();
  stats.elapsed += absl::Now() - start;
  for (const Corrupt& c : corrupt) {
    // Spark's corruption diagnosis: the server rereads the partition and compares the
    // stored, on-disk and received checksums. Only damage in transfer is worth a refetch.
    absl::StatusOr<ferry::v1::CorruptionDiagnosis> diagnosis =
        control_.DiagnoseCorruption(c.plan->server, app_id, *c.progress.corrupt_partition,
                                    c.progress.corrupt_received_checksum, options.spark_exec_id);
    const std::string verdict =
        diagnosis.ok() ? diagnosis->explanation()
                       : absl::StrCat("no diagnosis (", diagnosis.status().message(), ")");
    fail(absl::DataLossError(absl::StrCat(c.status.message(), "; ", verdict)),
         diagnosis.ok() && diagnosis->cause() == ferry::v1::CAUSE_TRANSFER);
  }
  stats.servers = std::max(stats.servers, opened);
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
  // One scheduler (one io_uring) for every round.
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<FiberScheduler> scheduler, FiberScheduler::Create());
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
      stats.retried.push_back(status);  // the last round's error, tried again now
      // The calling thread sleeps between rounds: no fiber runs.
      absl::SleepFor(backoff.Next(jitter));
    }
    bool retryable = true;
    status = FetchRound(*scheduler, app_id, blocks, pending, server_of, sink, options, done,
                        &retryable, stats);
    if (status.ok() || !retryable) break;
    const bool busy = absl::IsResourceExhausted(status) && absl::Now() < busy_deadline;
    if (!busy && ++failed_attempts >= attempts) break;
  }
  if (!status.ok()) {
    const size_t missing = static_cast<size_t>(std::count(done.begin(), done.end(), false));
    const size_t first =
        static_cast<size_t>(std::find(done.begin(), done.end(), false) - done.begin());
    const std::string which =
        first < blocks.size()
            ? absl::StrCat(", the first ", BlockName(blocks[first].block), " at ", server_of[first])
            : "";
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (", missing, " of ", blocks.size(),
                                     " blocks not fetched", which, ")"));
  }
  stats.blocks = blocks.size();
  return stats;
}

absl::StatusOr<std::vector<std::string>> ShuffleClient::FetchToBuffers(
    const std::string& app_id, const std::vector<BlockLocation>& blocks,
    const FetchOptions& options) {
  BuffersSink sink(blocks.size());
  FERRY_RETURN_IF_ERROR(Fetch(app_id, blocks, sink, options).status());
  return std::move(sink.blocks());
}

}  // namespace ferry
