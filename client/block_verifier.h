// BlockVerifier: checks a block's bytes against the checksums stored when its map output
// was written, one per partition, as the bytes stream in. A block of several partitions
// (a batch-fetched segment) is checked at each partition boundary.
#ifndef FERRY_CLIENT_BLOCK_VERIFIER_H_
#define FERRY_CLIENT_BLOCK_VERIFIER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/checksum.h"
#include "proto/ferry.pb.h"

namespace ferry {

// The first partition whose received bytes failed their stored checksum.
struct ChecksumMismatch {
  int32_t reduce_id = 0;
  uint32_t received = 0;
};

class BlockVerifier {
 public:
  // `info` and `name` (which labels errors: block and server) must outlive the
  // verifier; neither is copied, since one verifier is made per block. A verifier built
  // with `enabled` false checks nothing.
  BlockVerifier(const ferry::v1::BlockInfo& info, const std::string& name, bool enabled = true);

  // False when disabled or the block has no stored checksums: nothing to verify.
  bool active() const;

  // Feeds the block's next bytes. Returns DATA_LOSS naming the partition at the first
  // mismatch, and keeps returning it.
  absl::Status Update(absl::string_view data);
  // Call after the last byte: checks that every partition was seen whole.
  absl::Status Finish();

  // Set once a partition's bytes failed their checksum (not for a short block).
  const std::optional<ChecksumMismatch>& mismatch() const { return mismatch_; }

 private:
  absl::Status EndPartition();

  const ferry::v1::BlockInfo& info_;
  const std::string& name_;
  bool enabled_;
  ChecksumAlgorithm algorithm_;
  int partition_ = 0;
  uint64_t left_in_partition_ = 0;
  Checksum running_;
  absl::Status status_;
  std::optional<ChecksumMismatch> mismatch_;
};

}  // namespace ferry

#endif  // FERRY_CLIENT_BLOCK_VERIFIER_H_
