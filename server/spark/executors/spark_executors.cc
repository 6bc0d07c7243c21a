#include "server/spark/executors/spark_executors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/dir_entries.h"
#include "common/option_check.h"
#include "common/pread_full.h"
#include "common/shuffle_files.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "server/base/log_lines.h"
#include "server/base/replace_file.h"
#include "server/storage/ids.h"

namespace ferry {

namespace {

constexpr char kStateFile[] = "spark-executors";
// A state file larger than this is not a state file of this server.
constexpr uint64_t kMaxStateBytes = uint64_t{1} << 30;
// The first byte of a record that forgets an (app, exec); a registration's record starts
// with RegisterExecutor's type id (2).
constexpr char kForgetTag = '\xF0';
// The journal is rewritten when it holds more than twice the live records and this.
constexpr uint64_t kMinCompactBytes = uint64_t{1} << 20;

// An absolute path with no empty, "." or ".." component, and no NUL byte (which no
// path the kernel takes can hold).
bool IsNormalAbsolute(absl::string_view path) {
  if (path.size() < 2 || path[0] != '/' || path.back() == '/') return false;
  if (path.find('\0') != absl::string_view::npos) return false;
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// On YARN a dir belongs to the application it lies under: the NodeManager makes
// <local-dir>/usercache/<user>/appcache/<application id> for each application and
// deletes it when the application ends; its executors' dirs (blockmgr-*, and for
// push-based shuffle merge_manager_*) are made inside it. The first "usercache" below
// the root is the NodeManager's (a root may be a local dir or a dir above them).
absl::Status CheckYarnDir(absl::string_view who, absl::string_view app_id, absl::string_view dir,
                          absl::string_view relative) {
  const std::vector<absl::string_view> parts = absl::StrSplit(relative, '/');
  const auto user_cache = std::find(parts.begin(), parts.end(), "usercache");
  const size_t at = static_cast<size_t>(user_cache - parts.begin());
  if (user_cache == parts.end() || parts.size() < at + 5 || parts[at + 2] != "appcache" ||
      parts[at + 3] != app_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        who, ": local dir '", dir.substr(0, 256),
        "' is not inside the application's own dir (<NodeManager local dir>/usercache/<user>/"
        "appcache/",
        app_id, "/...); on YARN an application registers only dirs of its own"));
  }
  return absl::OkStatus();
}

// Ferry's Spark plugin keeps an executor's map outputs in ferry-<application>-<executor>
// (client/spark: FerryDirs), registered by that executor: such a dir is its alone,
// whichever registration comes first.
absl::Status CheckPluginDir(absl::string_view who, absl::string_view app_id,
                            absl::string_view exec_id, absl::string_view dir,
                            absl::string_view relative) {
  const std::string own = absl::StrCat("ferry-", app_id, "-", exec_id);
  for (absl::string_view part : absl::StrSplit(relative, '/')) {
    if (absl::StartsWith(part, "ferry-") && part != own) {
      return absl::PermissionDeniedError(absl::StrCat(
          who, ": local dir '", dir.substr(0, 256), "' is in ", part.substr(0, 256),
          ", which Ferry's Spark plugin keeps for another executor (this one's is ", own, ")"));
    }
  }
  return absl::OkStatus();
}

// Deletes `relative` beneath `parent_fd` and everything in it, never following a
// symlink (a link is removed, not what it points to). `path` names it in errors.
absl::Status DeleteTree(int parent_fd, const std::string& relative, const std::string& path,
                        int depth) {
  // Spark's dirs are two levels deep (blockmgr-*/<%02x>/); deeper is not Spark's.
  constexpr int kMaxDepth = 8;
  if (depth > kMaxDepth) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is nested deeper than ", kMaxDepth, " levels; not deleted"));
  }
  const UniqueFd dir(
      OpenBeneath(parent_fd, relative, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dir.valid()) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path, " to delete it"));
  }
  const int fd = dir.get();
  absl::Status status;
  std::vector<std::pair<std::string, bool>> entries;  // name, is a directory
  FERRY_RETURN_IF_ERROR(ForEachEntry(fd, path, [&](const char* name) {
    entries.emplace_back(name, IsDirectoryAt(fd, name));
    return true;
  }));
  for (const auto& [name, is_dir] : entries) {
    const std::string child = absl::StrCat(path, "/", name);
    absl::Status s = is_dir ? DeleteTree(fd, name, child, depth + 1) : absl::OkStatus();
    if (s.ok() && !is_dir && ::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      s = absl::ErrnoToStatus(errno, absl::StrCat("delete ", child));
    }
    if (!s.ok() && status.ok()) status = s;
  }
  if (!status.ok()) return status;
  // The directory itself, from its parent; a last component that is now a symlink is
  // removed as a link.
  const size_t slash = relative.rfind('/');
  if (slash == std::string::npos) {
    if (::unlinkat(parent_fd, relative.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      return absl::ErrnoToStatus(errno, absl::StrCat("delete ", path));
    }
    return absl::OkStatus();
  }
  const UniqueFd parent =
      OpenBeneath(parent_fd, relative.substr(0, slash), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (!parent.valid() ||
      (::unlinkat(parent.get(), relative.substr(slash + 1).c_str(), AT_REMOVEDIR) != 0 &&
       errno != ENOENT)) {
    return absl::ErrnoToStatus(errno, absl::StrCat("delete ", path));
  }
  return absl::OkStatus();
}

// The bytes of the registration's journal record: its length, then the RegisterExecutor
// payload.
uint64_t RecordBytes(const spark::RegisterExecutor& r) { return 4 + spark::EncodedSize(r); }

// A journal record: its length, then `payload`.
void AppendRecord(absl::string_view payload, std::string* out) {
  spark::WireWriter(out).String(payload);
}

std::string ForgetRecord(absl::string_view app_id, absl::string_view exec_id) {
  std::string payload(1, kForgetTag);
  spark::WireWriter writer(&payload);
  writer.String(app_id);
  writer.String(exec_id);
  std::string record;
  AppendRecord(payload, &record);
  return record;
}

}  // namespace

absl::Status ExecutorRegistry::Options::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckRange("max-spark-executors", max_executors, 1, kMaxLimit));
  return CheckRange("max-spark-registry-bytes", max_bytes, 4096, kMaxLimit);
}

absl::StatusOr<std::unique_ptr<ExecutorRegistry>> ExecutorRegistry::Open(Options options,
                                                                         const Clock& clock) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ExecutorRegistry> registry(new ExecutorRegistry(std::move(options), clock));
  // A root is the operator's (or the NodeManager's) and may be a symlink: it is followed
  // here, once, and executors' dirs are matched against it as it is named. A root that
  // is missing (a failed disk) is skipped, so that a node serves its other disks.
  std::vector<std::string> skipped;
  for (const std::string& root : registry->options_.dir_roots) {
    if (!IsNormalAbsolute(root)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Spark dir root '", root, "' is not an absolute, normalized path"));
    }
    UniqueFd fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) {
      skipped.push_back(absl::StrCat(root, " (", std::strerror(errno), ")"));
      continue;
    }
    registry->roots_.push_back({root, std::move(fd)});
  }
  if (registry->roots_.empty() && !registry->options_.dir_roots.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no Spark dir root is a directory: ", absl::StrJoin(skipped, ", ")));
  }
  if (!skipped.empty()) {
    LOG(WARNING) << "Spark dir roots skipped (executors' dirs beneath them are refused): "
                 << absl::StrJoin(skipped, ", ");
  }
  if (registry->options_.state_dir.empty()) return registry;
  const std::string path = absl::StrCat(registry->options_.state_dir, "/", kStateFile);
  FERRY_ASSIGN_OR_RETURN(const Loaded loaded, registry->Load(path));
  if (registry->options_.read_only) {
    if (!loaded.damage.empty()) {
      return absl::DataLossError(absl::StrCat(path, ": ", loaded.damage,
                                              " (set aside at start; what precedes it is kept)"));
    }
    return registry;
  }
  absl::MutexLock lock(&registry->write_mu_);
  registry->OpenJournalLocked(path, loaded);
  return registry;
}

absl::StatusOr<ExecutorRegistry::Loaded> ExecutorRegistry::Load(const std::string& path) {
  Loaded loaded;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return loaded;
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxStateBytes) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file of at most 1 GiB"));
  }
  loaded.exists = true;
  loaded.file_bytes = static_cast<uint64_t>(st.st_size);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  if (PreadFull(fd.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    return absl::DataLossError(absl::StrCat("read ", path));
  }
  // The journal replayed: the last record of each (app, exec) wins, and takes its place
  // in the order of the records (where claims on dirs are settled).
  std::map<Key, std::pair<size_t, spark::RegisterExecutor>> replayed;
  absl::string_view rest = bytes;
  size_t record = 0;
  for (; !rest.empty(); ++record) {
    const uint64_t offset = bytes.size() - rest.size();
    // A torn tail: what an append a crash interrupted leaves, a prefix of its records
    // (or zeros, where the file's size reached the disk before its data).
    const bool zeros = rest.find_first_not_of('\0') == absl::string_view::npos;
    if (rest.size() < 4 || zeros) {
      LOG(WARNING) << path << ": ignoring its last " << rest.size() << " bytes, a record a "
                   << "crash cut short";
      break;
    }
    const int32_t length = static_cast<int32_t>((uint32_t{static_cast<uint8_t>(rest[0])} << 24) |
                                                (uint32_t{static_cast<uint8_t>(rest[1])} << 16) |
                                                (uint32_t{static_cast<uint8_t>(rest[2])} << 8) |
                                                uint32_t{static_cast<uint8_t>(rest[3])});
    if (length < 2 || static_cast<uint32_t>(length) > kMaxRecordBytes) {
      loaded.damage = absl::StrCat("record ", record, " at byte ", offset, " has a length of ",
                                   length, " (2 to ", kMaxRecordBytes, " bytes are written)");
      break;
    }
    const absl::string_view payload = rest.substr(4, static_cast<size_t>(length));
    if (payload.size() < static_cast<size_t>(length)) {
      // Running past the end: the last record, cut short, if what there is of it starts
      // as a record does.
      if (payload.empty() || payload[0] == kForgetTag ||
          payload[0] == static_cast<char>(spark::BlockTransferType::kRegisterExecutor)) {
        LOG(WARNING) << path << ": ignoring its last " << rest.size()
                     << " bytes, a record a crash cut short (" << length << " bytes announced)";
      } else {
        loaded.damage = absl::StrCat("record ", record, " at byte ", offset,
                                     " is neither a registration nor a forget record");
      }
      break;
    }
    if (payload[0] == kForgetTag) {
      spark::WireReader forget(payload.substr(1));
      Key key;
      forget.String(&key.first, "appId");
      forget.String(&key.second, "execId");
      if (absl::Status s = forget.Finish("forget record"); !s.ok()) {
        loaded.damage = absl::StrCat("record ", record, " at byte ", offset, ": ", s.message());
        break;
      }
      replayed.erase(key);
    } else {
      absl::StatusOr<spark::ShuffleRpc> rpc = spark::DecodeShuffleRpc(payload);
      auto* registration = rpc.ok() ? std::get_if<spark::RegisterExecutor>(&*rpc) : nullptr;
      if (registration == nullptr) {
        loaded.damage =
            absl::StrCat("record ", record, " at byte ", offset, " is not a RegisterExecutor",
                         rpc.ok() ? "" : absl::StrCat(" (", rpc.status().message(), ")"));
        break;
      }
      Key key(registration->app_id, registration->exec_id);
      replayed[std::move(key)] = {record, *std::move(registration)};
    }
    rest.remove_prefix(4 + static_cast<size_t>(length));
    loaded.good_bytes = bytes.size() - rest.size();
  }
  InsertReplayed(path, replayed);
  return loaded;
}

void ExecutorRegistry::InsertReplayed(
    const std::string& path, std::map<Key, std::pair<size_t, spark::RegisterExecutor>>& replayed) {
  std::vector<std::pair<size_t, spark::RegisterExecutor>*> in_order;
  for (auto& [key, entry] : replayed) in_order.push_back(&entry);
  std::sort(in_order.begin(), in_order.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  // Registrations dropped: the first few logged, then counted (a file's lines are not a
  // log line each).
  constexpr size_t kDroppedLogged = 3;
  size_t dropped = 0;
  for (const auto* entry : in_order) {
    const spark::RegisterExecutor& registration = entry->second;
    // Validated again: the dirs may have been deleted (the app ended while the server
    // was down) or the roots changed since it was written. Dropping it costs that
    // executor alone.
    absl::StatusOr<Registered> valid = Validate(registration);
    absl::Status claimed =
        valid.ok() ? CheckClaimsLocked(registration.app_id, registration.info.local_dirs)
                   : valid.status();
    if (!claimed.ok()) {
      if (++dropped <= kDroppedLogged) {
        LOG(WARNING) << path << ": dropping the registration of executor "
                     << LogEscaped(registration.exec_id) << " of app "
                     << LogEscaped(registration.app_id) << ": " << LogEscaped(claimed.message());
      }
      continue;
    }
    bytes_ += valid->record_bytes;
    InsertLocked({registration.app_id, registration.exec_id}, *std::move(valid));
  }
  if (dropped > kDroppedLogged) {
    LOG(WARNING) << path << ": dropped " << dropped - kDroppedLogged << " more registrations";
  }
}

void ExecutorRegistry::OpenJournalLocked(const std::string& path, const Loaded& loaded) {
  if (!loaded.damage.empty()) {
    const std::string aside = absl::StrCat(path, ".damaged-", absl::ToUnixSeconds(clock_.Now()));
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      PLOG(ERROR) << "cannot set aside " << path;
    }
    LOG(ERROR) << path << " is damaged: " << loaded.damage << "; " << executors_.size()
               << " registrations before it are kept, and the "
               << loaded.file_bytes - loaded.good_bytes << " bytes from there on are lost; "
               << "the file is set aside as " << aside;
    journal_broken_ = true;
  } else if (!loaded.exists) {
    journal_broken_ = true;  // written whole, so that its directory entry is synced
  } else {
    journal_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
    // A torn tail is cut off (which takes no room), so that appends follow whole records.
    if (!journal_.valid() ||
        (loaded.good_bytes < loaded.file_bytes &&
         (::ftruncate(journal_.get(), static_cast<off_t>(loaded.good_bytes)) != 0 ||
          ::fdatasync(journal_.get()) != 0))) {
      PLOG(WARNING) << "cannot append to " << path << "; it is rewritten before the next change";
      journal_.Reset();
      journal_broken_ = true;
    }
    journal_bytes_ = loaded.good_bytes;
  }
  // Registrations dropped at load still have records; a compaction makes them go.
  const bool dropped = journal_bytes_ > bytes_;
  if (journal_broken_ || dropped) {
    if (absl::Status s = CompactLocked(); !s.ok()) {
      compaction_failed_at_ = journal_bytes_;
      LOG(WARNING) << "serving " << executors_.size() << " Spark executors' registrations; "
                   << "rewriting " << path << " failed (" << s << "): "
                   << (journal_broken_ ? "it is rewritten before the next change is kept"
                                       : "it is appended to as it is");
    }
  }
}

absl::StatusOr<ExecutorRegistry::Registered> ExecutorRegistry::Validate(
    const spark::RegisterExecutor& r) const {
  const std::string who =
      absl::StrCat("executor ", r.exec_id.substr(0, 64), " of app ", r.app_id.substr(0, 130));
  if (!IsValidAppId(r.app_id) || !IsValidId(r.exec_id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        who,
        ": app and executor ids must be [A-Za-z0-9_.-]{1,128} (an app's not starting with '.')"));
  }
  if (r.info.local_dirs.empty() || r.info.local_dirs.size() > spark::kMaxLocalDirs) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", r.info.local_dirs.size(),
                                                   " local dirs (1 to ", spark::kMaxLocalDirs,
                                                   " allowed)"));
  }
  if (r.info.sub_dirs_per_local_dir < 1 || r.info.sub_dirs_per_local_dir > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": subDirsPerLocalDir ", r.info.sub_dirs_per_local_dir, " (1 to 4096 allowed)"));
  }
  // Decoding bounds the shuffle manager: the largest registration fits in a record.
  static_assert(4 + 1 + 3 * (4 + 128) + 8 + spark::kMaxShuffleManagerBytes +
                    spark::kMaxLocalDirs * (4 + PATH_MAX) <=
                ExecutorRegistry::kMaxRecordBytes);
  auto dirs = std::make_shared<spark::ExecutorDirs>();
  dirs->sub_dirs_per_local_dir = r.info.sub_dirs_per_local_dir;
  for (const std::string& dir : r.info.local_dirs) {
    if (dir.size() > PATH_MAX || !IsNormalAbsolute(dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": local dir '", dir.substr(0, 256),
                       "' is not an absolute, normalized path of at most ", PATH_MAX, " bytes"));
    }
    const Root* root = nullptr;
    for (const Root& candidate : roots_) {
      if (dir.size() > candidate.path.size() &&
          dir.compare(0, candidate.path.size(), candidate.path) == 0 &&
          dir[candidate.path.size()] == '/') {
        root = &candidate;
        break;
      }
    }
    if (root == nullptr) {
      return absl::PermissionDeniedError(absl::StrCat(who, ": local dir '", dir,
                                                      "' is not beneath a root this server serves "
                                                      "(--spark-dir-roots)"));
    }
    std::string relative = dir.substr(root->path.size() + 1);
    if (std::count(relative.begin(), relative.end(), '/') >= kMaxDirDepth) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": local dir '", dir.substr(0, 256),
                                                     "' is more than ", kMaxDirDepth,
                                                     " levels below its root"));
    }
    if (options_.yarn_layout) FERRY_RETURN_IF_ERROR(CheckYarnDir(who, r.app_id, dir, relative));
    FERRY_RETURN_IF_ERROR(CheckPluginDir(who, r.app_id, r.exec_id, dir, relative));
    // Every component below the root must be a directory itself, not a link to one.
    if (!OpenBeneath(root->fd.get(), relative, O_PATH | O_DIRECTORY | O_CLOEXEC).valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": local dir '", dir, "' is not a directory beneath ", root->path,
                       " (symlinks are not followed): ", std::strerror(errno)));
    }
    dirs->local_dirs.push_back({root->fd.get(), std::move(relative), dir});
  }
  return Registered{r.info, std::move(dirs), RecordBytes(r)};
}

absl::Status ExecutorRegistry::CheckClaimsLocked(absl::string_view app_id,
                                                 const std::vector<std::string>& dirs) const {
  for (const std::string& dir : dirs) {
    // The dir itself and the dirs around it: each of its prefixes that ends at a '/'.
    const DirClaim* other = nullptr;
    for (size_t end = dir.size(); end != absl::string_view::npos && end > 0 && other == nullptr;
         end = dir.rfind('/', end - 1)) {
      auto it = claims_.find(dir.substr(0, end));
      if (it != claims_.end() && it->second.app_id != app_id) other = &it->second;
    }
    // The dirs inside it sort together, right after "<dir>/".
    const std::string inside = dir + "/";
    for (auto it = claims_.lower_bound(inside);
         other == nullptr && it != claims_.end() && absl::StartsWith(it->first, inside); ++it) {
      if (it->second.app_id != app_id) other = &it->second;
    }
    if (other != nullptr) {
      return absl::PermissionDeniedError(absl::StrCat(
          "app ", app_id, ": local dir '", dir,
          "' is, or is inside or around, a dir that a "
          "live registration of another application names; an application's dirs are its own"));
    }
  }
  return absl::OkStatus();
}

bool ExecutorRegistry::ClaimedLocked(absl::string_view dir) const {
  for (size_t end = dir.size(); end != absl::string_view::npos && end > 0;
       end = dir.rfind('/', end - 1)) {
    if (claims_.contains(std::string(dir.substr(0, end)))) return true;
  }
  const std::string inside = absl::StrCat(dir, "/");
  auto it = claims_.lower_bound(inside);
  return it != claims_.end() && absl::StartsWith(it->first, inside);
}

void ExecutorRegistry::InsertLocked(const Key& key, Registered registered) {
  auto [it, inserted] = executors_.insert_or_assign(key, std::move(registered));
  if (!inserted) return;  // the same dirs as before: claimed already
  for (const std::string& dir : it->second.info.local_dirs) {
    DirClaim& claim = claims_[dir];
    claim.app_id = key.first;
    ++claim.registrations;
  }
}

void ExecutorRegistry::EraseLocked(std::map<Key, Registered>::iterator it,
                                   std::vector<Registered>* removed) {
  for (const std::string& dir : it->second.info.local_dirs) {
    auto claim = claims_.find(dir);
    if (claim != claims_.end() && --claim->second.registrations == 0) claims_.erase(claim);
  }
  bytes_ -= it->second.record_bytes;
  if (removed != nullptr) removed->push_back(std::move(it->second));
  executors_.erase(it);
}

bool ExecutorRegistry::Unchanged(const spark::RegisterExecutor& r) const {
  absl::MutexLock lock(&mu_);
  auto it = executors_.find(Key(r.app_id, r.exec_id));
  if (it == executors_.end()) return false;
  const spark::ExecutorShuffleInfo& had = it->second.info;
  return had.local_dirs == r.info.local_dirs &&
         had.sub_dirs_per_local_dir == r.info.sub_dirs_per_local_dir &&
         had.shuffle_manager == r.info.shuffle_manager;
}

absl::Status ExecutorRegistry::Check(const spark::RegisterExecutor& registration) const {
  if (Unchanged(registration)) return absl::OkStatus();
  return Validate(registration).status();
}

absl::Status ExecutorRegistry::Register(const spark::RegisterExecutor& registration) {
  // Spark's executors register again, unchanged, when they reconnect: that costs a
  // lookup, not a look at the disk.
  if (Unchanged(registration)) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(Registered valid, Validate(registration));
  valid.in_state_file =
      !options_.kept_across_restarts || options_.kept_across_restarts(registration.app_id);
  absl::MutexLock write(&write_mu_);
  const Key key(registration.app_id, registration.exec_id);
  auto it = executors_.find(key);
  uint64_t bytes_after = bytes_ + valid.record_bytes;
  if (it != executors_.end()) {
    const spark::ExecutorShuffleInfo& had = it->second.info;
    if (had.local_dirs != registration.info.local_dirs ||
        had.sub_dirs_per_local_dir != registration.info.sub_dirs_per_local_dir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "executor ", registration.exec_id, " of app ", registration.app_id,
          " is registered already, with other local dirs (", absl::StrJoin(had.local_dirs, ","),
          "); an executor's dirs do not change: remove it first (ferry remove-app)"));
    }
    if (had.shuffle_manager == registration.info.shuffle_manager) return absl::OkStatus();
    bytes_after -= it->second.record_bytes;
  } else {
    if (executors_.size() >= options_.max_executors) {
      return absl::ResourceExhaustedError(absl::StrCat(
          options_.max_executors, " executors are registered; remove finished apps first"));
    }
    // Under the write lock: an application's end is noted before its registrations are
    // removed, so none validated before the end can be inserted after the removal.
    if (options_.ended && options_.ended(registration.app_id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("app ", registration.app_id,
                       " has ended on this node; its executors are not registered"));
    }
    FERRY_RETURN_IF_ERROR(CheckClaimsLocked(registration.app_id, registration.info.local_dirs));
  }
  if (bytes_after > options_.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("registrations would hold ", bytes_after, " bytes, over the limit of ",
                     options_.max_bytes, "; remove finished apps first"));
  }
  if (valid.in_state_file) {
    std::string record;
    AppendRecord(spark::EncodeRegisterExecutor(registration), &record);
    FERRY_RETURN_IF_ERROR(AppendLocked(record));
  }
  const bool again = it != executors_.end();
  {
    absl::MutexLock lock(&mu_);
    bytes_ = bytes_after;
    InsertLocked(key, std::move(valid));
  }
  MaybeCompactLocked();
  uint64_t held_back = 0;
  if (log_lines_.Take(clock_.Now(), &held_back)) {
    LOG(INFO) << (again ? "re-registered" : "registered") << " Spark executor "
              << registration.exec_id << " of app " << registration.app_id << ": "
              << registration.info.local_dirs.size() << " local dirs, "
              << registration.info.sub_dirs_per_local_dir << " subdirs each"
              << (held_back > 0 ? absl::StrCat(" (", held_back, " earlier changes not logged)")
                                : "");
  }
  return absl::OkStatus();
}

absl::StatusOr<spark::ExecutorShuffleInfo> ExecutorRegistry::Find(absl::string_view app_id,
                                                                  absl::string_view exec_id) const {
  absl::MutexLock lock(&mu_);
  auto it = executors_.find(Key(app_id, exec_id));
  if (it == executors_.end()) return NotRegistered(app_id, exec_id);
  return it->second.info;
}

absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> ExecutorRegistry::FindDirs(
    absl::string_view app_id, absl::string_view exec_id) const {
  absl::MutexLock lock(&mu_);
  auto it = executors_.find(Key(app_id, exec_id));
  if (it == executors_.end()) return NotRegistered(app_id, exec_id);
  return it->second.dirs;
}

absl::Status ExecutorRegistry::NotRegistered(absl::string_view app_id,
                                             absl::string_view exec_id) const {
  return absl::NotFoundError(
      absl::StrCat("Executor is not registered (appId=", app_id.substr(0, 130),
                   ", execId=", exec_id.substr(0, 130), ")"));
}

absl::Status ExecutorRegistry::ForgetLocked(const std::vector<Key>& keys,
                                            std::vector<Registered>* removed,
                                            std::vector<std::string>* gone) {
  if (keys.empty()) return absl::OkStatus();
  std::string records;
  for (const Key& key : keys) {
    auto it = executors_.find(key);
    if (it != executors_.end() && it->second.in_state_file) {
      records += ForgetRecord(key.first, key.second);
    }
  }
  if (!records.empty()) FERRY_RETURN_IF_ERROR(AppendLocked(records));
  {
    absl::MutexLock lock(&mu_);
    for (const Key& key : keys) EraseLocked(executors_.find(key), removed);
    for (const Key& key : keys) {
      auto next = executors_.lower_bound(Key(key.first, ""));
      const bool none_left = next == executors_.end() || next->first.first != key.first;
      if (none_left && std::find(gone->begin(), gone->end(), key.first) == gone->end()) {
        gone->push_back(key.first);
      }
    }
  }
  MaybeCompactLocked();
  return absl::OkStatus();
}

void ExecutorRegistry::TellGone(const std::vector<std::string>& apps) const {
  if (options_.app_gone == nullptr) return;
  for (const std::string& app : apps) options_.app_gone(app);
}

absl::StatusOr<ExecutorRegistry::Removal> ExecutorRegistry::Remove(absl::string_view app_id,
                                                                   absl::string_view exec_id,
                                                                   bool delete_local_dirs) {
  std::vector<Registered> removed;
  std::vector<std::string> gone;
  // The dirs to delete: each once, and none that a remaining registration overlaps.
  std::vector<spark::ExecutorDirs::LocalDir> doomed;
  Removal result;
  {
    absl::MutexLock write(&write_mu_);
    std::vector<Key> keys;
    for (auto it = executors_.lower_bound(Key(app_id, exec_id));
         it != executors_.end() && it->first.first == app_id &&
         (exec_id.empty() || it->first.second == exec_id);
         ++it) {
      keys.push_back(it->first);
    }
    FERRY_RETURN_IF_ERROR(ForgetLocked(keys, &removed, &gone));
    result.executors = removed.size();
    if (delete_local_dirs) {
      for (const Registered& registered : removed) {
        for (const spark::ExecutorDirs::LocalDir& dir : registered.dirs->local_dirs) {
          if (std::any_of(doomed.begin(), doomed.end(),
                          [&](const auto& d) { return d.path == dir.path; })) {
            continue;
          }
          if (ClaimedLocked(dir.path)) {
            result.kept.push_back(dir.path);
          } else {
            doomed.push_back(dir);
          }
        }
      }
    }
  }
  if (removed.empty()) return result;
  LOG(INFO) << "removed " << removed.size() << " Spark executor(s) of app " << app_id
            << (delete_local_dirs ? absl::StrCat(", deleting ", doomed.size(), " local dir(s)")
                                  : "")
            << (result.kept.empty() ? ""
                                    : absl::StrCat("; kept ", absl::StrJoin(result.kept, ", "),
                                                   ", which other registrations name"));
  // Outside the locks: deleting a big executor's files takes a while.
  for (const spark::ExecutorDirs::LocalDir& dir : doomed) {
    if (absl::Status s = DeleteTree(dir.root_fd, dir.relative, dir.path, 0); !s.ok()) {
      result.errors.push_back(std::string(s.message()));
    } else {
      ++result.dirs_deleted;
    }
  }
  TellGone(gone);
  return result;
}

absl::StatusOr<size_t> ExecutorRegistry::ForgetVanished() {
  // The dirs are looked up with no lock held: registrations go on meanwhile, and one
  // that changed by then (forgotten, or registered anew) is left alone.
  std::vector<std::pair<Key, std::shared_ptr<const spark::ExecutorDirs>>> all;
  {
    absl::MutexLock write(&write_mu_);
    all.reserve(executors_.size());
    for (const auto& [key, registered] : executors_) all.emplace_back(key, registered.dirs);
  }
  std::erase_if(all, [](const auto& entry) {
    const auto& dirs = entry.second->local_dirs;
    return !std::all_of(dirs.begin(), dirs.end(), [](const auto& dir) {
      struct stat st;
      return ::fstatat(dir.root_fd, dir.relative.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 &&
             errno == ENOENT;
    });
  });
  std::vector<Key> vanished;
  std::vector<std::string> gone;
  {
    absl::MutexLock write(&write_mu_);
    for (const auto& [key, dirs] : all) {
      auto it = executors_.find(key);
      if (it != executors_.end() && it->second.dirs == dirs) vanished.push_back(key);
    }
    FERRY_RETURN_IF_ERROR(ForgetLocked(vanished, nullptr, &gone));
  }
  for (const Key& key : vanished) {
    LOG(INFO) << "forgot Spark executor " << key.second << " of app " << key.first
              << ": its local dirs are gone";
  }
  TellGone(gone);
  return vanished.size();
}

absl::Status ExecutorRegistry::CheckOwnDirs(absl::string_view app_id,
                                            const std::vector<std::string>& dirs) {
  absl::MutexLock lock(&write_mu_);
  return CheckClaimsLocked(app_id, dirs);
}

std::vector<spark::RegisterExecutor> ExecutorRegistry::Registrations() const {
  absl::MutexLock lock(&mu_);
  std::vector<spark::RegisterExecutor> out;
  out.reserve(executors_.size());
  for (const auto& [key, registered] : executors_) {
    out.push_back({key.first, key.second, registered.info});
  }
  return out;
}

size_t ExecutorRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return executors_.size();
}

uint64_t ExecutorRegistry::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

absl::Status ExecutorRegistry::AppendLocked(absl::string_view records) {
  if (options_.state_dir.empty()) return absl::OkStatus();
  if (journal_broken_) {
    FERRY_RETURN_IF_ERROR(CompactLocked());
  }
  const std::string path = absl::StrCat(options_.state_dir, "/", kStateFile);
  absl::Status written = WriteFully(journal_.get(), records, absl::StrCat("append to ", path));
  if (written.ok() && ::fdatasync(journal_.get()) != 0) {
    written = absl::ErrnoToStatus(errno, absl::StrCat("fdatasync ", path));
  }
  if (!written.ok()) {
    // What reached the file is unknown: rewrite it whole before the next append.
    journal_broken_ = true;
    return written;
  }
  journal_bytes_ += records.size();
  return absl::OkStatus();
}

void ExecutorRegistry::RewriteBeforeNextChange() {
  absl::MutexLock write(&write_mu_);
  journal_.Reset();
  journal_broken_ = true;
}

void ExecutorRegistry::MaybeCompactLocked() {
  if (options_.state_dir.empty() || journal_bytes_ <= 2 * bytes_ + kMinCompactBytes ||
      journal_bytes_ <= compaction_failed_at_ + kMinCompactBytes) {
    return;
  }
  if (absl::Status s = CompactLocked(); !s.ok()) {
    // The change is in the journal already; the journal stays as it was.
    compaction_failed_at_ = journal_bytes_;
    LOG(WARNING) << "compacting the Spark executors' journal failed; it is appended to as it "
                 << "is: " << s;
  }
}

absl::Status ExecutorRegistry::CompactLocked() {
  if (options_.state_dir.empty()) return absl::OkStatus();
  const std::string path = absl::StrCat(options_.state_dir, "/", kStateFile);
  std::string bytes;
  for (const auto& [key, registered] : executors_) {
    if (!registered.in_state_file) continue;
    AppendRecord(spark::EncodeRegisterExecutor({key.first, key.second, registered.info}), &bytes);
  }
  // The journal appended to so far stays usable until the new file is in place.
  FERRY_RETURN_IF_ERROR(ReplaceFile(path, bytes, 0600));
  UniqueFd journal(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
  if (!journal.valid()) {
    journal_.Reset();
    journal_broken_ = true;
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path, " to append"));
  }
  journal_ = std::move(journal);
  journal_bytes_ = bytes.size();
  journal_broken_ = false;
  compaction_failed_at_ = 0;
  return absl::OkStatus();
}

void ExecutorRegistry::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  FERRY_APPEND_READS(FERRY_EXECUTOR_STATS, out);
}

}  // namespace ferry
