// BlockId: what a shuffle block is, to both the server and the client: reduce partitions
// [start_reduce_id, end_reduce_id) of the map output (shuffle_id, map_id). A range of
// more than one partition is one contiguous segment of the data file (Spark's batch
// fetch).
#ifndef FERRY_COMMON_BLOCK_ID_H_
#define FERRY_COMMON_BLOCK_ID_H_

#include <cstdint>
#include <string>

namespace ferry {

struct BlockId {
  int32_t shuffle_id = 0;
  int64_t map_id = 0;
  int32_t start_reduce_id = 0;
  int32_t end_reduce_id = 0;  // exclusive
};

// "shuffle 3 map 7 reduce 2", or "shuffle 3 map 7 reduce [0, 4)" for a range: how
// errors on both sides name a block.
std::string BlockName(const BlockId& id);

}  // namespace ferry

#endif  // FERRY_COMMON_BLOCK_ID_H_
