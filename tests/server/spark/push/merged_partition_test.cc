// A merged partition's files, byte for byte as Spark's RemoteBlockPushResolver writes
// them for the same blocks: the data, the chunk offsets, one bitmap per chunk.
#include "server/spark/push/merged_partition.h"

#include <endian.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

std::string Offsets(const std::vector<int64_t>& offsets) {
  std::string out;
  for (int64_t o : offsets) {
    const uint64_t be = htobe64(static_cast<uint64_t>(o));
    out.append(reinterpret_cast<const char*>(&be), 8);
  }
  return out;
}

class MergedPartitionTest : public ::testing::Test {
 protected:
  // With !meta_writable the meta file is open read-only: every bitmap write fails.
  std::unique_ptr<MergedPartition> Create(int64_t min_chunk_bytes, bool meta_writable = true) {
    MergedPartition::Files files;
    for (auto [fd, suffix] : {std::pair{&files.data, ".data"}, std::pair{&files.index, ".index"},
                              std::pair{&files.meta, ".meta"}}) {
      const int mode = fd == &files.meta && !meta_writable ? O_RDONLY : O_RDWR;
      *fd = UniqueFd(::open((dir_.path() + "/p" + suffix).c_str(),
                            mode | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    }
    auto partition = MergedPartition::Create(std::move(files), min_chunk_bytes, "p");
    EXPECT_TRUE(partition.ok()) << partition.status();
    return partition.ok() ? *std::move(partition) : nullptr;
  }
  // Writes a block at the partition's end, as a push does, and commits it.
  void Push(MergedPartition& p, uint32_t map_index, const std::string& bytes) {
    ASSERT_EQ(::pwrite(p.data_fd(), bytes.data(), bytes.size(), p.end()),
              static_cast<ssize_t>(bytes.size()));
    ASSERT_TRUE(p.Commit(map_index, static_cast<int64_t>(bytes.size())).ok());
  }
  std::string Read(const char* suffix) {
    return testing::ReadTextFile(dir_.path() + "/p" + suffix);
  }

  testing::TempDir dir_;
};

TEST_F(MergedPartitionTest, ChunksCloseAtTheMinimumSizeAndAtFinalize) {
  std::unique_ptr<MergedPartition> p = Create(/*min_chunk_bytes=*/10);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(Read(".index"), Offsets({0}));  // written at creation
  Push(*p, 3, "aaaa");                      // 4 bytes: the chunk stays open
  Push(*p, 1, "bbbbbbb");                   // 11: closes chunk 0 = maps {1, 3}
  Push(*p, 7, "cccccccccccc");              // 12 more: closes chunk 1 = {7}
  Push(*p, 2, "dd");                        // open: finalize closes chunk 2 = {2}
  EXPECT_TRUE(p->Has(7));
  EXPECT_FALSE(p->Has(4));
  EXPECT_EQ(p->chunks(), 2);
  absl::StatusOr<MergedPartition::Final> final = p->Finalize();
  ASSERT_TRUE(final.ok()) << final.status();
  EXPECT_EQ(final->size, 25);
  EXPECT_EQ(final->map_indexes, spark::Bitmap::Of({1, 2, 3, 7}));
  EXPECT_EQ(Read(".data"), "aaaabbbbbbbccccccccccccdd");
  EXPECT_EQ(Read(".index"), Offsets({0, 11, 23, 25}));
  EXPECT_EQ(Read(".meta"), spark::Bitmap::Of({1, 3}).Serialize() +
                               spark::Bitmap::Of({7}).Serialize() +
                               spark::Bitmap::Of({2}).Serialize());
  EXPECT_FALSE(p->Commit(9, 1).ok());  // finalized
}

TEST_F(MergedPartitionTest, BytesPastTheLastCommittedBlockAreCut) {
  std::unique_ptr<MergedPartition> p = Create(1 << 20);
  ASSERT_NE(p, nullptr);
  Push(*p, 0, "whole");
  // A push cut off after part of its block: written, never committed.
  ASSERT_EQ(::pwrite(p->data_fd(), "partial", 7, p->end()), 7);
  absl::StatusOr<MergedPartition::Final> final = p->Finalize();
  ASSERT_TRUE(final.ok());
  EXPECT_EQ(final->size, 5);
  EXPECT_EQ(Read(".data"), "whole");
  EXPECT_EQ(Read(".index"), Offsets({0, 5}));
  EXPECT_EQ(Read(".meta"), spark::Bitmap::Of({0}).Serialize());
}

TEST_F(MergedPartitionTest, AnEmptyPartitionFinalizesEmpty) {
  std::unique_ptr<MergedPartition> p = Create(10);
  ASSERT_NE(p, nullptr);
  absl::StatusOr<MergedPartition::Final> final = p->Finalize();
  ASSERT_TRUE(final.ok());
  EXPECT_EQ(final->size, 0);
  EXPECT_TRUE(final->map_indexes.empty());
  EXPECT_EQ(Read(".index"), Offsets({0}));
  EXPECT_EQ(Read(".meta"), "");
}

// Spark reports a partition's maps merged even when its last chunk could not be
// recorded and is cut; Ferry reports only the maps of the chunks that are there, so
// that the reducers fetch the others' blocks unmerged.
TEST_F(MergedPartitionTest, AChunkThatCannotBeRecordedIsCutAndItsMapsAreNotReported) {
  std::unique_ptr<MergedPartition> p = Create(10, /*meta_writable=*/false);
  ASSERT_NE(p, nullptr);
  Push(*p, 1, "ab");  // open
  ASSERT_EQ(::pwrite(p->data_fd(), "0123456789", 10, p->end()), 10);
  // The block is merged, but its chunk's bitmap cannot be written: the chunk stays open.
  EXPECT_FALSE(p->Commit(2, 10).ok());
  EXPECT_TRUE(p->Has(2));
  EXPECT_EQ(p->chunks(), 0);
  absl::StatusOr<MergedPartition::Final> final = p->Finalize();
  ASSERT_TRUE(final.ok()) << final.status();
  EXPECT_EQ(final->size, 0);
  EXPECT_TRUE(final->map_indexes.empty());
  EXPECT_EQ(Read(".data"), "");
  EXPECT_EQ(Read(".index"), Offsets({0}));
}

}  // namespace
}  // namespace ferry
