#include "common/shuffle_files.h"

#include <endian.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "common/shuffle_writer.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

std::string Index(std::initializer_list<int64_t> offsets) {
  std::string out;
  for (int64_t v : offsets) {
    const uint64_t be = htobe64(static_cast<uint64_t>(v));
    out.append(reinterpret_cast<const char*>(&be), 8);
  }
  return out;
}

TEST(ParseIndexTest, AcceptsAValidIndex) {
  auto offsets = ParseIndex(Index({0, 10, 10, 25}), 25, "x.index");
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  EXPECT_EQ(*offsets, (std::vector<uint64_t>{0, 10, 10, 25}));
}

TEST(ParseIndexTest, RejectsAPartialEntry) {
  auto offsets = ParseIndex(Index({0, 10}).substr(0, 12), 10, "x.index");
  EXPECT_EQ(offsets.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(offsets.status().message().find("x.index"), std::string::npos);
}

TEST(ParseIndexTest, RejectsANonZeroStart) {
  auto offsets = ParseIndex(Index({5, 10}), 10, "x.index");
  EXPECT_EQ(offsets.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(offsets.status().message().find("offset 0"), std::string::npos);
}

TEST(ParseIndexTest, RejectsDecreasingOffsetsNamingTheEntry) {
  auto offsets = ParseIndex(Index({0, 10, 5, 20}), 20, "x.index");
  EXPECT_EQ(offsets.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(offsets.status().message().find("offset 2"), std::string::npos) << offsets.status();
}

TEST(ParseIndexTest, RejectsALastOffsetThatIsNotTheDataSize) {
  auto offsets = ParseIndex(Index({0, 10, 20}), 19, "x.index");
  EXPECT_EQ(offsets.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(offsets.status().message().find("19"), std::string::npos);
}

TEST(ParseIndexTest, RejectsNegativeAndTooFewOffsets) {
  EXPECT_FALSE(ParseIndex(Index({0, -8}), 0, "x.index").ok());
  EXPECT_FALSE(ParseIndex(Index({0}), 0, "x.index").ok());
  EXPECT_FALSE(ParseIndex("", 0, "x.index").ok());
}

TEST(ParseChecksumsTest, ChecksWidthAndCount) {
  EXPECT_TRUE(ParseChecksums(Index({1, 2}), 2, "c").ok());
  EXPECT_FALSE(ParseChecksums(Index({1, 2}), 3, "c").ok());
  auto too_wide = ParseChecksums(Index({1, int64_t{1} << 32}), 2, "c");
  EXPECT_EQ(too_wide.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(too_wide.status().message().find("checksum 1"), std::string::npos);
}

TEST(FileNamesTest, FollowSparkNaming) {
  EXPECT_EQ(DataFileName(3, 17), "shuffle_3_17_0.data");
  EXPECT_EQ(IndexFileName(3, 17), "shuffle_3_17_0.index");
  EXPECT_EQ(ChecksumFileName(3, 17, ChecksumAlgorithm::kAdler32),
            "shuffle_3_17_0.checksum.ADLER32");
  int32_t shuffle = 0;
  int64_t map = 0;
  EXPECT_TRUE(ParseIndexFileName("shuffle_3_17_0.index", &shuffle, &map));
  EXPECT_EQ(shuffle, 3);
  EXPECT_EQ(map, 17);
  EXPECT_FALSE(ParseIndexFileName("shuffle_3_17_0.data", &shuffle, &map));
  EXPECT_FALSE(ParseIndexFileName("shuffle_x_17_0.index", &shuffle, &map));
  EXPECT_FALSE(ParseIndexFileName(".shuffle_3_17_0.index.abc.tmp", &shuffle, &map));
}

class MapOutputTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(MapOutputTest, WriterOutputLoadsWithChecksums) {
  auto w = ShuffleWriter::Create(dir_.path(), 1, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Write(0, "aaa").ok());
  ASSERT_TRUE(w->Write(0, "bb").ok());
  ASSERT_TRUE(w->Write(2, "c").ok());  // partition 1 stays empty
  ASSERT_TRUE(w->Commit(4).ok());      // partition 3 too
  auto index = MapOutputIndex::Load(dir_.path(), 1, 2);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->partitions(), 4u);
  EXPECT_EQ(index->data_bytes(), 6u);
  EXPECT_EQ(index->RangeLength(0, 1), 5u);
  EXPECT_EQ(index->RangeLength(1, 2), 0u);
  EXPECT_EQ(index->RangeOffset(2), 5u);
  EXPECT_EQ(index->RangeLength(0, 4), 6u);
  EXPECT_EQ(index->checksum_algorithm(), ChecksumAlgorithm::kCrc32c);
  EXPECT_EQ(index->checksums(),
            (std::vector<uint32_t>{Checksum::Of(ChecksumAlgorithm::kCrc32c, "aaabb"), 0,
                                   Checksum::Of(ChecksumAlgorithm::kCrc32c, "c"), 0}));
}

TEST_F(MapOutputTest, UncommittedWriterLeavesNothing) {
  {
    auto w = ShuffleWriter::Create(dir_.path(), 1, 2);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write(0, "data").ok());
  }
  EXPECT_EQ(dir_.ListFiles(), std::vector<std::string>{});
  EXPECT_EQ(MapOutputIndex::Load(dir_.path(), 1, 2).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(MapOutputTest, OutOfOrderWriteIsRejected) {
  auto w = ShuffleWriter::Create(dir_.path(), 1, 2);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write(3, "x").ok());
  EXPECT_EQ(w->Write(1, "y").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Commit(3).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MapOutputTest, CommitWritesExactlyThreeFiles) {
  auto w = ShuffleWriter::Create(dir_.path(), 0, 9, ChecksumAlgorithm::kAdler32);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write(0, "x").ok());
  ASSERT_TRUE(w->Commit(1).ok());
  EXPECT_EQ(dir_.ListFiles(),
            (std::vector<std::string>{"shuffle_0_9_0.checksum.ADLER32", "shuffle_0_9_0.data",
                                      "shuffle_0_9_0.index"}));
}

TEST_F(MapOutputTest, DataFileThatDisagreesWithTheIndexIsDataLoss) {
  auto w = ShuffleWriter::Create(dir_.path(), 1, 1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write(0, "0123456789").ok());
  ASSERT_TRUE(w->Commit(1).ok());
  ASSERT_EQ(::truncate((dir_.path() + "/shuffle_1_1_0.data").c_str(), 4), 0);
  auto index = MapOutputIndex::Load(dir_.path(), 1, 1);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(index.status().message().find("shuffle_1_1_0.index"), std::string::npos);
}

TEST_F(MapOutputTest, MissingDataFileIsDataLoss) {
  auto w = ShuffleWriter::Create(dir_.path(), 1, 1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Commit(1).ok());
  ASSERT_EQ(::unlink((dir_.path() + "/shuffle_1_1_0.data").c_str()), 0);
  EXPECT_EQ(MapOutputIndex::Load(dir_.path(), 1, 1).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(MapOutputTest, MalformedChecksumFileIsDataLoss) {
  auto w = ShuffleWriter::Create(dir_.path(), 1, 1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write(0, "abc").ok());
  ASSERT_TRUE(w->Commit(2).ok());
  std::ofstream(dir_.path() + "/shuffle_1_1_0.checksum.CRC32C", std::ios::trunc) << "short";
  auto index = MapOutputIndex::Load(dir_.path(), 1, 1);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(index.status().message().find("checksum.CRC32C"), std::string::npos);
}

}  // namespace
}  // namespace ferry
