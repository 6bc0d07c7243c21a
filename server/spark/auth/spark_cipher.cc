#include "server/spark/auth/spark_cipher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/spark/wire.h"
#include "common/status_macros.h"

namespace ferry {

namespace {

// A frame's length and its type byte.
constexpr size_t kProbeBytes = spark::kFrameLengthBytes + 1;

bool IsClientType(uint8_t type) {
  using spark::MessageType;
  switch (static_cast<MessageType>(type)) {
    case MessageType::kChunkFetchRequest:
    case MessageType::kRpcRequest:
    case MessageType::kStreamRequest:
    case MessageType::kOneWayMessage:
    case MessageType::kUploadStream:
    case MessageType::kMergedBlockMetaRequest:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparkCtrLayer>> SparkCtrLayer::Create(
    std::vector<Candidate> candidates, uint64_t max_frame_bytes,
    std::function<void(int version)> chosen) {
  if (candidates.empty()) return absl::InvalidArgumentError("no AuthEngine version to accept");
  std::vector<Keyed> keyed;
  for (Candidate& c : candidates) {
    FERRY_ASSIGN_OR_RETURN(spark::CtrCipher in,
                           spark::CtrCipher::Create(c.keys.key.view(), c.keys.in_iv));
    FERRY_ASSIGN_OR_RETURN(spark::CtrCipher out,
                           spark::CtrCipher::Create(c.keys.key.view(), c.keys.out_iv));
    keyed.push_back(Keyed{c.version, std::move(in), std::move(out)});
  }
  return std::unique_ptr<SparkCtrLayer>(
      new SparkCtrLayer(std::move(keyed), max_frame_bytes, std::move(chosen)));
}

absl::Status SparkCtrLayer::Choose(std::string* plain) {
  std::optional<size_t> found;
  std::string decrypted;
  for (size_t i = 0; i < keyed_.size(); ++i) {
    std::string probe(kProbeBytes, '\0');
    keyed_[i].in.Apply(pending_.data(), probe.data(), kProbeBytes);
    absl::StatusOr<uint64_t> length =
        spark::DecodeFrameLength(absl::string_view(probe).substr(0, spark::kFrameLengthBytes));
    if (!length.ok() || *length > max_frame_bytes_ ||
        !IsClientType(static_cast<uint8_t>(probe[spark::kFrameLengthBytes]))) {
      continue;
    }
    if (found.has_value()) {
      return absl::PermissionDeniedError(
          "AES-CTR: the client's first bytes are a frame under the keys of two AuthEngine "
          "versions");
    }
    found = i;
    decrypted = std::move(probe);
  }
  if (!found.has_value()) {
    std::string versions;
    for (const Keyed& k : keyed_)
      absl::StrAppend(&versions, versions.empty() ? "" : " or ", k.version);
    return absl::PermissionDeniedError(absl::StrCat(
        "AES-CTR: the client's first bytes after the AuthEngine handshake are no frame under "
        "the keys of AuthEngine version ",
        versions,
        keyed_.size() == 1 ? " (version 1 is not served here: --spark-auth-engine-v1=false)" : "",
        "; only spark.network.crypto.cipher=AES/CTR/NoPadding is served, not AES/GCM"));
  }
  Keyed kept = std::move(keyed_[*found]);
  keyed_.clear();
  keyed_.push_back(std::move(kept));
  decided_ = true;
  pending_.clear();
  *plain += decrypted;
  if (chosen_) chosen_(keyed_.front().version);
  return absl::OkStatus();
}

absl::Status SparkCtrLayer::Open(absl::string_view wire, std::string* plain) {
  if (!decided_) {
    const size_t take = std::min(wire.size(), kProbeBytes - pending_.size());
    pending_.append(wire.data(), take);
    wire.remove_prefix(take);
    if (pending_.size() < kProbeBytes) return absl::OkStatus();
    FERRY_RETURN_IF_ERROR(Choose(plain));
  }
  const size_t at = plain->size();
  plain->resize(at + wire.size());
  keyed_.front().in.Apply(wire.data(), plain->data() + at, wire.size());
  return absl::OkStatus();
}

absl::Status SparkCtrLayer::Seal(absl::string_view plain, std::string* wire) {
  // The server answers requests, so a client's frame always came first.
  if (!decided_) {
    return absl::FailedPreconditionError(
        "AES-CTR: nothing may be sent before the client's first frame");
  }
  const size_t at = wire->size();
  wire->resize(at + plain.size());
  keyed_.front().out.Apply(plain.data(), wire->data() + at, plain.size());
  return absl::OkStatus();
}

}  // namespace ferry
