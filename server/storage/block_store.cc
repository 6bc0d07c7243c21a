#include "server/storage/block_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/dir_entries.h"
#include "common/option_check.h"
#include "common/shuffle_files.h"
#include "common/status_macros.h"
#include "server/storage/ids.h"

namespace ferry {

struct BlockStore::Entry {
  MapOutputIndex index;
  std::shared_ptr<const DataFile> data;
  FileIdentity index_identity;
  FileIdentity data_identity;
  // What the index and checksums hold, for the cache's byte bound.
  uint64_t bytes = 0;
};

namespace {

// How long a map output whose index and data disagree gets to finish a two-step commit.
constexpr absl::Duration kCommitWait = absl::Milliseconds(20);

bool SameFile(const ShuffleFileLocation& at, const FileIdentity& identity) {
  struct stat st;
  return ::fstatat(at.dir_fd, at.relative.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)} ==
             identity;
}

}  // namespace

absl::Status BlockStore::Options::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckRange("max-open-files", max_cached_map_outputs, 1, kMaxLimit));
  if (max_data_files < 1 || max_cached_index_bytes < 1) {
    return absl::InvalidArgumentError("the block store needs room for one data file and its index");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BlockStore>> BlockStore::Open(Options options) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  UniqueFd dir(::open(options.data_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data dir '", options.data_dir, "' is not a directory (", std::strerror(errno), ")"));
  }
  return std::unique_ptr<BlockStore>(new BlockStore(std::move(options), std::move(dir)));
}

BlockStore::BlockStore(Options options, UniqueFd data_dir)
    : options_(std::move(options)),
      data_dir_(std::move(data_dir)),
      live_files_(std::make_shared<std::atomic<size_t>>(0)),
      cache_(options_.max_cached_map_outputs, options_.max_cached_index_bytes) {}

absl::StatusOr<std::unique_ptr<FerryAppLayout>> BlockStore::FerryApp(absl::string_view app_id) {
  FERRY_RETURN_IF_ERROR(CheckAppId(app_id));
  const std::string name(app_id);
  // One path component, no symlink followed: O_NOFOLLOW opens a link itself, which
  // O_DIRECTORY then refuses.
  UniqueFd fd(
      ::openat(data_dir_.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.valid()) return std::make_unique<FerryAppLayout>(name, std::move(fd));
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR || err == ELOOP) {
    absl::MutexLock lock(&mu_);
    DropLocked(ShuffleOwner::Kind::kFerryApp, app_id, "");
    return absl::NotFoundError(absl::StrCat("app ", app_id, " has no shuffle data here"));
  }
  return absl::ErrnoToStatus(err, absl::StrCat("open the directory of app ", app_id));
}

absl::StatusOr<std::shared_ptr<const BlockStore::Entry>> BlockStore::GetMapOutput(
    const ShuffleLayout& layout, int32_t shuffle_id, int64_t map_id) {
  const Key key(layout.owner(), shuffle_id, map_id);
  const auto locate = [&](const std::string& name) { return layout.Locate(name); };
  std::shared_ptr<const Entry> cached;
  {
    absl::MutexLock lock(&mu_);
    if (const std::shared_ptr<const Entry>* found = cache_.Find(key)) cached = *found;
  }
  if (cached != nullptr) {
    if (SameFile(locate(IndexFileName(shuffle_id, map_id)), cached->index_identity) &&
        SameFile(locate(DataFileName(shuffle_id, map_id)), cached->data_identity)) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return cached;
    }
    // Deleted or replaced (a map task run again): load what is there now.
    absl::MutexLock lock(&mu_);
    if (const std::shared_ptr<const Entry>* found = cache_.Find(key); found && *found == cached) {
      cache_.Erase(key);
    }
  }
  {
    // Room for one more open file, made by evicting the least recently used map
    // outputs; files that open streams still hold stay open, and count.
    absl::MutexLock lock(&mu_);
    ++counts_.misses;
    while (live_files_->load(std::memory_order_relaxed) >= options_.max_data_files &&
           cache_.EvictOldest()) {
      ++counts_.evictions;
    }
    if (live_files_->load(std::memory_order_relaxed) >= options_.max_data_files) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server busy: open streams hold ", options_.max_data_files,
                       " data files open, all the open-file limit leaves for them; retry later"));
    }
    live_files_->fetch_add(1, std::memory_order_relaxed);  // this load's file
  }
  // Loaded outside the lock: a slow disk delays this request only.
  absl::StatusOr<MapOutputFiles> loaded = LoadMapOutput(locate, shuffle_id, map_id);
  if (!loaded.ok()) {
    live_files_->fetch_sub(1, std::memory_order_relaxed);
    if (absl::IsNotFound(loaded.status())) {
      return absl::NotFoundError(absl::StrCat(layout.Describe(), " has no map output ", map_id,
                                              " of shuffle ", shuffle_id, " (",
                                              loaded.status().message(), ")"));
    }
    return loaded.status();
  }
  auto entry = std::make_shared<Entry>();
  entry->index = std::move(loaded->index);
  entry->index_identity = loaded->index_identity;
  entry->data_identity = loaded->data_identity;
  entry->bytes = (entry->index.partitions() + 1) * sizeof(uint64_t) +
                 entry->index.checksums().size() * sizeof(uint32_t);
  entry->data = std::shared_ptr<const DataFile>(
      new DataFile{entry->index.data_path(), std::move(loaded->data), loaded->data_identity},
      [live = live_files_](const DataFile* f) {
        delete f;
        live->fetch_sub(1, std::memory_order_relaxed);
      });

  absl::MutexLock lock(&mu_);
  // Another call may have loaded it meanwhile: this one replaces it.
  counts_.evictions += cache_.Insert(key, entry, entry->bytes);
  return entry;
}

void BlockStore::DropLocked(ShuffleOwner::Kind kind, absl::string_view app_id,
                            absl::string_view exec_id) {
  cache_.EraseIf([&](const Key& key, const std::shared_ptr<const Entry>&) {
    const ShuffleOwner& owner = std::get<0>(key);
    return owner.kind == kind && owner.app_id == app_id &&
           (exec_id.empty() || owner.exec_id == exec_id);
  });
}

void BlockStore::DropSpark(absl::string_view app_id, absl::string_view exec_id) {
  absl::MutexLock lock(&mu_);
  DropLocked(ShuffleOwner::Kind::kSparkExecutor, app_id, exec_id);
}

size_t BlockStore::DropStale() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, bool> app_exists;
  return cache_.EraseIf([&](const Key& key, const std::shared_ptr<const Entry>& entry) {
    struct stat st;
    if (::fstat(entry->data->fd.get(), &st) != 0 || st.st_nlink == 0) return true;
    // A Spark executor's is kept while its data file is; a Ferry app's while its app
    // directory is too.
    const ShuffleOwner& owner = std::get<0>(key);
    if (owner.kind != ShuffleOwner::Kind::kFerryApp) return false;
    auto [it, inserted] = app_exists.try_emplace(owner.app_id, false);
    if (inserted) {
      it->second = IsDirectoryAt(data_dir_.get(), owner.app_id.c_str());
    }
    return !it->second;
  });
}

BlockStore::CacheCounts BlockStore::cache_counts() const {
  absl::MutexLock lock(&mu_);
  CacheCounts counts = counts_;
  counts.hits = hits_.load(std::memory_order_relaxed);
  return counts;
}

size_t BlockStore::cached_map_outputs() const {
  absl::MutexLock lock(&mu_);
  return cache_.size();
}

absl::StatusOr<ResolvedBlock> BlockStore::Resolve(absl::string_view app_id, const BlockId& key) {
  FERRY_ASSIGN_OR_RETURN(std::vector<ResolvedBlock> all, ResolveAll(app_id, {key}));
  return std::move(all.front());
}

absl::StatusOr<std::vector<ResolvedBlock>> BlockStore::ResolveAll(absl::string_view app_id,
                                                                  absl::Span<const BlockId> keys) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<FerryAppLayout> app, FerryApp(app_id));
  return AllResolved(ResolveBlocks(*app, keys));
}

absl::StatusOr<std::vector<ResolvedBlock>> AllResolved(
    std::vector<absl::StatusOr<ResolvedBlock>> resolved) {
  std::vector<ResolvedBlock> all;
  all.reserve(resolved.size());
  for (absl::StatusOr<ResolvedBlock>& r : resolved) {
    if (!r.ok()) return r.status();
    all.push_back(*std::move(r));
  }
  return all;
}

std::vector<absl::StatusOr<ResolvedBlock>> BlockStore::ResolveBlocks(
    const ShuffleLayout& layout, absl::Span<const BlockId> keys) {
  // A stream names up to a million blocks of a few map outputs: each map output is
  // looked up (and revalidated) once. What it gave, by (shuffle, map):
  struct Loaded {
    std::shared_ptr<const Entry> entry;
    absl::Status status;
  };
  absl::flat_hash_map<std::pair<int32_t, int64_t>, Loaded> seen;
  std::vector<absl::StatusOr<ResolvedBlock>> resolved;
  resolved.reserve(keys.size());
  for (const BlockId& key : keys) {
    if (key.shuffle_id < 0 || key.map_id < 0 || key.start_reduce_id < 0 ||
        key.end_reduce_id <= key.start_reduce_id) {
      resolved.push_back(
          absl::InvalidArgumentError(absl::StrCat("invalid block ", BlockName(key))));
      continue;
    }
    auto [it, inserted] = seen.try_emplace(std::pair(key.shuffle_id, key.map_id));
    Loaded& loaded = it->second;
    if (inserted) {
      absl::StatusOr<std::shared_ptr<const Entry>> got =
          GetMapOutput(layout, key.shuffle_id, key.map_id);
      if (absl::IsDataLoss(got.status()) && layout.CommitsInTwoSteps()) {
        absl::SleepFor(kCommitWait);
        got = GetMapOutput(layout, key.shuffle_id, key.map_id);
      }
      if (got.ok()) {
        loaded.entry = *std::move(got);
      } else {
        loaded.status = got.status();
      }
    }
    if (loaded.entry == nullptr) {
      resolved.push_back(loaded.status);
      continue;
    }
    resolved.push_back(ResolveIn(loaded.entry, layout, key));
  }
  return resolved;
}

absl::StatusOr<ResolvedBlock> BlockStore::ResolveIn(const std::shared_ptr<const Entry>& entry,
                                                    const ShuffleLayout& layout,
                                                    const BlockId& key) const {
  const MapOutputIndex& out = entry->index;
  const size_t start = static_cast<size_t>(key.start_reduce_id);
  const size_t end = static_cast<size_t>(key.end_reduce_id);
  if (end > out.partitions()) {
    return absl::InvalidArgumentError(absl::StrCat("block ", BlockName(key), " of ",
                                                   layout.Describe(), " is past the map output's ",
                                                   out.partitions(), " partitions"));
  }
  ResolvedBlock r;
  r.block.file = entry->data;
  r.block.offset = out.RangeOffset(start);
  r.block.length = out.RangeLength(start, end);
  r.block.id = key;
  if (end - start == 1 && out.checksum_algorithm() != ChecksumAlgorithm::kNone) {
    r.block.has_checksum = true;
    r.block.checksum_algorithm = out.checksum_algorithm();
    r.block.checksum = out.checksums()[start];
  }
  r.index = std::shared_ptr<const MapOutputIndex>(entry, &entry->index);
  return r;
}

absl::StatusOr<std::vector<ShuffleInfo>> BlockStore::ListShuffles(absl::string_view app_id) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<FerryAppLayout> app, FerryApp(app_id));
  std::vector<std::pair<int32_t, int64_t>> outputs;
  FERRY_RETURN_IF_ERROR(
      ForEachEntry(app->dir_fd(), absl::StrCat("app ", app_id), [&](const char* name) {
        int32_t shuffle_id = 0;
        int64_t map_id = 0;
        if (ParseIndexFileName(name, &shuffle_id, &map_id))
          outputs.emplace_back(shuffle_id, map_id);
        return true;
      }));
  std::map<int32_t, std::map<int64_t, MapOutputInfo>> found;
  for (const auto& [shuffle_id, map_id] : outputs) {
    absl::StatusOr<std::shared_ptr<const Entry>> entry = GetMapOutput(*app, shuffle_id, map_id);
    MapOutputInfo info;
    info.map_id = map_id;
    if (!entry.ok()) {
      // Too many files open is the server's state, not this output's: the call fails
      // (retryable). A deletion since the listing: not there.
      if (absl::IsResourceExhausted(entry.status())) return entry.status();
      if (absl::IsNotFound(entry.status())) continue;
      info.error = std::string(entry.status().message());
      uint64_t held_back = 0;
      if (unreadable_log_.Take(absl::Now(), &held_back)) {
        LOG(WARNING) << "app " << app_id << ": map output " << map_id << " of shuffle "
                     << shuffle_id << " cannot be read, listed as such: " << entry.status()
                     << (held_back > 0 ? absl::StrCat(" (", held_back, " more not logged)") : "");
      }
      found[shuffle_id][map_id] = std::move(info);
      continue;
    }
    const MapOutputIndex& index = (*entry)->index;
    info.partitions = static_cast<int32_t>(index.partitions());
    info.data_bytes = index.data_bytes();
    info.checksum_algorithm = index.checksum_algorithm();
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

namespace {

// The names in the directory `dir_fd` refers to.
absl::StatusOr<std::vector<std::string>> Names(int dir_fd, absl::string_view what) {
  std::vector<std::string> names;
  FERRY_RETURN_IF_ERROR(ForEachEntry(dir_fd, what, [&](const char* name) {
    names.emplace_back(name);
    return true;
  }));
  return names;
}

}  // namespace

absl::StatusOr<std::vector<AppInfo>> BlockStore::ListApps(size_t max_apps, bool* truncated) {
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> names, Names(data_dir_.get(), "the data dir"));
  std::sort(names.begin(), names.end());
  std::vector<AppInfo> apps;
  *truncated = false;
  for (const std::string& name : names) {
    if (!IsValidAppId(name)) continue;
    // One path component, no symlink followed; not a directory: not an app.
    UniqueFd app(
        ::openat(data_dir_.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!app.valid()) continue;
    absl::StatusOr<std::vector<std::string>> files = Names(app.get(), absl::StrCat("app ", name));
    if (!files.ok()) continue;  // gone since, or unreadable: listed by ListShuffles' errors
    AppInfo info;
    info.app_id = name;
    std::vector<int32_t> shuffles;
    for (const std::string& file : *files) {
      int32_t shuffle_id = 0;
      int64_t map_id = 0;
      if (!ParseIndexFileName(file, &shuffle_id, &map_id)) continue;
      ++info.map_outputs;
      shuffles.push_back(shuffle_id);
      struct stat st {};
      if (::fstatat(app.get(), DataFileName(shuffle_id, map_id).c_str(), &st,
                    AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(st.st_mode)) {
        info.data_bytes += static_cast<uint64_t>(st.st_size);
      }
    }
    if (info.map_outputs == 0) continue;
    std::sort(shuffles.begin(), shuffles.end());
    info.shuffles =
        static_cast<uint32_t>(std::unique(shuffles.begin(), shuffles.end()) - shuffles.begin());
    if (apps.size() == max_apps) {
      *truncated = true;
      break;
    }
    apps.push_back(std::move(info));
  }
  return apps;
}

void BlockStore::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  const CacheCounts cache = cache_counts();
  FERRY_APPEND_READS(FERRY_BLOCK_STORE_STATS, out);
}

}  // namespace ferry
