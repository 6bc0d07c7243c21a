#include "common/spark/layout.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ferry::spark {

int32_t NonNegativeHash(absl::string_view ascii) {
  uint32_t h = 0;  // Java's int arithmetic wraps; unsigned arithmetic here does the same
  for (char c : ascii) h = 31 * h + static_cast<unsigned char>(c);
  const int32_t signed_hash = static_cast<int32_t>(h);
  if (signed_hash == INT32_MIN) return 0;
  return signed_hash < 0 ? -signed_hash : signed_hash;
}

absl::StatusOr<std::string> ExecutorFilePath(const std::vector<std::string>& local_dirs,
                                             int32_t sub_dirs_per_local_dir,
                                             absl::string_view name) {
  if (local_dirs.empty() || sub_dirs_per_local_dir <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("an executor needs local dirs and a positive subDirsPerLocalDir (",
                     local_dirs.size(), " dirs, ", sub_dirs_per_local_dir, ")"));
  }
  const bool plain = !name.empty() && name != "." && name != ".." &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return static_cast<unsigned char>(c) > 0x20 &&
                              static_cast<unsigned char>(c) < 0x7f && c != '/';
                     });
  if (!plain) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name.substr(0, 100), "' is not a plain ASCII file name"));
  }
  const FilePlacement at = PlaceFile(local_dirs.size(), sub_dirs_per_local_dir, name);
  return absl::StrFormat("%s/%02x/%s", local_dirs[at.local_dir], at.sub_dir, name);
}

FilePlacement PlaceFile(size_t local_dirs, int32_t sub_dirs_per_local_dir, absl::string_view name) {
  const int32_t h = NonNegativeHash(name);
  const int32_t n = static_cast<int32_t>(local_dirs);
  return FilePlacement{static_cast<size_t>(h % n), (h / n) % sub_dirs_per_local_dir};
}

ShuffleFileLocation ExecutorDirs::Locate(absl::string_view name) const {
  const FilePlacement at = PlaceFile(local_dirs.size(), sub_dirs_per_local_dir, name);
  const LocalDir& dir = local_dirs[at.local_dir];
  const std::string sub = absl::StrFormat("%02x/%s", at.sub_dir, name);
  return ShuffleFileLocation{dir.root_fd, absl::StrCat(dir.relative, "/", sub),
                             absl::StrCat(dir.path, "/", sub)};
}

absl::StatusOr<SparkBlockId> ParseBlockId(absl::string_view id) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("block id '", id.substr(0, 100), "' ", why));
  };
  const std::vector<absl::string_view> parts = absl::StrSplit(id, '_');
  if (parts[0] == "rdd" && parts.size() == 3) {
    RddBlockId r;
    if (!absl::SimpleAtoi(parts[1], &r.rdd_id) || !absl::SimpleAtoi(parts[2], &r.split_index) ||
        r.rdd_id < 0 || r.split_index < 0) {
      return bad("has no valid rdd and split numbers");
    }
    return r;
  }
  if (parts[0] != "shuffle") {
    return bad("is not a shuffle or rdd block (push-merged chunks are not served)");
  }
  if (parts.size() != 4 && parts.size() != 5) {
    return bad("is not shuffle_<shuffle>_<map>_<reduce>[_<endReduce>]");
  }
  ShuffleBlockId b;
  if (!absl::SimpleAtoi(parts[1], &b.shuffle_id) || !absl::SimpleAtoi(parts[2], &b.map_id) ||
      !absl::SimpleAtoi(parts[3], &b.start_reduce_id) || b.shuffle_id < 0 || b.map_id < 0 ||
      b.start_reduce_id < 0) {
    return bad("has ids that are not non-negative numbers");
  }
  if (parts.size() == 4) {
    if (b.start_reduce_id == INT32_MAX) return bad("has a reduce id with no successor");
    b.end_reduce_id = b.start_reduce_id + 1;
    return b;
  }
  if (!absl::SimpleAtoi(parts[4], &b.end_reduce_id) || b.end_reduce_id <= b.start_reduce_id) {
    return bad("names an empty or reversed reduce range");
  }
  return b;
}

absl::StatusOr<ShuffleBlockId> ParseShuffleFileName(absl::string_view name) {
  absl::string_view id = name;
  if (!absl::ConsumeSuffix(&id, ".data") && !absl::ConsumeSuffix(&id, ".index")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name.substr(0, 100), "' is not a shuffle .data or .index file"));
  }
  absl::StatusOr<SparkBlockId> parsed = ParseBlockId(id);
  const ShuffleBlockId* shuffle = parsed.ok() ? std::get_if<ShuffleBlockId>(&*parsed) : nullptr;
  if (shuffle == nullptr || shuffle->end_reduce_id - shuffle->start_reduce_id != 1 ||
      std::count(id.begin(), id.end(), '_') != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name.substr(0, 100), "' is not shuffle_<shuffle>_<map>_<reduce>.data or .index"));
  }
  return *shuffle;
}

std::string ShuffleBlockName(const ShuffleBlockId& id) {
  if (int64_t{id.end_reduce_id} - id.start_reduce_id == 1) {
    return absl::StrCat("shuffle_", id.shuffle_id, "_", id.map_id, "_", id.start_reduce_id);
  }
  return absl::StrCat("shuffle_", id.shuffle_id, "_", id.map_id, "_", id.start_reduce_id, "_",
                      id.end_reduce_id);
}

}  // namespace ferry::spark
