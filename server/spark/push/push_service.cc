#include "server/spark/push/push_service.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/io/ops.h"
#include "common/status_macros.h"

namespace ferry {

using spark::PushReturnCode;

PushService::PushService(const PushMerger::Options& options, BlockingPool* pool,
                         absl::Duration blocking_timeout)
    : merger_(options), pool_(pool), blocking_timeout_(blocking_timeout) {}

template <typename T>
absl::StatusOr<T> PushService::OnWorker(const std::string& app_id,
                                        absl::AnyInvocable<absl::StatusOr<T>()> fn) {
  return pool_->Call<T>(std::move(fn), absl::Now() + blocking_timeout_,
                        BlockingPool::TenantOrder(app_id));
}

// One upload, from its admission to its answer. Each step runs on the serving fiber
// while the merger can answer without touching a disk or waiting on a lock, and on a
// blocking worker otherwise (the merger says "needs worker").
class PushService::Uploading {
 public:
  Uploading(PushService& service, const spark::PushBlockStream& push, uint64_t length,
            PushBody& body)
      : service_(service),
        merger_(service.merger_),
        push_(push),
        length_(length),
        body_(body),
        deadline_(absl::Now() + merger_.options().push_timeout) {}

  Answer Run();

 private:
  // The body read and dropped; the answer `code` (or error) after it.
  Answer Drained(absl::StatusOr<PushReturnCode> code);
  // The partition's turn, taken at once or waited for with the block held in memory or
  // in a file beside the partition; nullopt when it is held now, else the answer.
  std::optional<Answer> TakeTurn();
  // Writes the block where the target says: from the socket, from memory or from its
  // file; the bytes written, or the error (the connection lost: connected_ false).
  absl::Status Write(const PushMerger::Target& target, int64_t* written);
  // Records the written block (on a worker when it writes, or the partition is busy).
  absl::StatusOr<PushReturnCode> Commit(PushMerger::Target& target, int64_t written);

  PushService& service_;
  PushMerger& merger_;
  const spark::PushBlockStream& push_;
  const uint64_t length_;
  PushBody& body_;
  const absl::Time deadline_;
  std::shared_ptr<PushMerger::Partition> partition_;
  PushMerger::Turn turn_;
  std::string block_id_;
  // A block that waited for its turn: in memory, or in a file.
  std::string deferred_;
  std::optional<PushMerger::Deferral> deferral_;
  bool connected_ = true;
};

PushService::Answer PushService::Uploading::Drained(absl::StatusOr<PushReturnCode> code) {
  absl::Status ignored;
  Answer answer;
  answer.code = std::move(code);
  answer.block_id = block_id_;
  answer.connected = body_.Receive(
      length_, deadline_, [](absl::string_view) { return absl::OkStatus(); }, &ignored);
  return answer;
}

PushService::Answer PushService::Uploading::Run() {
  absl::StatusOr<PushMerger::Admission> admitted = merger_.Admit(push_, /*on_worker=*/false);
  if (admitted.ok() && admitted->needs_worker) {
    body_.Flush();  // a worker may take a while
    admitted = service_.OnWorker<PushMerger::Admission>(
        push_.app_id, [merger = &merger_, push = push_] { return merger->Admit(push, true); });
  }
  if (!admitted.ok()) {
    merger_.Count(PushMerger::Outcome::kRefused);
    return Drained(admitted.status());
  }
  block_id_ = admitted->block_id;
  if (admitted->partition == nullptr) {
    // Answered without the block: a duplicate (success), or too late, stale, or a former
    // attempt's, whose connection Spark's service closes after the answer.
    merger_.Count(admitted->code == PushReturnCode::kSuccess
                      ? PushMerger::Outcome::kDuplicate
                      : PushMerger::OutcomeOf(admitted->code));
    Answer answer = Drained(admitted->code);
    answer.close = admitted->code == PushReturnCode::kTooOldAttemptPush;
    return answer;
  }
  partition_ = admitted->partition;
  turn_ = std::move(admitted->turn);
  if (std::optional<Answer> refused = TakeTurn(); refused.has_value()) return *refused;

  absl::StatusOr<PushMerger::Target> target =
      merger_.TargetOf(*partition_, push_.map_index, static_cast<int64_t>(length_), false);
  if (target.ok() && target->needs_worker) {
    body_.Flush();  // a worker may take a while
    target = service_.OnWorker<PushMerger::Target>(
        push_.app_id, [merger = &merger_, partition = partition_, map = push_.map_index,
                       length = static_cast<int64_t>(length_)] {
          return merger->TargetOf(*partition, map, length, /*on_worker=*/true);
        });
  }
  if (!target.ok() || target->code != PushReturnCode::kSuccess || target->duplicate) {
    turn_.Release();
    const bool received = deferral_.has_value();
    deferral_.reset();
    std::string().swap(deferred_);
    merger_.Count(!target.ok()        ? PushMerger::Outcome::kRefused
                  : target->duplicate ? PushMerger::Outcome::kDuplicate
                                      : PushMerger::OutcomeOf(target->code));
    absl::StatusOr<PushReturnCode> code =
        target.ok() ? absl::StatusOr<PushReturnCode>(target->code) : target.status();
    if (received) return Answer{std::move(code), block_id_, true, false};
    return Drained(std::move(code));
  }
  int64_t written = 0;
  absl::Status status = Write(*target, &written);
  // The waiting block's bound goes back before the answer: a client that has its answer
  // finds the bytes no longer counted.
  deferral_.reset();
  std::string().swap(deferred_);
  // A block cut off or not written is not committed: the next append overwrites it.
  absl::StatusOr<PushReturnCode> code =
      status.ok() ? Commit(*target, written) : absl::StatusOr<PushReturnCode>(status);
  turn_.Release();
  Answer answer{code, block_id_, connected_, false};
  if (!connected_) return answer;
  merger_.Count(
      !code.ok() ? PushMerger::Outcome::kRefused : PushMerger::OutcomeOf(*code),
      code.ok() && *code == PushReturnCode::kSuccess ? static_cast<uint64_t>(written) : 0);
  return answer;
}

std::optional<PushService::Answer> PushService::Uploading::TakeTurn() {
  if (!turn_.held() && partition_->turn().TryLock()) turn_ = PushMerger::Turn(partition_);
  if (turn_.held()) return std::nullopt;
  // Taken: the block arrives into memory, or past its bounds into a file beside the
  // partition, and waits for the turn.
  absl::StatusOr<PushMerger::Deferral> held = merger_.DeferInMemory(body_.peer_host(), length_);
  if (!held.ok()) {
    body_.Flush();  // a worker may take a while
    held = service_.OnWorker<PushMerger::Deferral>(
        push_.app_id,
        [merger = &merger_, partition = partition_, client = body_.peer_host(), length = length_] {
          return merger->DeferOnDisk(*partition, client, length);
        });
  }
  if (!held.ok()) {
    if (!absl::IsResourceExhausted(held.status())) body_.LogFailure(held.status());
    merger_.Count(PushMerger::Outcome::kCollision);
    return Drained(PushReturnCode::kBlockAppendCollisionDetected);
  }
  deferral_ = *std::move(held);
  absl::Status sink_status;
  if (deferral_->spill.valid()) {
    connected_ = body_.ReceiveToFile(length_, deadline_, deferral_->spill.get(), 0,
                                     /*write_inline=*/false, &sink_status);
  } else {
    deferred_.reserve(static_cast<size_t>(length_));
    connected_ = body_.Receive(
        length_, deadline_,
        [&](absl::string_view bytes) {
          deferred_.append(bytes.data(), bytes.size());
          return absl::OkStatus();
        },
        &sink_status);
  }
  if (!connected_) return Answer{PushReturnCode::kSuccess, block_id_, false, false};
  if (sink_status.ok()) {
    PushMerger::Waiting waiting(merger_);
    body_.Flush();  // the turn may take a while
    if (partition_->turn().Lock(absl::Now() + merger_.options().push_timeout)) {
      turn_ = PushMerger::Turn(partition_);
    }
  } else {
    body_.LogFailure(sink_status);  // the disk the block was to wait on
  }
  if (turn_.held()) return std::nullopt;
  deferral_.reset();
  std::string().swap(deferred_);
  merger_.Count(PushMerger::Outcome::kCollision);
  return Answer{PushReturnCode::kBlockAppendCollisionDetected, block_id_, true, false};
}

absl::Status PushService::Uploading::Write(const PushMerger::Target& target, int64_t* written) {
  if (!deferral_.has_value()) {
    // Straight from the socket into the merged file.
    absl::Status sink_status;
    connected_ = body_.ReceiveToFile(length_, deadline_, target.fd->get(), target.offset,
                                     target.in_flight.write_inline(), &sink_status);
    if (!connected_) return absl::UnavailableError("the connection was lost");
    if (sink_status.ok()) *written = static_cast<int64_t>(length_);
    return sink_status;
  }
  if (deferral_->spill.valid()) {
    absl::Status copied = body_.CopyFile(deferral_->spill.get(), 0, target.fd->get(), target.offset,
                                         length_, absl::Now() + merger_.options().push_timeout);
    if (!copied.ok()) {
      return absl::Status(copied.code(),
                          absl::StrCat("append ", block_id_,
                                       " from where it waited to its merge: ", copied.message()));
    }
    *written = static_cast<int64_t>(length_);
    return absl::OkStatus();
  }
  // Written with io_uring at the partition's end: the fiber waits, not its thread.
  const ssize_t n = WriteAll(target.fd->get(), deferred_.data(), deferred_.size(), target.offset);
  if (n != static_cast<ssize_t>(deferred_.size())) {
    return absl::ErrnoToStatus(n < 0 ? static_cast<int>(-n) : EIO,
                               absl::StrCat("append ", block_id_, " to its merge"));
  }
  *written = n;
  return absl::OkStatus();
}

absl::StatusOr<PushReturnCode> PushService::Uploading::Commit(PushMerger::Target& target,
                                                              int64_t written) {
  std::optional<PushReturnCode> committed =
      merger_.Commit(*partition_, push_.map_index, written, target.fd->get(), false);
  if (committed.has_value()) return *committed;
  // The commit writes (or waits for a finalize's writes): on a worker, whose job holds
  // the turn until it has run, or is dropped unrun.
  body_.Flush();  // a worker may take a while
  return service_.OnWorker<PushReturnCode>(
      push_.app_id,
      [merger = &merger_, partition = partition_, turn = std::move(turn_),
       fd = std::move(target.fd), map = push_.map_index,
       written]() mutable -> absl::StatusOr<PushReturnCode> {
        const std::optional<PushReturnCode> done =
            merger->Commit(*partition, map, written, fd->get(), /*on_worker=*/true);
        turn.Release();
        return done.value_or(PushReturnCode::kTooLateBlockPush);
      });
}

PushService::Answer PushService::Upload(const spark::PushBlockStream& push, uint64_t length,
                                        PushBody& body) {
  return Uploading(*this, push, length, body).Run();
}

absl::StatusOr<spark::MergeStatuses> PushService::Finalize(
    const spark::FinalizeShuffleMerge& request) {
  // Each partition's files are cut: on a blocking worker.
  return OnWorker<spark::MergeStatuses>(
      request.app_id, [merger = &merger_, request] { return merger->Finalize(request); });
}

absl::Status PushService::Remove(const spark::RemoveShuffleMerge& request) {
  return OnWorker<bool>(request.app_id,
                        [merger = &merger_, request]() -> absl::StatusOr<bool> {
                          FERRY_RETURN_IF_ERROR(merger->Remove(request));
                          return true;
                        })
      .status();
}

absl::StatusOr<std::vector<PushService::Chunk>> PushService::Chunks(
    const spark::FetchShuffleBlockChunks& request) {
  return OnWorker<std::vector<
      Chunk>>(request.app_id, [merger = &merger_, request]() -> absl::StatusOr<std::vector<Chunk>> {
    std::vector<Chunk> out;
    // Each partition opened once, however often the request names it.
    absl::flat_hash_map<int32_t, PushMerger::MergedFiles> partitions;
    for (size_t r = 0; r < request.reduce_ids.size(); ++r) {
      auto [it, added] = partitions.try_emplace(request.reduce_ids[r]);
      if (added) {
        if (BlockingPool::Abandoned()) return absl::CancelledError("its caller left");
        FERRY_ASSIGN_OR_RETURN(it->second,
                               merger->OpenMerged(request.app_id, request.shuffle_id,
                                                  request.shuffle_merge_id, request.reduce_ids[r]));
      }
      const PushMerger::MergedFiles& files = it->second;
      const std::vector<uint64_t>& offsets = *files.offsets;
      for (int32_t chunk : request.chunk_ids[r]) {
        Chunk c;
        c.block.id = {request.shuffle_id, request.shuffle_merge_id, request.reduce_ids[r], chunk};
        if (chunk < 0 || chunk >= files.chunks()) {
          c.status = absl::NotFoundError(
              absl::StrCat("the merged partition has ", files.chunks(), " chunks"));
        } else {
          c.block.file = files.data;
          c.block.offset = offsets[chunk];
          c.block.length = offsets[chunk + 1] - offsets[chunk];
        }
        out.push_back(std::move(c));
      }
    }
    return out;
  });
}

absl::StatusOr<PushMerger::MergedFiles> PushService::Meta(
    const spark::MergedBlockMetaRequest& request) {
  return OnWorker<PushMerger::MergedFiles>(request.app_id, [merger = &merger_, request] {
    return merger->OpenMerged(request.app_id, request.shuffle_id, request.shuffle_merge_id,
                              request.reduce_id);
  });
}

}  // namespace ferry
