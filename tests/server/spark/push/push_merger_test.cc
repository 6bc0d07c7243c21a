// The merges of push-based shuffle, as Spark's RemoteBlockPushResolver keeps them:
// attempts, merge ids and the codes each push is answered with; the files a finalized
// merge leaves; the bounds.
#include "server/spark/push/push_merger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/spark/merge_dirs.h"
#include "gtest/gtest.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using spark::PushReturnCode;

constexpr char kApp[] = "application_1_0001";

class PushMergerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The executor makes its merge dir and the sub dirs, as DiskBlockManager does.
    for (const char* dir : {"/merge_manager_1", "/merge_manager_1/00", "/merge_manager_1/01",
                            "/merge_manager_2", "/merge_manager_2/00", "/merge_manager_2/01"}) {
      ASSERT_EQ(::mkdir((root_.path() + dir).c_str(), 0750), 0) << dir;
    }
    root_fd_ = UniqueFd(::open(root_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  }

  std::shared_ptr<const spark::ExecutorDirs> Dirs(int attempt) {
    auto dirs = std::make_shared<spark::ExecutorDirs>();
    const std::string name = "merge_manager_" + std::to_string(attempt);
    dirs->local_dirs.push_back({root_fd_.get(), name, root_.path() + "/" + name});
    dirs->sub_dirs_per_local_dir = 2;
    return dirs;
  }

  std::unique_ptr<PushMerger> Merger(PushMerger::Options options = {}) {
    options.min_chunk_bytes = 8;
    auto merger = std::make_unique<PushMerger>(options);
    merger->RegisterAttempt(kApp, 1, Dirs(1));
    return merger;
  }

  static spark::PushBlockStream Push(int32_t map, int32_t reduce, int32_t merge_id = 0,
                                     int32_t attempt = 1) {
    return {kApp, attempt, /*shuffle_id=*/3, merge_id, map, reduce, 0};
  }

  // A push from admission to its answer, its partition uncontended.
  PushReturnCode Append(PushMerger& merger, const spark::PushBlockStream& push,
                        const std::string& block) {
    absl::StatusOr<PushMerger::Admission> admitted = merger.Admit(push, /*on_worker=*/true);
    EXPECT_TRUE(admitted.ok()) << admitted.status();
    if (!admitted.ok() || admitted->code != PushReturnCode::kSuccess) {
      return admitted.ok() ? admitted->code : PushReturnCode::kBlockAppendCollisionDetected;
    }
    if (admitted->partition == nullptr) return PushReturnCode::kSuccess;  // a duplicate
    PushMerger::Partition& partition = *admitted->partition;
    // Held already when the admission made the partition.
    PushMerger::Turn turn = std::move(admitted->turn);
    if (!turn.held()) {
      EXPECT_TRUE(partition.turn().TryLock());
      turn = PushMerger::Turn(admitted->partition);
    }
    absl::StatusOr<PushMerger::Target> target = merger.TargetOf(
        partition, push.map_index, static_cast<int64_t>(block.size()), /*on_worker=*/true);
    EXPECT_TRUE(target.ok()) << target.status();
    PushReturnCode code = target->code;
    if (code == PushReturnCode::kSuccess && !target->duplicate) {
      EXPECT_EQ(::pwrite(target->fd->get(), block.data(), block.size(), target->offset),
                static_cast<ssize_t>(block.size()));
      code = *merger.Commit(partition, push.map_index, static_cast<int64_t>(block.size()),
                            target->fd->get(), /*on_worker=*/true);
    }
    return code;
  }

  std::string File(int attempt, int merge_id, int reduce, const char* suffix) {
    spark::ExecutorDirs dirs = *Dirs(attempt);
    const ShuffleFileLocation at =
        dirs.Locate(spark::MergedFileName(kApp, 3, merge_id, reduce, suffix));
    return root_.path() + "/" + at.relative;
  }
  bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

  testing::TempDir root_;
  UniqueFd root_fd_;
};

TEST_F(PushMergerTest, PushesMergeAndFinalizeSaysWhatEachPartitionHolds) {
  std::unique_ptr<PushMerger> merger = Merger();
  EXPECT_EQ(Append(*merger, Push(0, 0), "aaaaaaaaaa"), PushReturnCode::kSuccess);
  EXPECT_EQ(Append(*merger, Push(2, 0), "bb"), PushReturnCode::kSuccess);
  EXPECT_EQ(Append(*merger, Push(1, 5), "c"), PushReturnCode::kSuccess);
  // The same map's block again (a retry): success, nothing written.
  EXPECT_EQ(Append(*merger, Push(0, 0), "xxxxxxxxxx"), PushReturnCode::kSuccess);
  EXPECT_EQ(merger->open_partitions(), 2u);
  absl::StatusOr<spark::MergeStatuses> statuses = merger->Finalize({kApp, 1, 3, 0});
  ASSERT_TRUE(statuses.ok()) << statuses.status();
  EXPECT_EQ(merger->open_partitions(), 0u);
  ASSERT_EQ(statuses->reduce_ids.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    if (statuses->reduce_ids[i] == 0) {
      EXPECT_EQ(statuses->bitmaps[i], spark::Bitmap::Of({0, 2}));
      EXPECT_EQ(statuses->sizes[i], 12);
    } else {
      EXPECT_EQ(statuses->reduce_ids[i], 5);
      EXPECT_EQ(statuses->bitmaps[i], spark::Bitmap::Of({1}));
      EXPECT_EQ(statuses->sizes[i], 1);
    }
  }
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "data")), "aaaaaaaaaabb");
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "meta")),
            spark::Bitmap::Of({0}).Serialize() + spark::Bitmap::Of({2}).Serialize());
  // After finalize: too late; a second finalize is refused.
  EXPECT_EQ(Append(*merger, Push(4, 0), "late"), PushReturnCode::kTooLateBlockPush);
  EXPECT_EQ(merger->Finalize({kApp, 1, 3, 0}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(PushMergerTest, AttemptsAndMergeIdsDecideAsInSpark) {
  std::unique_ptr<PushMerger> merger = Merger();
  EXPECT_EQ(Append(*merger, Push(0, 0, /*merge_id=*/1), "old"), PushReturnCode::kSuccess);
  const std::string old_data = File(1, 1, 0, "data");
  EXPECT_TRUE(Exists(old_data));
  // A newer merge id (a retried indeterminate stage): the older merge's files go.
  EXPECT_EQ(Append(*merger, Push(0, 0, 2), "new"), PushReturnCode::kSuccess);
  EXPECT_FALSE(Exists(old_data));
  EXPECT_EQ(Append(*merger, Push(1, 0, 1), "stale"), PushReturnCode::kStaleBlockPush);
  // A former attempt's push, and its finalize.
  EXPECT_EQ(Append(*merger, Push(1, 0, 2, /*attempt=*/0), "x"), PushReturnCode::kTooOldAttemptPush);
  EXPECT_EQ(merger->Finalize({kApp, 0, 3, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  // A newer attempt registers: the older attempt's merges go.
  const std::string attempt_one = File(1, 2, 0, "data");
  EXPECT_TRUE(Exists(attempt_one));
  merger->RegisterAttempt(kApp, 2, Dirs(2));
  EXPECT_FALSE(Exists(attempt_one));
  EXPECT_EQ(Append(*merger, Push(0, 0, 2, 1), "x"), PushReturnCode::kTooOldAttemptPush);
  EXPECT_EQ(Append(*merger, Push(0, 0, 2, 2), "x"), PushReturnCode::kSuccess);
  EXPECT_TRUE(Exists(File(2, 2, 0, "data")));
  // An older attempt registering later changes nothing.
  merger->RegisterAttempt(kApp, 1, Dirs(1));
  EXPECT_EQ(Append(*merger, Push(1, 0, 2, 2), "y"), PushReturnCode::kSuccess);
  // A finalize of an older merge id is stale; of a newer one ends it empty.
  EXPECT_EQ(merger->Finalize({kApp, 2, 3, 1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<spark::MergeStatuses> newer = merger->Finalize({kApp, 2, 3, 7});
  ASSERT_TRUE(newer.ok());
  EXPECT_TRUE(newer->reduce_ids.empty());
  EXPECT_FALSE(Exists(File(2, 2, 0, "data")));
  // Unknown applications.
  EXPECT_EQ(merger->Admit({"app-none", 0, 3, 0, 0, 0, 0}, true).status().code(),
            absl::StatusCode::kNotFound);
}

// A block still being written when its merge is finalized: answered too late, and
// what it wrote past the finalized size is cut.
TEST_F(PushMergerTest, AWriteThatLandsAfterFinalizeIsCut) {
  std::unique_ptr<PushMerger> merger = Merger();
  ASSERT_EQ(Append(*merger, Push(0, 0), "kept"), PushReturnCode::kSuccess);
  absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(Push(1, 0), true);
  ASSERT_TRUE(admitted.ok() && admitted->partition != nullptr);
  ASSERT_TRUE(admitted->partition->turn().TryLock());
  absl::StatusOr<PushMerger::Target> target = merger->TargetOf(*admitted->partition, 1, 6, true);
  ASSERT_TRUE(target.ok());
  ASSERT_TRUE(merger->Finalize({kApp, 1, 3, 0}).ok());
  ASSERT_EQ(::pwrite(target->fd->get(), "latecomer", 9, target->offset), 9);
  EXPECT_EQ(merger->Commit(*admitted->partition, 1, 9, target->fd->get(), true),
            PushReturnCode::kTooLateBlockPush);
  admitted->partition->turn().Unlock();
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "data")), "kept");
}

TEST_F(PushMergerTest, RemoveAndTheApplicationsEndDeleteTheFiles) {
  std::unique_ptr<PushMerger> merger = Merger();
  ASSERT_EQ(Append(*merger, Push(0, 0), "a"), PushReturnCode::kSuccess);
  ASSERT_TRUE(merger->Finalize({kApp, 1, 3, 0}).ok());
  const std::string data = File(1, 0, 0, "data");
  ASSERT_TRUE(Exists(data));
  EXPECT_TRUE(merger->Remove({kApp, 1, 3, 5}).ok());  // another merge id: kept
  EXPECT_TRUE(Exists(data));
  EXPECT_TRUE(merger->Remove({kApp, 1, 3, 0}).ok());
  for (const char* suffix : {"data", "index", "meta"}) EXPECT_FALSE(Exists(File(1, 0, 0, suffix)));
  ASSERT_EQ(Append(*merger, Push(0, 1), "b"), PushReturnCode::kSuccess);
  EXPECT_TRUE(Exists(File(1, 0, 1, "data")));
  merger->ApplicationEnded(kApp);
  EXPECT_FALSE(Exists(File(1, 0, 1, "data")));
  EXPECT_EQ(merger->open_partitions(), 0u);
  EXPECT_EQ(merger->Admit(Push(0, 0), true).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PushMergerTest, PartitionsAndBytesAreBounded) {
  PushMerger::Options options;
  options.max_open_partitions = 2;
  options.max_app_bytes = 12;
  std::unique_ptr<PushMerger> merger = Merger(options);
  ASSERT_EQ(Append(*merger, Push(0, 0), "12345"), PushReturnCode::kSuccess);
  ASSERT_EQ(Append(*merger, Push(0, 1), "12345"), PushReturnCode::kSuccess);
  // A third partition: past the open files' bound.
  EXPECT_EQ(merger->Admit(Push(0, 2), true).status().code(), absl::StatusCode::kResourceExhausted);
  // A block that would take the application past its bytes.
  absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(Push(1, 0), true);
  ASSERT_TRUE(admitted.ok() && admitted->partition != nullptr);
  ASSERT_TRUE(admitted->partition->turn().TryLock());
  EXPECT_EQ(merger->TargetOf(*admitted->partition, 1, 5, true).status().code(),
            absl::StatusCode::kResourceExhausted);
  admitted->partition->turn().Unlock();
  EXPECT_EQ(Append(*merger, Push(1, 0), "12"), PushReturnCode::kSuccess);  // within it
  EXPECT_EQ(merger->Admit(Push(2, 0), true).status().code(), absl::StatusCode::kResourceExhausted);
  // Removing the merge frees both.
  ASSERT_TRUE(merger->Remove({kApp, 1, 3, -1}).ok());
  EXPECT_EQ(merger->open_partitions(), 0u);
  EXPECT_EQ(Append(*merger, Push(1, 2), "12345"), PushReturnCode::kSuccess);
}

TEST_F(PushMergerTest, OneApplicationHoldsAtMostItsShareOfTheOpenPartitions) {
  PushMerger::Options options;
  options.max_open_partitions = 3;
  options.max_open_partitions_per_app = 2;
  std::unique_ptr<PushMerger> merger = Merger(options);
  constexpr char kOther[] = "application_1_0002";
  merger->RegisterAttempt(kOther, 1, Dirs(2));
  const auto other = [&](int32_t map, int32_t reduce) {
    return spark::PushBlockStream{kOther, 1, /*shuffle_id=*/3, 0, map, reduce, 0};
  };
  ASSERT_EQ(Append(*merger, Push(0, 0), "12345"), PushReturnCode::kSuccess);
  ASSERT_EQ(Append(*merger, Push(0, 1), "12345"), PushReturnCode::kSuccess);
  // A third of the first application's: past its share, though the node has room.
  absl::StatusOr<PushMerger::Admission> refused = merger->Admit(Push(0, 2), true);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), kApp)) << refused.status();
  // Its open partitions take more blocks; the other application opens one of its own.
  EXPECT_EQ(Append(*merger, Push(1, 1), "67"), PushReturnCode::kSuccess);
  EXPECT_EQ(Append(*merger, other(0, 0), "abc"), PushReturnCode::kSuccess);
  EXPECT_EQ(merger->open_partitions(), 3u);
  // The node's bound holds for both.
  EXPECT_EQ(merger->Admit(other(0, 1), true).status().code(), absl::StatusCode::kResourceExhausted);
  // A finalize gives the first application's share back; the other's end, its own.
  ASSERT_TRUE(merger->Finalize({kApp, 1, 3, 0}).ok());
  EXPECT_EQ(merger->open_partitions(), 1u);
  EXPECT_EQ(Append(*merger, other(0, 1), "abc"), PushReturnCode::kSuccess);
  EXPECT_EQ(merger->Admit(other(0, 2), true).status().code(), absl::StatusCode::kResourceExhausted);
  merger->ApplicationEnded(kOther);
  EXPECT_EQ(merger->open_partitions(), 0u);
  EXPECT_EQ(Append(*merger, Push(0, 0, /*merge_id=*/1), "12345"), PushReturnCode::kSuccess);
  EXPECT_EQ(Append(*merger, Push(0, 1, /*merge_id=*/1), "12345"), PushReturnCode::kSuccess);
}

// The merge dirs' file system keeps --spark-push-min-free-disk free: a block that would
// leave less is refused, and waits neither on that disk.
TEST_F(PushMergerTest, ABlockThatWouldLeaveTheDiskTooFullIsRefused) {
  struct statvfs disk {};
  ASSERT_EQ(::statvfs(root_.path().c_str(), &disk), 0);
  const uint64_t available = static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
  PushMerger::Options options;
  options.min_free_disk = 0;
  std::unique_ptr<PushMerger> roomy = Merger(options);
  ASSERT_EQ(Append(*roomy, Push(0, 0), "12345"), PushReturnCode::kSuccess);
  // A floor above what is free now (the disk cannot gain that much meanwhile).
  options.min_free_disk = available + (uint64_t{1} << 40);
  std::unique_ptr<PushMerger> merger = Merger(options);
  absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(Push(0, 1), true);
  ASSERT_TRUE(admitted.ok() && admitted->partition != nullptr) << admitted.status();
  absl::StatusOr<PushMerger::Target> target = merger->TargetOf(*admitted->partition, 0, 5, true);
  EXPECT_EQ(target.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(target.status().message(), "--spark-push-min-free-disk"))
      << target.status();
  absl::StatusOr<PushMerger::Deferral> waiting =
      merger->DeferOnDisk(*admitted->partition, "127.0.0.1", 5);
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(waiting.status().message(), "--spark-push-min-free-disk"))
      << waiting.status();
}

// Blocks waiting for their partition: in memory up to its bounds, then in unnamed files
// in the partition's directory up to theirs, each in all and per client; a lease given
// back frees its bytes.
TEST_F(PushMergerTest, WaitingBlocksAreBoundedInMemoryAndOnDisk) {
  PushMerger::Options options;
  options.max_deferred_memory = 150;
  options.max_deferred_memory_per_client = 100;
  options.max_deferred_disk = 1500;
  options.max_deferred_disk_per_client = 1000;
  std::unique_ptr<PushMerger> merger = Merger(options);
  absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(Push(0, 0), true);
  ASSERT_TRUE(admitted.ok() && admitted->partition != nullptr);
  absl::StatusOr<PushMerger::Deferral> a = merger->DeferInMemory("a", 100);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->spill.valid());
  EXPECT_EQ(merger->DeferInMemory("a", 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(merger->DeferInMemory("b", 50).ok());  // within the total, another client
  EXPECT_EQ(merger->DeferInMemory("c", 60).status().code(), absl::StatusCode::kResourceExhausted);

  absl::StatusOr<PushMerger::Deferral> on_disk =
      merger->DeferOnDisk(*admitted->partition, "a", 1000);
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  ASSERT_TRUE(on_disk->spill.valid());
  // Unnamed, on the partition's file system: a link count of 0, the data file's device.
  struct stat spill {
  }, data{};
  ASSERT_EQ(::fstat(on_disk->spill.get(), &spill), 0);
  ASSERT_EQ(::stat(File(1, 0, 0, "data").c_str(), &data), 0);
  EXPECT_EQ(spill.st_nlink, 0u);
  EXPECT_EQ(spill.st_dev, data.st_dev);
  EXPECT_EQ(merger->DeferOnDisk(*admitted->partition, "a", 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(merger->DeferOnDisk(*admitted->partition, "b", 501).status().code(),
            absl::StatusCode::kResourceExhausted);
  *a = {};
  on_disk = absl::UnavailableError("given back");
  EXPECT_TRUE(merger->DeferInMemory("a", 100).ok());
  EXPECT_TRUE(merger->DeferOnDisk(*admitted->partition, "a", 1000).ok());
}

// On a connection's thread (on_worker false) nothing writes: making a partition's files,
// deleting an older merge and a commit that closes a chunk are left to a worker, with
// nothing done meanwhile; a commit within a chunk is done in place.
TEST_F(PushMergerTest, OnAConnectionsThreadNothingIsWritten) {
  PushMerger::Options options;
  options.free_space_staleness = absl::Hours(1);         // the first worker's sample serves
  std::unique_ptr<PushMerger> merger = Merger(options);  // chunks of 8 bytes
  absl::StatusOr<PushMerger::Admission> fresh = merger->Admit(Push(0, 0), /*on_worker=*/false);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(fresh->needs_worker);
  EXPECT_EQ(fresh->partition, nullptr);
  EXPECT_EQ(merger->open_partitions(), 0u);
  EXPECT_FALSE(Exists(File(1, 0, 0, "data")));
  ASSERT_EQ(Append(*merger, Push(0, 0), "a"), PushReturnCode::kSuccess);

  const auto append = [&](int32_t map, const std::string& block) {
    absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(Push(map, 0), false);
    EXPECT_TRUE(admitted.ok() && !admitted->needs_worker && admitted->partition != nullptr);
    EXPECT_TRUE(admitted->partition->turn().TryLock());
    PushMerger::Turn turn(admitted->partition);
    absl::StatusOr<PushMerger::Target> target = merger->TargetOf(
        *admitted->partition, map, static_cast<int64_t>(block.size()), /*on_worker=*/false);
    EXPECT_TRUE(target.ok() && !target->needs_worker);
    EXPECT_EQ(::pwrite(target->fd->get(), block.data(), block.size(), target->offset),
              static_cast<ssize_t>(block.size()));
    std::optional<PushReturnCode> in_place =
        merger->Commit(*admitted->partition, map, static_cast<int64_t>(block.size()),
                       target->fd->get(), /*on_worker=*/false);
    if (in_place.has_value()) return *in_place;
    // The chunk closes: nothing was recorded, and the worker records it.
    EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "index")).size(), 8u);
    return *merger->Commit(*admitted->partition, map, static_cast<int64_t>(block.size()),
                           target->fd->get(), /*on_worker=*/true);
  };
  EXPECT_EQ(append(1, "bcd"), PushReturnCode::kSuccess);  // 4 bytes: within the chunk
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "index")).size(), 8u);
  EXPECT_EQ(append(2, "efgh"), PushReturnCode::kSuccess);  // 8: the chunk closes
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "index")).size(), 16u);

  // A newer merge id deletes the older merge's files: on a worker.
  absl::StatusOr<PushMerger::Admission> newer = merger->Admit(Push(0, 0, 1), false);
  ASSERT_TRUE(newer.ok());
  EXPECT_TRUE(newer->needs_worker);
  EXPECT_TRUE(Exists(File(1, 0, 0, "data")));
  ASSERT_EQ(Append(*merger, Push(0, 0, 1), "z"), PushReturnCode::kSuccess);
  EXPECT_FALSE(Exists(File(1, 0, 0, "data")));
  EXPECT_EQ(merger->open_partitions(), 1u);
}

// The finalized merges a state file keeps: written at each finalize and removal, read
// by a new merger, claimed by the attempt when it registers; a line that is no merge is
// skipped.
TEST_F(PushMergerTest, FinalizedMergesAreKeptInTheStateFile) {
  PushMerger::Options options;
  options.state_file = root_.path() + "/push-state";
  std::unique_ptr<PushMerger> merger = Merger(options);
  ASSERT_EQ(Append(*merger, Push(0, 0), "a"), PushReturnCode::kSuccess);
  ASSERT_TRUE(merger->Finalize({kApp, 1, 3, 0}).ok());
  const std::string dirs_line =
      absl::StrCat("=\t", kApp, "\t1\t", root_.path(), "/merge_manager_1\n");
  EXPECT_EQ(testing::ReadTextFile(options.state_file),
            absl::StrCat(dirs_line, kApp, "\t1\t3\t0\n"));

  std::ofstream(options.state_file, std::ios::app) << "not a merge\n../x\t1\t2\t3\n";
  PushMerger restarted(options);
  ASSERT_TRUE(restarted.LoadState().ok());
  restarted.RegisterAttempt(kApp, 1, Dirs(1));
  // Rewritten whole at its first write: what it claimed is kept, the junk is not.
  EXPECT_EQ(testing::ReadTextFile(options.state_file),
            absl::StrCat(dirs_line, kApp, "\t1\t3\t0\n"));
  EXPECT_EQ(Append(restarted, Push(1, 0), "late"), PushReturnCode::kTooLateBlockPush);
  absl::StatusOr<PushMerger::MergedFiles> files = restarted.OpenMerged(kApp, 3, 0, 0);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->chunks(), 1);
  // Removed: gone from the file too.
  ASSERT_TRUE(restarted.Remove({kApp, 1, 3, 0}).ok());
  EXPECT_EQ(testing::ReadTextFile(options.state_file),
            absl::StrCat(dirs_line, kApp, "\t1\t3\t0\n-\t", kApp, "\t1\t3\n"));
  restarted.ApplicationEnded(kApp);
  absl::StatusOr<std::string> checked = PushMerger::CheckState(options.state_file);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(*checked, options.state_file + ": 0 finalized merges");
}

// A hand-over: the merges being written go on in the server taking over, their open
// chunks included. Pushes after it merge into the same files; duplicates of maps merged
// before are known; finalizing gives what both servers merged. A partition whose files
// do not hold what was written is dropped (its pushes are read unmerged), and the file
// is read once.
TEST_F(PushMergerTest, MergesBeingWrittenGoOnInTheServerTakingOver) {
  std::unique_ptr<PushMerger> old = Merger();                                   // chunks of 8 bytes
  ASSERT_EQ(Append(*old, Push(0, 0), "aaaaaaaaaa"), PushReturnCode::kSuccess);  // a chunk
  ASSERT_EQ(Append(*old, Push(1, 0), "bb"), PushReturnCode::kSuccess);          // open chunk
  ASSERT_EQ(Append(*old, Push(1, 5), "c"), PushReturnCode::kSuccess);
  ASSERT_EQ(Append(*old, Push(0, 7), "d"), PushReturnCode::kSuccess);
  const std::string path = root_.path() + "/open";
  ASSERT_TRUE(old->HandOverOpen(path).ok());
  ASSERT_EQ(::truncate(File(1, 0, 7, "index").c_str(), 0), 0);  // not what was written

  std::unique_ptr<PushMerger> next = Merger();
  absl::StatusOr<size_t> taken = next->TakeOpen(path);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);
  EXPECT_FALSE(Exists(path));
  EXPECT_EQ(next->open_partitions(), 2u);
  EXPECT_EQ(Append(*next, Push(1, 0), "xx"), PushReturnCode::kSuccess);  // a duplicate
  EXPECT_EQ(Append(*next, Push(2, 0), "ccc"), PushReturnCode::kSuccess);
  EXPECT_EQ(Append(*next, Push(2, 5), "e"), PushReturnCode::kSuccess);
  absl::StatusOr<spark::MergeStatuses> statuses = next->Finalize({kApp, 1, 3, 0});
  ASSERT_TRUE(statuses.ok()) << statuses.status();
  std::map<int32_t, std::pair<spark::Bitmap, int64_t>> by_reduce;
  for (size_t i = 0; i < statuses->reduce_ids.size(); ++i) {
    by_reduce[statuses->reduce_ids[i]] = {statuses->bitmaps[i], statuses->sizes[i]};
  }
  ASSERT_EQ(by_reduce.size(), 2u);
  EXPECT_EQ(by_reduce[0].first, spark::Bitmap::Of({0, 1, 2}));
  EXPECT_EQ(by_reduce[0].second, 15);
  EXPECT_EQ(by_reduce[5].first, spark::Bitmap::Of({1, 2}));
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "data")), "aaaaaaaaaabbccc");
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 0, "meta")),
            spark::Bitmap::Of({0}).Serialize() + spark::Bitmap::Of({1, 2}).Serialize());
  EXPECT_EQ(testing::ReadTextFile(File(1, 0, 5, "data")), "ce");
  // Read once: a second server finds nothing to go on with.
  std::unique_ptr<PushMerger> third = Merger();
  EXPECT_EQ(third->TakeOpen(path).value_or(99), 0u);
}

// The merge dirs an attempt's first registration set outlive a restart: a registration
// kept with other dirs (an executor of another NodeManager on the host) does not take
// the attempt's merges elsewhere; one with the same dirs does. Once the restart's
// registrations are in, an attempt none of them claimed is forgotten, and a later
// registration sets its dirs as a first one does.
TEST_F(PushMergerTest, AnAttemptsMergeDirsOutliveARestart) {
  PushMerger::Options options;
  options.state_file = root_.path() + "/push-state";
  std::unique_ptr<PushMerger> merger = Merger(options);
  ASSERT_EQ(Append(*merger, Push(0, 0), "a"), PushReturnCode::kSuccess);
  ASSERT_TRUE(merger->Finalize({kApp, 1, 3, 0}).ok());
  merger.reset();

  PushMerger restarted(options);
  ASSERT_TRUE(restarted.LoadState().ok());
  restarted.RegisterAttempt(kApp, 1, Dirs(2));
  EXPECT_EQ(restarted.MergeDirs(kApp).status().code(), absl::StatusCode::kNotFound);
  restarted.RegisterAttempt(kApp, 1, Dirs(1));
  absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> dirs = restarted.MergeDirs(kApp);
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ((*dirs)->local_dirs[0].relative, "merge_manager_1");
  restarted.ForgetUnclaimed();
  absl::StatusOr<PushMerger::MergedFiles> files = restarted.OpenMerged(kApp, 3, 0, 0);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->chunks(), 1);

  PushMerger unclaimed(options);
  ASSERT_TRUE(unclaimed.LoadState().ok());
  unclaimed.RegisterAttempt(kApp, 1, Dirs(2));
  unclaimed.ForgetUnclaimed();
  EXPECT_EQ(unclaimed.OpenMerged(kApp, 3, 0, 0).status().code(), absl::StatusCode::kNotFound);
  unclaimed.RegisterAttempt(kApp, 1, Dirs(2));
  dirs = unclaimed.MergeDirs(kApp);
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ((*dirs)->local_dirs[0].relative, "merge_manager_2");
  // Kept in turn.
  PushMerger again(options);
  ASSERT_TRUE(again.LoadState().ok());
  again.RegisterAttempt(kApp, 1, Dirs(1));
  EXPECT_EQ(again.MergeDirs(kApp).status().code(), absl::StatusCode::kNotFound);
  again.RegisterAttempt(kApp, 1, Dirs(2));
  EXPECT_TRUE(again.MergeDirs(kApp).ok());
}

// What an application keeps after a finalize is bounded: a finalized merge keeps the
// reduce ids that hold blocks (its partitions let go), a shuffle and each partition
// count against --spark-push-max-app-partitions, a push past it is refused, a finalize
// of a shuffle never pushed is answered and kept only within it, and a removal gives
// its share back.
TEST_F(PushMergerTest, WhatAFinalizeLeavesIsBounded) {
  PushMerger::Options options;
  options.max_app_partitions = 10;
  std::unique_ptr<PushMerger> merger = Merger(options);
  const auto push = [](int32_t shuffle, int32_t reduce) {
    return spark::PushBlockStream{kApp, 1, shuffle, 0, 0, reduce, 0};
  };
  for (int32_t reduce = 0; reduce < 5; ++reduce) {
    ASSERT_EQ(Append(*merger, push(3, reduce), "x"), PushReturnCode::kSuccess);
  }
  ASSERT_TRUE(merger->Finalize({kApp, 1, 3, 0}).ok());  // 6 of 10
  for (int32_t reduce = 0; reduce < 3; ++reduce) {
    ASSERT_EQ(Append(*merger, push(4, reduce), "y"), PushReturnCode::kSuccess);  // 10
  }
  absl::StatusOr<PushMerger::Admission> past = merger->Admit(push(4, 3), true);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kResourceExhausted) << past.status();
  EXPECT_TRUE(absl::StrContains(past.status().message(), "--spark-push-max-app-partitions"));
  // A shuffle never pushed: finalized with nothing, and not kept past the bound.
  absl::StatusOr<spark::MergeStatuses> never = merger->Finalize({kApp, 1, 9, 0});
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_TRUE(never->reduce_ids.empty());
  // The finalized merge removed: its files go, and its share is free again.
  ASSERT_TRUE(merger->Remove({kApp, 1, 3, 0}).ok());
  EXPECT_FALSE(Exists(File(1, 0, 4, "data")));
  EXPECT_EQ(Append(*merger, push(4, 3), "z"), PushReturnCode::kSuccess);
  // The finalized merge of the other shuffle still names its files for their deletion.
  ASSERT_TRUE(merger->Finalize({kApp, 1, 4, 0}).ok());
  spark::ExecutorDirs dirs = *Dirs(1);
  const std::string shuffle4 =
      root_.path() + "/" + dirs.Locate(spark::MergedFileName(kApp, 4, 0, 3, "data")).relative;
  EXPECT_TRUE(Exists(shuffle4));
  merger->ApplicationEnded(kApp);
  EXPECT_FALSE(Exists(shuffle4));
}

// The disk floor counts the bytes admitted and not written yet: concurrent pushes
// cannot together go below it.
TEST_F(PushMergerTest, TheDiskFloorCountsBytesAdmittedAndNotWritten) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  struct statvfs disk {};
  ASSERT_EQ(::statvfs(root_.path().c_str(), &disk), 0);
  const uint64_t available = static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
  if (available < 4 * kGiB) GTEST_SKIP() << "needs 4 GiB free here, has " << available;
  PushMerger::Options options;
  // Room for two 1 GiB blocks but not three, half a GiB either way for what else
  // writes to this disk meanwhile (nothing is written here).
  options.min_free_disk = available - 2 * kGiB - kGiB / 2;
  std::unique_ptr<PushMerger> merger = Merger(options);
  std::vector<std::shared_ptr<PushMerger::Partition>> partitions;
  std::vector<PushMerger::Target> targets;
  for (int32_t reduce = 0; reduce < 3; ++reduce) {
    absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(Push(0, reduce), true);
    ASSERT_TRUE(admitted.ok() && admitted->partition != nullptr) << admitted.status();
    partitions.push_back(admitted->partition);
  }
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<PushMerger::Target> target =
        merger->TargetOf(*partitions[i], 0, static_cast<int64_t>(kGiB), true);
    ASSERT_TRUE(target.ok()) << target.status();
    targets.push_back(*std::move(target));
  }
  absl::StatusOr<PushMerger::Target> third =
      merger->TargetOf(*partitions[2], 0, static_cast<int64_t>(kGiB), true);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_TRUE(absl::StrContains(third.status().message(), "admitted to pushes being written"));
  targets.pop_back();  // one written (or given up): its bytes count no more
  EXPECT_TRUE(merger->TargetOf(*partitions[2], 0, static_cast<int64_t>(kGiB), true).ok());
}

// The state file is a journal: a finalize appends a line, a finalize of nothing pushed
// appends none, a removal appends its deletion; the file is rewritten whole once it
// holds twice what is live, so it stays bounded however many merges come and go.
TEST_F(PushMergerTest, TheStateFileIsAppendedToAndStaysBounded) {
  PushMerger::Options options;
  options.state_file = root_.path() + "/push-state";
  std::unique_ptr<PushMerger> merger = Merger(options);
  const auto lines = [&] {
    const std::string text = testing::ReadTextFile(options.state_file);
    return std::count(text.begin(), text.end(), '\n');
  };
  ASSERT_EQ(Append(*merger, Push(0, 0), "a"), PushReturnCode::kSuccess);
  ASSERT_TRUE(merger->Finalize({kApp, 1, 3, 0}).ok());
  ASSERT_TRUE(merger->Finalize({kApp, 1, 8, 0}).ok());  // never pushed
  EXPECT_EQ(lines(), 2);                                // the attempt's dirs, shuffle 3
  long most = 0;
  for (int32_t shuffle = 10; shuffle < 610; ++shuffle) {
    ASSERT_EQ(Append(*merger, {kApp, 1, shuffle, 0, 0, 0, 0}, "b"), PushReturnCode::kSuccess);
    ASSERT_TRUE(merger->Finalize({kApp, 1, shuffle, 0}).ok());
    ASSERT_TRUE(merger->Remove({kApp, 1, shuffle, 0}).ok());
    most = std::max<long>(most, lines());
  }
  EXPECT_GT(most, 1000);
  EXPECT_LE(most, 1030);
  EXPECT_LT(lines(), 1030);
  PushMerger restarted(options);
  ASSERT_TRUE(restarted.LoadState().ok());
  restarted.RegisterAttempt(kApp, 1, Dirs(1));
  EXPECT_TRUE(restarted.OpenMerged(kApp, 3, 0, 0).ok());
  EXPECT_EQ(restarted.OpenMerged(kApp, 300, 0, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A damaged or oversized state file never keeps the server from starting: damaged lines
// are skipped (counted, a few logged), an oversized file is set aside; --check-config
// says either.
TEST_F(PushMergerTest, ADamagedOrOversizedStateFileIsSkippedOrSetAside) {
  PushMerger::Options options;
  options.state_file = root_.path() + "/push-state";
  {
    std::ofstream out(options.state_file);
    out << kApp << "\t1\t3\t0\n";
    for (int i = 0; i < 100000; ++i) out << "junk " << i << "\n";
  }
  absl::StatusOr<std::string> checked = PushMerger::CheckState(options.state_file);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(*checked, options.state_file + ": 1 finalized merges, 100000 damaged lines skipped");
  {
    PushMerger merger(options);
    EXPECT_TRUE(merger.LoadState().ok());
  }
  ASSERT_EQ(::truncate(options.state_file.c_str(), off_t{65} << 20), 0);
  checked = PushMerger::CheckState(options.state_file);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_TRUE(absl::StrContains(*checked, "would be set aside")) << *checked;
  PushMerger merger(options);
  EXPECT_TRUE(merger.LoadState().ok());
  EXPECT_FALSE(Exists(options.state_file));
  EXPECT_TRUE(Exists(options.state_file + ".set-aside"));
}

// A serving fiber never samples a file system's free space (fstatvfs): without a fresh
// sample, a push's target is left to a worker, which samples it; with one, the fiber
// admits the block by it.
TEST_F(PushMergerTest, OnlyAWorkerSamplesTheFreeSpace) {
  for (const absl::Duration staleness : {absl::ZeroDuration(), absl::Hours(1)}) {
    PushMerger::Options options;
    options.free_space_staleness = staleness;
    options.min_free_disk = 0;
    std::unique_ptr<PushMerger> merger = Merger(options);
    ASSERT_EQ(Append(*merger, Push(0, 0), "a"), PushReturnCode::kSuccess);  // sampled
    absl::StatusOr<PushMerger::Admission> admitted = merger->Admit(Push(1, 0), false);
    ASSERT_TRUE(admitted.ok() && admitted->partition != nullptr) << admitted.status();
    ASSERT_TRUE(admitted->partition->turn().TryLock());
    PushMerger::Turn turn(admitted->partition);
    absl::StatusOr<PushMerger::Target> on_fiber =
        merger->TargetOf(*admitted->partition, 1, 1, /*on_worker=*/false);
    ASSERT_TRUE(on_fiber.ok()) << on_fiber.status();
    // Stale (a zero staleness): the worker's; fresh: the fiber's.
    EXPECT_EQ(on_fiber->needs_worker, staleness == absl::ZeroDuration());
    absl::StatusOr<PushMerger::Target> on_worker =
        merger->TargetOf(*admitted->partition, 1, 1, /*on_worker=*/true);
    ASSERT_TRUE(on_worker.ok()) << on_worker.status();
    EXPECT_FALSE(on_worker->needs_worker);
  }
}

}  // namespace
}  // namespace ferry
