// MergedPartition: one reduce partition of a shuffle merge (push-based shuffle), its
// three files in Spark's format, as Spark's RemoteBlockPushResolver writes them
// (AppShufflePartitionInfo), so that Spark's reducers read them as they read Spark's:
//   .data   the pushed blocks, whole, one after another;
//   .index  big-endian int64 chunk offsets, the first 0: chunk i is [index[i], index[i+1]);
//   .meta   per chunk, the RoaringBitmap (portable format) of the map indexes in it.
// A chunk closes when it holds at least min_chunk_bytes (after the block that makes it
// so) and at Finalize. What was written past the last committed block (a push cut off)
// is cut at Finalize.
//
// Not thread-safe: its merge (PushMerger) orders the appends to one partition and calls
// it under its lock; what writes (Create, a Commit that closes a chunk, Finalize) from a
// blocking worker, as the writes reach a disk.
#ifndef FERRY_SERVER_SPARK_PUSH_MERGED_PARTITION_H_
#define FERRY_SERVER_SPARK_PUSH_MERGED_PARTITION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/spark/bitmap.h"
#include "common/unique_fd.h"

namespace ferry {

class MergedPartition {
 public:
  struct Files {
    UniqueFd data;
    UniqueFd index;
    UniqueFd meta;
  };
  // `files` are empty, open for writing; `name` names the partition in errors. Writes
  // the index's first offset, 0.
  static absl::StatusOr<std::unique_ptr<MergedPartition>> Create(Files files,
                                                                 int64_t min_chunk_bytes,
                                                                 std::string name);

  // Where a partition being written stands: what a server handing it over to another
  // passes on. The files hold the closed chunks; the open chunk's maps are here only.
  struct Progress {
    int64_t end = 0;          // after the last committed block
    int64_t chunk_start = 0;  // the last index entry
    int64_t index_end = 0;    // bytes of the index written
    int64_t meta_end = 0;     // bytes of the meta file written
    int64_t chunks = 0;       // closed
    spark::Bitmap merged;
    spark::Bitmap chunk_maps;  // the open chunk's
  };
  Progress progress() const;
  // Goes on with a partition another server wrote up to `progress`, in `files` (open for
  // writing, not cut): DATA_LOSS, naming it, when they do not hold what it says.
  static absl::StatusOr<std::unique_ptr<MergedPartition>> Resume(Files files,
                                                                 int64_t min_chunk_bytes,
                                                                 std::string name,
                                                                 Progress progress);

  // Where the next block goes in the data file, and the descriptor to write it with.
  int64_t end() const { return end_; }
  int data_fd() const { return data_->get(); }
  // The data file's descriptor, shared: a writer holding it outside the partition's
  // lock keeps it open past a Finalize that lets the partition go.
  const std::shared_ptr<const UniqueFd>& shared_data() const { return data_; }
  // Whether a block of `map_index` is merged already.
  bool Has(uint32_t map_index) const { return merged_.Contains(map_index); }
  const spark::Bitmap& merged() const { return merged_; }
  // Chunks closed so far.
  int64_t chunks() const { return chunks_; }
  // Whether committing a block of `length` bytes closes a chunk (and so writes).
  bool ClosesChunkWith(int64_t length) const {
    return end_ + length - chunk_start_ >= min_chunk_bytes_;
  }

  // Records `length` bytes of `map_index`'s block, written at end(): the block is
  // merged, and closes a chunk if the chunk now holds min_chunk_bytes. An error writing
  // the chunk's index or meta entry is returned, the block staying merged and the chunk
  // open (the next boundary rewrites the entries at their places), as in Spark.
  absl::Status Commit(uint32_t map_index, int64_t length);

  // What a finalized partition holds: the map indexes merged and its bytes.
  struct Final {
    spark::Bitmap map_indexes;
    int64_t size = 0;
  };
  // Closes the last chunk and cuts what follows the last committed block (and any entry
  // past the last written one) from the three files; the partition takes no more
  // blocks. Nothing is synced, as Spark syncs nothing: the files outlive a restart of
  // ferry_server, not of the machine, like the map outputs they merge.
  absl::StatusOr<Final> Finalize();

 private:
  MergedPartition(Files files, int64_t min_chunk_bytes, std::string name)
      : data_(std::make_shared<const UniqueFd>(std::move(files.data))),
        index_(std::move(files.index)),
        meta_(std::move(files.meta)),
        min_chunk_bytes_(min_chunk_bytes),
        name_(std::move(name)) {}
  // Writes the index entry `offset` and, with a map index, the chunk's bitmap.
  absl::Status CloseChunk(int64_t offset, bool with_bitmap);

  const std::shared_ptr<const UniqueFd> data_;
  const UniqueFd index_;
  const UniqueFd meta_;
  const int64_t min_chunk_bytes_;
  const std::string name_;
  int64_t end_ = 0;          // after the last committed block
  int64_t chunk_start_ = 0;  // the last index entry
  int64_t index_end_ = 0;    // bytes of the index file written
  int64_t meta_end_ = 0;     // bytes of the meta file written
  int64_t chunks_ = 0;
  spark::Bitmap merged_;      // every map index merged
  spark::Bitmap chunk_maps_;  // the open chunk's
  bool finalized_ = false;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_PUSH_MERGED_PARTITION_H_
