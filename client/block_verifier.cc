#include "client/block_verifier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace ferry {

BlockVerifier::BlockVerifier(const ferry::v1::BlockInfo& info, const std::string& name,
                             bool enabled)
    : info_(info),
      name_(name),
      enabled_(enabled),
      algorithm_(static_cast<ChecksumAlgorithm>(info.checksum_algorithm())),
      running_(algorithm_) {
  if (active()) left_in_partition_ = info_.partitions(0).length();
}

bool BlockVerifier::active() const {
  return enabled_ && algorithm_ != ChecksumAlgorithm::kNone && info_.partitions_size() > 0;
}

absl::Status BlockVerifier::EndPartition() {
  const ferry::v1::PartitionChecksum& p = info_.partitions(partition_);
  if (running_.Value() != p.checksum()) {
    mismatch_ = ChecksumMismatch{info_.id().start_reduce_id() + partition_, running_.Value()};
    status_ = absl::DataLossError(absl::StrFormat(
        "%s: partition %d of the block (%d bytes) fails its %s check: stored 0x%08x, "
        "received bytes give 0x%08x",
        name_, info_.id().start_reduce_id() + partition_, p.length(),
        ChecksumAlgorithmName(algorithm_), p.checksum(), running_.Value()));
    return status_;
  }
  ++partition_;
  running_ = Checksum(algorithm_);
  left_in_partition_ =
      partition_ < info_.partitions_size() ? info_.partitions(partition_).length() : 0;
  return absl::OkStatus();
}

absl::Status BlockVerifier::Update(absl::string_view data) {
  if (!active() || !status_.ok()) return status_;
  while (!data.empty()) {
    // Empty partitions are closed as soon as they are reached.
    while (left_in_partition_ == 0) {
      if (partition_ >= info_.partitions_size()) {
        status_ = absl::DataLossError(
            absl::StrCat(name_, ": more bytes than the block's partitions hold"));
        return status_;
      }
      FERRY_RETURN_IF_ERROR(EndPartition());
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(data.size(), left_in_partition_));
    running_.Update(data.substr(0, n));
    data.remove_prefix(n);
    left_in_partition_ -= n;
  }
  return absl::OkStatus();
}

absl::Status BlockVerifier::Finish() {
  if (!active() || !status_.ok()) return status_;
  while (partition_ < info_.partitions_size()) {
    if (left_in_partition_ != 0) {
      status_ = absl::DataLossError(absl::StrCat(name_, ": block ended ", left_in_partition_,
                                                 " bytes short of partition ",
                                                 info_.id().start_reduce_id() + partition_));
      return status_;
    }
    FERRY_RETURN_IF_ERROR(EndPartition());
  }
  return absl::OkStatus();
}

}  // namespace ferry
