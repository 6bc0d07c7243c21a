#include "server/block_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {

namespace {

// Moves `it` to the front of `lru`.
template <typename T>
void Touch(std::list<T>& lru, typename std::list<T>::iterator it) {
  lru.splice(lru.begin(), lru, it);
}

}  // namespace

BlockStore::BlockStore(Options options) : options_(std::move(options)) {}

bool BlockStore::IsValidAppId(absl::string_view app_id) {
  if (app_id.empty() || app_id.size() > 128 || app_id == "." || app_id == "..") return false;
  return std::all_of(app_id.begin(), app_id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
  });
}

absl::Status BlockStore::CheckApp(absl::string_view app_id) const {
  if (!IsValidAppId(app_id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "app id '", app_id.substr(0, 160), "' is not [A-Za-z0-9_.-]{1,128}"));
  }
  const std::string dir = absl::StrCat(options_.data_dir, "/", app_id);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("app ", app_id, " has no shuffle data here"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const MapOutputIndex>> BlockStore::GetIndex(
    absl::string_view app_id, int32_t shuffle_id, int64_t map_id) {
  IndexKey key(std::string(app_id), shuffle_id, map_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = indexes_.find(key);
    if (it != indexes_.end()) {
      Touch(index_lru_, it->second.second);
      return it->second.first;
    }
  }
  // Loaded outside the lock: a slow disk delays this request only.
  absl::StatusOr<MapOutputIndex> loaded =
      MapOutputIndex::Load(absl::StrCat(options_.data_dir, "/", app_id), shuffle_id, map_id);
  if (absl::IsNotFound(loaded.status())) {
    return absl::NotFoundError(absl::StrCat("app ", app_id, " has no map output ", map_id,
                                            " of shuffle ", shuffle_id));
  }
  if (!loaded.ok()) return loaded.status();
  auto index = std::make_shared<const MapOutputIndex>(*std::move(loaded));
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = indexes_.try_emplace(key);
  if (inserted) {
    index_lru_.push_front(key);
    it->second = {index, index_lru_.begin()};
    while (indexes_.size() > options_.max_cached_indexes) {
      indexes_.erase(index_lru_.back());
      index_lru_.pop_back();
    }
  }
  return it->second.first;
}

absl::StatusOr<std::shared_ptr<const DataFile>> BlockStore::GetFile(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    if (it != files_.end()) {
      Touch(file_lru_, it->second.second);
      return it->second.first;
    }
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  auto file = std::make_shared<DataFile>();
  file->path = path;
  file->fd = std::move(fd);
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = files_.try_emplace(path);
  if (inserted) {
    file_lru_.push_front(path);
    it->second = {std::move(file), file_lru_.begin()};
    while (files_.size() > options_.max_open_files) {
      files_.erase(file_lru_.back());
      file_lru_.pop_back();
    }
  }
  return it->second.first;
}

absl::StatusOr<ResolvedBlock> BlockStore::Resolve(absl::string_view app_id, const BlockId& key) {
  if (absl::Status s = CheckApp(app_id); !s.ok()) return s;
  return ResolveInApp(app_id, key);
}

absl::StatusOr<std::vector<ResolvedBlock>> BlockStore::ResolveAll(absl::string_view app_id,
                                                                  absl::Span<const BlockId> keys) {
  // One check of the app for the whole list: a stream names up to thousands of blocks.
  if (absl::Status s = CheckApp(app_id); !s.ok()) return s;
  std::vector<ResolvedBlock> resolved;
  resolved.reserve(keys.size());
  for (const BlockId& key : keys) {
    absl::StatusOr<ResolvedBlock> r = ResolveInApp(app_id, key);
    if (!r.ok()) return r.status();
    resolved.push_back(*std::move(r));
  }
  return resolved;
}

absl::StatusOr<ResolvedBlock> BlockStore::ResolveInApp(absl::string_view app_id,
                                                       const BlockId& key) {
  if (key.shuffle_id < 0 || key.map_id < 0 || key.start_reduce_id < 0 ||
      key.end_reduce_id <= key.start_reduce_id) {
    return absl::InvalidArgumentError(absl::StrCat("invalid block ", BlockName(key)));
  }
  absl::StatusOr<std::shared_ptr<const MapOutputIndex>> index =
      GetIndex(app_id, key.shuffle_id, key.map_id);
  if (!index.ok()) return index.status();
  const MapOutputIndex& out = **index;
  const size_t start = static_cast<size_t>(key.start_reduce_id);
  const size_t end = static_cast<size_t>(key.end_reduce_id);
  if (end > out.partitions()) {
    return absl::InvalidArgumentError(absl::StrCat("block ", BlockName(key), " of app ", app_id,
                                                   " is past the map output's ",
                                                   out.partitions(), " partitions"));
  }
  absl::StatusOr<std::shared_ptr<const DataFile>> file = GetFile(out.data_path());
  if (!file.ok()) return file.status();

  ResolvedBlock r;
  r.block.file = *std::move(file);
  r.block.offset = out.RangeOffset(start);
  r.block.length = out.RangeLength(start, end);
  r.block.name = absl::StrCat(BlockName(key), " of app ", app_id);
  r.checksum_algorithm = out.checksum_algorithm();
  if (out.checksum_algorithm() != ChecksumAlgorithm::kNone) {
    for (size_t p = start; p < end; ++p) {
      r.partitions.push_back({out.RangeLength(p, p + 1), out.checksums()[p]});
    }
    if (end - start == 1) {
      r.block.has_checksum = true;
      r.block.checksum_algorithm = out.checksum_algorithm();
      r.block.checksum = out.checksums()[start];
    }
  }
  return r;
}

absl::StatusOr<std::vector<ShuffleInfo>> BlockStore::ListShuffles(absl::string_view app_id) {
  if (absl::Status s = CheckApp(app_id); !s.ok()) return s;
  const std::string dir = absl::StrCat(options_.data_dir, "/", app_id);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("list ", dir));
  std::map<int32_t, std::map<int64_t, MapOutputInfo>> found;
  std::vector<std::pair<int32_t, int64_t>> outputs;
  while (dirent* entry = ::readdir(d)) {
    int32_t shuffle_id = 0;
    int64_t map_id = 0;
    if (ParseIndexFileName(entry->d_name, &shuffle_id, &map_id)) {
      outputs.emplace_back(shuffle_id, map_id);
    }
  }
  ::closedir(d);
  for (const auto& [shuffle_id, map_id] : outputs) {
    absl::StatusOr<std::shared_ptr<const MapOutputIndex>> index =
        GetIndex(app_id, shuffle_id, map_id);
    if (!index.ok()) return index.status();
    MapOutputInfo info;
    info.map_id = map_id;
    info.partitions = static_cast<int32_t>((*index)->partitions());
    info.data_bytes = (*index)->data_bytes();
    info.checksum_algorithm = (*index)->checksum_algorithm();
    found[shuffle_id][map_id] = info;
  }
  std::vector<ShuffleInfo> shuffles;
  for (auto& [shuffle_id, maps] : found) {
    ShuffleInfo s;
    s.shuffle_id = shuffle_id;
    for (auto& [map_id, info] : maps) s.map_outputs.push_back(info);
    shuffles.push_back(std::move(s));
  }
  return shuffles;
}

size_t BlockStore::open_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.size();
}

}  // namespace ferry
