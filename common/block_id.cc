#include "common/block_id.h"

#include "absl/strings/str_cat.h"

namespace ferry {

std::string BlockName(const BlockId& id) {
  // In 64 bits: start_reduce_id comes from the wire and may be INT32_MAX.
  if (int64_t{id.end_reduce_id} - id.start_reduce_id == 1) {
    return absl::StrCat("shuffle ", id.shuffle_id, " map ", id.map_id, " reduce ",
                        id.start_reduce_id);
  }
  return absl::StrCat("shuffle ", id.shuffle_id, " map ", id.map_id, " reduce [",
                      id.start_reduce_id, ", ", id.end_reduce_id, ")");
}

}  // namespace ferry
