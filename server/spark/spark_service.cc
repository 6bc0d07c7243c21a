#include "server/spark/spark_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/io/ops.h"
#include "common/option_check.h"
#include "common/shuffle_files.h"
#include "common/spark/layout.h"
#include "common/spark/merge_dirs.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "server/storage/ids.h"

namespace ferry {

namespace {

// Spark's CorruptionCause values.
constexpr uint8_t kDiskIssue = 0;
constexpr uint8_t kNetworkIssue = 1;
constexpr uint8_t kUnknownIssue = 2;
constexpr uint8_t kChecksumVerifyPass = 3;
constexpr uint8_t kUnsupportedChecksumAlgorithm = 4;

// Distinct failure messages one stream keeps.
constexpr size_t kMaxFailureMessages = 64;

std::string SparkName(const BlockId& id) {
  return spark::ShuffleBlockName({id.shuffle_id, id.map_id, id.start_reduce_id, id.end_reduce_id});
}

}  // namespace

absl::Status SparkShuffleService::Options::Validate() const {
  FERRY_RETURN_IF_ERROR(
      CheckRange("max-spark-streams-per-connection", max_streams_per_connection, 1, kMaxLimit));
  FERRY_RETURN_IF_ERROR(CheckRange("max-spark-open-chunks", max_open_chunks, 1, kMaxLimit));
  FERRY_RETURN_IF_ERROR(
      CheckRange("max-spark-open-chunks-per-client", max_open_chunks_per_client, 1, kMaxLimit));
  FERRY_RETURN_IF_ERROR(CheckPositive("stream lifetime", stream_lifetime));
  FERRY_RETURN_IF_ERROR(CheckPositive("blocking timeout", blocking_timeout));
  if (max_diagnoses < 1 || max_chunks_per_stream < 1 || max_local_dirs_reply_bytes < 1) {
    return absl::InvalidArgumentError("the Spark service's limits must be at least 1");
  }
  return absl::OkStatus();
}

SparkShuffleService::SparkShuffleService(const Options& options, BlockStore* store,
                                         ExecutorRegistry* executors, BlockingPool* pool,
                                         const Clock& clock)
    : options_(options),
      clock_(clock),
      store_(store),
      executors_(executors),
      pool_(pool),
      // As Spark's OneForOneStreamManager: a random start, so that ids of one server's
      // runs differ, counting up.
      next_stream_id_(absl::Uniform<int64_t>(absl::BitGen(), 0, INT32_MAX) * 1000),
      open_chunks_(options.max_open_chunks, options.max_open_chunks_per_client,
                   "chunks of open streams"),
      diagnoses_(options.max_diagnoses, options.max_diagnoses, "DiagnoseCorruption calls running"),
      registration_rate_(options.registrations, "registrations of new executors"),
      registration_changes_rate_(options.registrations,
                                 "registrations that change a registered executor"),
      registration_pool_({.threads = 1, .max_queued = 1024}) {}

absl::Status SparkShuffleService::Register(spark::RegisterExecutor registration,
                                           const std::string& peer_host, bool authenticated) {
  // An executor registering again as it is (it reconnected) changes nothing: one lookup
  // (and, with push-based shuffle, its merge dirs given again: a restarted server
  // learns them so).
  if (executors_->Unchanged(registration)) {
    if (push_ == nullptr) return absl::OkStatus();
    return pool_
        ->Call<bool>(
            [push = push_, executors = executors_, registration]() -> absl::StatusOr<bool> {
              FERRY_RETURN_IF_ERROR(RegisterPushWith(push, executors, registration));
              return true;
            },
            absl::Now() + options_.blocking_timeout, BlockingPool::TenantOrder(registration.app_id))
        .status();
  }
  if (push_ != nullptr) {
    // A push part Spark's own service would refuse is refused before anything.
    FERRY_RETURN_IF_ERROR(spark::ParseMergeDirInfo(registration.info.shuffle_manager).status());
  }
  auto shared = std::make_shared<const spark::RegisterExecutor>(std::move(registration));
  // Checked first, on a blocking worker (it looks at each dir): an invalid registration
  // is refused before it takes a turn of anyone's rate.
  absl::StatusOr<bool> checked = pool_->Call<bool>(
      [executors = executors_, shared]() -> absl::StatusOr<bool> {
        FERRY_RETURN_IF_ERROR(executors->Check(*shared));
        return true;
      },
      absl::Now() + options_.blocking_timeout, BlockingPool::TenantOrder(shared->app_id));
  if (!checked.ok()) return checked.status();
  // Charged to the application: the one the connection proved it is, or, without
  // spark.authenticate, the one it names from that host. A new executor never waits
  // behind changes to registered ones (a new shuffle manager).
  const std::string key =
      authenticated ? shared->app_id : absl::StrCat(peer_host, " ", shared->app_id);
  RateLimiter& rate = executors_->FindDirs(shared->app_id, shared->exec_id).ok()
                          ? registration_changes_rate_
                          : registration_rate_;
  FERRY_ASSIGN_OR_RETURN(const absl::Duration wait, rate.Admit(key, clock_.Now()));
  if (wait > absl::ZeroDuration() && Sleep(wait) == -ECANCELED) {
    return absl::CancelledError("the server is stopping");
  }
  const absl::Status registered =
      registration_pool_
          .Call<bool>(
              [executors = executors_, shared]() -> absl::StatusOr<bool> {
                FERRY_RETURN_IF_ERROR(executors->Register(*shared));
                return true;
              },
              absl::Now() + options_.blocking_timeout)
          .status();
  if (!registered.ok() || push_ == nullptr) return registered;
  return pool_
      ->Call<bool>(
          [push = push_, executors = executors_, shared]() -> absl::StatusOr<bool> {
            FERRY_RETURN_IF_ERROR(RegisterPushWith(push, executors, *shared));
            return true;
          },
          absl::Now() + options_.blocking_timeout, BlockingPool::TenantOrder(shared->app_id))
      .status();
}

absl::Status SparkShuffleService::RegisterPush(const spark::RegisterExecutor& registration) {
  return RegisterPushWith(push_, executors_, registration);
}

absl::Status SparkShuffleService::RegisterPushWith(PushService* push, ExecutorRegistry* executors,
                                                   const spark::RegisterExecutor& registration) {
  if (push == nullptr) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(std::optional<spark::MergeDirInfo> merge,
                         spark::ParseMergeDirInfo(registration.info.shuffle_manager));
  if (!merge.has_value()) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const spark::ExecutorDirs> dirs,
                         executors->FindDirs(registration.app_id, registration.exec_id));
  // Each local dir's sibling: <parent of the local dir>/<merge dir>, beneath the same
  // root (a local dir is at least one level below its root).
  auto merge_dirs = std::make_shared<spark::ExecutorDirs>();
  merge_dirs->sub_dirs_per_local_dir = dirs->sub_dirs_per_local_dir;
  for (const spark::ExecutorDirs::LocalDir& dir : dirs->local_dirs) {
    const size_t slash = dir.relative.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : dir.relative.substr(0, slash + 1);
    const size_t path_slash = dir.path.rfind('/');
    merge_dirs->local_dirs.push_back({dir.root_fd, parent + merge->merge_dir,
                                      dir.path.substr(0, path_slash + 1) + merge->merge_dir});
  }
  std::vector<std::string> paths;
  for (const spark::ExecutorDirs::LocalDir& dir : merge_dirs->local_dirs) paths.push_back(dir.path);
  FERRY_RETURN_IF_ERROR(executors->CheckOwnDirs(registration.app_id, paths));
  push->RegisterAttempt(registration.app_id, merge->attempt_id, std::move(merge_dirs));
  return absl::OkStatus();
}

absl::StatusOr<SparkStream> SparkShuffleService::OpenStream(
    const spark::FetchShuffleBlocks& request, const std::string& client) {
  if (request.map_ids.size() != request.reduce_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FetchShuffleBlocks names ", request.map_ids.size(), " map ids but ",
                     request.reduce_ids.size(), " lists of reduce ids"));
  }
  size_t count = 0;
  for (const auto& reduces : request.reduce_ids) {
    count += request.batch_fetch_enabled ? 1 : reduces.size();
  }
  if (count > options_.max_chunks_per_stream) {
    return absl::InvalidArgumentError(absl::StrCat("FetchShuffleBlocks names ", count,
                                                   " blocks; the limit is ",
                                                   options_.max_chunks_per_stream));
  }
  if (request.shuffle_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FetchShuffleBlocks names shuffle ", request.shuffle_id));
  }
  std::vector<BlockId> keys;
  keys.reserve(count);
  for (size_t i = 0; i < request.map_ids.size(); ++i) {
    const int64_t map_id = request.map_ids[i];
    const std::vector<int32_t>& reduces = request.reduce_ids[i];
    if (map_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("FetchShuffleBlocks names map ", map_id));
    }
    if (request.batch_fetch_enabled) {
      if (reduces.size() != 2 || reduces[0] < 0 || reduces[1] <= reduces[0]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "FetchShuffleBlocks with batch fetch needs one [start, end) reduce range per map; "
            "map ",
            map_id, " has ", reduces.size(), " numbers"));
      }
      keys.push_back({request.shuffle_id, map_id, reduces[0], reduces[1]});
      continue;
    }
    for (int32_t r : reduces) {
      if (r < 0 || r == INT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat("FetchShuffleBlocks names reduce id ", r, " of map ", map_id));
      }
      keys.push_back({request.shuffle_id, map_id, r, r + 1});
    }
  }
  return Open(request.app_id, request.exec_id, std::move(keys), client);
}

absl::StatusOr<SparkStream> SparkShuffleService::OpenStream(const spark::OpenBlocks& request,
                                                            const std::string& client) {
  if (request.block_ids.size() > options_.max_chunks_per_stream) {
    return absl::InvalidArgumentError(absl::StrCat("OpenBlocks names ", request.block_ids.size(),
                                                   " blocks; the limit is ",
                                                   options_.max_chunks_per_stream));
  }
  std::vector<BlockId> keys;
  keys.reserve(request.block_ids.size());
  // One kind of block per request, as in Spark's ManagedBufferIterator.
  bool rdd = false;
  for (size_t i = 0; i < request.block_ids.size(); ++i) {
    const std::string& id = request.block_ids[i];
    FERRY_ASSIGN_OR_RETURN(spark::SparkBlockId parsed, spark::ParseBlockId(id));
    const auto* cached = std::get_if<spark::RddBlockId>(&parsed);
    if (i == 0) {
      rdd = cached != nullptr;
    } else if (rdd != (cached != nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "OpenBlocks mixes rdd and shuffle block ids ('", request.block_ids[0], "', '", id, "')"));
    }
    if (cached != nullptr) {
      if (!options_.serve_rdd_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            "block id '", id,
            "': cached RDD blocks are served only with "
            "ferry_server --spark-rdd-blocks (for spark.shuffle.service.fetch.rdd.enabled)"));
      }
      keys.push_back({cached->rdd_id, cached->split_index, 0, 0});
      continue;
    }
    const auto& shuffle = std::get<spark::ShuffleBlockId>(parsed);
    keys.push_back(
        {shuffle.shuffle_id, shuffle.map_id, shuffle.start_reduce_id, shuffle.end_reduce_id});
  }
  if (rdd) return OpenRdd(request.app_id, request.exec_id, std::move(keys), client);
  return Open(request.app_id, request.exec_id, std::move(keys), client);
}

absl::StatusOr<SparkStream> SparkShuffleService::OpenRdd(const std::string& app_id,
                                                         const std::string& exec_id,
                                                         std::vector<BlockId> keys,
                                                         const std::string& client) {
  FERRY_RETURN_IF_ERROR(CheckAppAndExecutorIds(app_id, exec_id));
  FERRY_ASSIGN_OR_RETURN(ClientBudget::Lease lease, open_chunks_.Acquire(client, keys.size()));
  // The registry answers lookups from memory: no blocking work until a chunk is served.
  absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> dirs =
      executors_->FindDirs(app_id, exec_id);
  std::vector<SparkChunk> chunks(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    chunks[i].block.id = keys[i];
    if (!dirs.ok()) chunks[i].status = dirs.status();
  }
  SparkStream stream = NewStream(std::move(chunks), std::move(lease));
  stream.rdd = true;
  if (dirs.ok()) stream.rdd_dirs = *std::move(dirs);
  return stream;
}

absl::StatusOr<SparkStream> SparkShuffleService::OpenStream(
    const spark::FetchShuffleBlockChunks& request, const std::string& client) {
  if (push_ == nullptr) {
    return absl::UnimplementedError(
        "FetchShuffleBlockChunks: push-based shuffle is not served here "
        "(ferry_server --spark-push-merge)");
  }
  // Each reduce id costs a partition's lookup even with no chunk named: it counts as a
  // chunk at least, against the stream's bound and the client's.
  size_t count = 0;
  for (const std::vector<int32_t>& ids : request.chunk_ids)
    count += std::max<size_t>(ids.size(), 1);
  if (count > options_.max_chunks_per_stream) {
    return absl::InvalidArgumentError(
        absl::StrCat("FetchShuffleBlockChunks names ", request.reduce_ids.size(),
                     " reduce ids and their chunks, ", count, " in all; at most ",
                     options_.max_chunks_per_stream, " are taken"));
  }
  FERRY_ASSIGN_OR_RETURN(ClientBudget::Lease lease, open_chunks_.Acquire(client, count));
  absl::StatusOr<std::vector<PushService::Chunk>> merged = push_->Chunks(request);
  if (!merged.ok()) return merged.status();
  std::vector<SparkChunk> chunks(merged->size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunks[i].block = std::move((*merged)[i].block);
    chunks[i].status = std::move((*merged)[i].status);
  }
  SparkStream stream = NewStream(std::move(chunks), std::move(lease));
  stream.merged = true;
  return stream;
}

absl::StatusOr<StreamBlock> SparkShuffleService::OpenRddBlock(
    std::shared_ptr<const spark::ExecutorDirs> dirs, const BlockId& id) {
  return pool_->Call<StreamBlock>(
      [dirs = std::move(dirs), id]() -> absl::StatusOr<StreamBlock> {
        const std::string name = absl::StrCat("rdd_", id.shuffle_id, "_", id.map_id);
        const ShuffleFileLocation at = dirs->Locate(name);
        struct stat st {};
        absl::StatusOr<UniqueFd> fd = OpenRegularFile(at.dir_fd, at.relative, at.display, &st);
        if (!fd.ok()) {
          if (absl::IsNotFound(fd.status())) {
            return absl::NotFoundError(
                absl::StrCat("the executor has no cached block ", name, " (no ", at.display, ")"));
          }
          return fd.status();
        }
        auto file = std::make_shared<DataFile>();
        file->path = at.display;
        file->fd = *std::move(fd);
        file->identity = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
        StreamBlock block;
        block.file = std::move(file);
        block.length = static_cast<uint64_t>(st.st_size);
        block.id = id;
        return block;
      },
      absl::Now() + options_.blocking_timeout);
}

SparkStream SparkShuffleService::NewStream(std::vector<SparkChunk> chunks,
                                           ClientBudget::Lease lease) {
  SparkStream stream;
  stream.chunks = std::move(chunks);
  stream.lease = std::move(lease);
  stream.expires = clock_.Now() + options_.stream_lifetime;
  stream.id = next_stream_id_.fetch_add(1, std::memory_order_relaxed);
  return stream;
}

absl::StatusOr<SparkStream> SparkShuffleService::Open(const std::string& app_id,
                                                      const std::string& exec_id,
                                                      std::vector<BlockId> keys,
                                                      const std::string& client) {
  FERRY_RETURN_IF_ERROR(CheckAppAndExecutorIds(app_id, exec_id));
  FERRY_ASSIGN_OR_RETURN(ClientBudget::Lease lease, open_chunks_.Acquire(client, keys.size()));
  using Chunks = std::vector<SparkChunk>;
  absl::StatusOr<Chunks> chunks = pool_->Call<Chunks>(
      [store = store_, executors = executors_, app_id, exec_id,
       keys = std::move(keys)]() -> absl::StatusOr<Chunks> {
        Chunks out(keys.size());
        for (size_t i = 0; i < keys.size(); ++i) out[i].block.id = keys[i];
        absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> dirs =
            executors->FindDirs(app_id, exec_id);
        if (!dirs.ok()) {
          for (SparkChunk& chunk : out) chunk.status = dirs.status();
          return out;
        }
        std::vector<absl::StatusOr<ResolvedBlock>> resolved =
            store->ResolveBlocks(SparkExecutorLayout(app_id, exec_id, *std::move(dirs)), keys);
        // A failure's message is kept once per distinct message, up to
        // kMaxFailureMessages a stream; failures past that share one per status code, so
        // that a stream of failing blocks costs its chunks and not a message each.
        absl::flat_hash_map<std::string, absl::Status> messages;
        absl::flat_hash_map<absl::StatusCode, absl::Status> past_limit;
        for (size_t i = 0; i < resolved.size(); ++i) {
          if (resolved[i].ok()) {
            out[i].block = std::move(resolved[i]->block);
            continue;
          }
          const absl::Status& failed = resolved[i].status();
          if (auto it = messages.find(failed.message()); it != messages.end()) {
            out[i].status = it->second;
          } else if (messages.size() < kMaxFailureMessages) {
            out[i].status = messages.emplace(std::string(failed.message()), failed).first->second;
          } else {
            auto [shared, added] = past_limit.try_emplace(failed.code());
            if (added) {
              shared->second = absl::Status(failed.code(),
                                            "cannot be served either (more blocks of this "
                                            "stream fail than are described one by one)");
            }
            out[i].status = shared->second;
          }
        }
        return out;
      },
      absl::Now() + options_.blocking_timeout, BlockingPool::TenantOrder(app_id));
  if (!chunks.ok()) return chunks.status();
  return NewStream(*std::move(chunks), std::move(lease));
}

absl::StatusOr<int32_t> SparkShuffleService::RemoveBlocks(const spark::RemoveBlocks& request) {
  FERRY_RETURN_IF_ERROR(CheckAppAndExecutorIds(request.app_id, request.exec_id));
  return pool_->Call<int32_t>(
      [executors = executors_, request]() -> absl::StatusOr<int32_t> {
        FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const spark::ExecutorDirs> dirs,
                               executors->FindDirs(request.app_id, request.exec_id));
        int32_t removed = 0;
        for (const std::string& id : request.block_ids) {
          // The files a block id may name: an rdd block's, and a map output's .data and
          // .index (the driver removing a shuffle whose executors are gone). Anything
          // else names no file.
          absl::StatusOr<spark::SparkBlockId> parsed = spark::ParseBlockId(id);
          const bool rdd = parsed.ok() && std::holds_alternative<spark::RddBlockId>(*parsed);
          if (!rdd && !spark::ParseShuffleFileName(id).ok()) continue;
          const ShuffleFileLocation at = dirs->Locate(id);
          const size_t slash = at.relative.rfind('/');
          const UniqueFd dir = OpenBeneath(at.dir_fd, at.relative.substr(0, slash),
                                           O_PATH | O_DIRECTORY | O_CLOEXEC);
          if (!dir.valid()) continue;
          if (::unlinkat(dir.get(), id.c_str(), 0) == 0) ++removed;
        }
        return removed;
      },
      absl::Now() + options_.blocking_timeout);
}

absl::StatusOr<std::string> SparkShuffleService::LocalDirs(
    const spark::GetLocalDirsForExecutors& request) {
  std::vector<std::string> exec_ids;
  std::vector<int32_t> counts;
  std::vector<std::string> all_dirs;
  absl::flat_hash_set<absl::string_view> seen;
  size_t reply_bytes = 0;
  for (const std::string& exec_id : request.exec_ids) {
    if (!seen.insert(exec_id).second) continue;
    // Push-based shuffle's merge dirs, for a reducer on this host that reads merged
    // partitions from the disk.
    absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> dirs =
        exec_id != spark::kShuffleMergerExecId ? executors_->FindDirs(request.app_id, exec_id)
        : push_ != nullptr
            ? push_->MergeDirs(request.app_id)
            : absl::NotFoundError(absl::StrCat("push-based shuffle is not served here "
                                               "(ferry_server --spark-push-merge): no merge "
                                               "dirs of app ",
                                               request.app_id.substr(0, 130)));
    if (!dirs.ok()) return dirs.status();
    reply_bytes += 8 + exec_id.size();
    for (const spark::ExecutorDirs::LocalDir& dir : (*dirs)->local_dirs) {
      reply_bytes += 4 + dir.path.size();
    }
    if (reply_bytes > options_.max_local_dirs_reply_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "GetLocalDirsForExecutors: the local dirs of ", seen.size(), " executors of app ",
          request.app_id.substr(0, 130), " pass the reply limit of ",
          options_.max_local_dirs_reply_bytes, " bytes; ask for fewer at a time"));
    }
    exec_ids.push_back(exec_id);
    counts.push_back(static_cast<int32_t>((*dirs)->local_dirs.size()));
    for (const spark::ExecutorDirs::LocalDir& dir : (*dirs)->local_dirs) {
      all_dirs.push_back(dir.path);
    }
  }
  return spark::EncodeLocalDirsForExecutors(exec_ids, counts, all_dirs);
}

absl::StatusOr<uint8_t> SparkShuffleService::Diagnose(const spark::DiagnoseCorruption& request,
                                                      const std::string& client) {
  const std::optional<ChecksumAlgorithm> algorithm = ParseChecksumAlgorithm(request.algorithm);
  if (!algorithm.has_value()) return kUnsupportedChecksumAlgorithm;
  FERRY_RETURN_IF_ERROR(CheckAppAndExecutorIds(request.app_id, request.exec_id));
  if (request.shuffle_id < 0 || request.map_id < 0 || request.reduce_id < 0 ||
      request.reduce_id == INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("DiagnoseCorruption names shuffle ",
                                                   request.shuffle_id, " map ", request.map_id,
                                                   " reduce ", request.reduce_id));
  }
  // Each diagnosis reads a whole partition: a few at a time, so that they cannot take
  // every blocking worker from the streams being opened.
  FERRY_ASSIGN_OR_RETURN(ClientBudget::Lease running, diagnoses_.Acquire(client, 1));
  const absl::Time deadline = absl::Now() + options_.blocking_timeout;
  return pool_->Call<uint8_t>(
      [store = store_, executors = executors_, request, algorithm = *algorithm,
       deadline]() -> absl::StatusOr<uint8_t> {
        FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const spark::ExecutorDirs> dirs,
                               executors->FindDirs(request.app_id, request.exec_id));
        const BlockId key{request.shuffle_id, request.map_id, request.reduce_id,
                          request.reduce_id + 1};
        std::vector<absl::StatusOr<ResolvedBlock>> resolved = store->ResolveBlocks(
            SparkExecutorLayout(request.app_id, request.exec_id, std::move(dirs)), {key});
        if (!resolved[0].ok()) return resolved[0].status();
        const StreamBlock& block = resolved[0]->block;
        // No checksum file of that algorithm: Spark cannot tell either.
        if (!block.has_checksum || block.checksum_algorithm != algorithm) return kUnknownIssue;
        // Spark's checksum is a long; a 32-bit one that does not fit matches nothing.
        const uint32_t received = request.checksum >= 0 && request.checksum <= UINT32_MAX
                                      ? static_cast<uint32_t>(request.checksum)
                                      : ~block.checksum;
        absl::StatusOr<Diagnosis> d = DiagnoseSegment(block, received, SparkName(key), deadline);
        if (absl::IsDeadlineExceeded(d.status())) return d.status();
        if (!d.ok()) return kUnknownIssue;
        switch (d->cause) {
          case CorruptionCause::kDisk:
            return kDiskIssue;
          case CorruptionCause::kTransfer:
            return kNetworkIssue;
          case CorruptionCause::kNone:
            return kChecksumVerifyPass;
        }
        return kUnknownIssue;
      },
      deadline);
}

void SparkShuffleService::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  FERRY_APPEND_READS(FERRY_SPARK_FETCH_STATS, out);
}

}  // namespace ferry
