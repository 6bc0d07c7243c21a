#include "server/spark/spark_executors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/option_check.h"
#include "common/pread_full.h"
#include "common/status_macros.h"
#include "common/replace_file.h"
#include "common/shuffle_files.h"
#include "common/unique_fd.h"
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

// Deletes `relative` beneath `parent_fd` and everything in it, never following a
// symlink (a link is removed, not what it points to). `path` names it in errors.
absl::Status DeleteTree(int parent_fd, const std::string& relative, const std::string& path,
                        int depth) {
  // Spark's dirs are two levels deep (blockmgr-*/<%02x>/); deeper is not Spark's.
  constexpr int kMaxDepth = 8;
  if (depth > kMaxDepth) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is nested deeper than ",
                                                      kMaxDepth, " levels; not deleted"));
  }
  // fdopendir() takes the descriptor over.
  const int fd =
      OpenBeneath(parent_fd, relative, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW).release();
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path, " to delete it"));
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("list ", path));
  }
  absl::Status status;
  std::vector<std::pair<std::string, bool>> entries;  // name, is a directory
  while (dirent* entry = ::readdir(dir)) {
    const absl::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const bool is_dir = ::fstatat(fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                        S_ISDIR(st.st_mode);
    entries.emplace_back(std::string(name), is_dir);
  }
  for (const auto& [name, is_dir] : entries) {
    const std::string child = absl::StrCat(path, "/", name);
    absl::Status s = is_dir ? DeleteTree(fd, name, child, depth + 1) : absl::OkStatus();
    if (s.ok() && !is_dir && ::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      s = absl::ErrnoToStatus(errno, absl::StrCat("delete ", child));
    }
    if (!s.ok() && status.ok()) status = s;
  }
  ::closedir(dir);
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

// Whether one of the two normalized absolute paths is the other or lies beneath it.
bool Overlaps(absl::string_view a, absl::string_view b) {
  if (a.size() > b.size()) std::swap(a, b);
  return absl::StartsWith(b, a) && (b.size() == a.size() || b[a.size()] == '/');
}

// The bytes of the registration's journal record (its length, then the RegisterExecutor
// payload: type, three strings, a string array and an int), without encoding it.
uint64_t RecordBytes(const spark::RegisterExecutor& r) {
  uint64_t bytes = 4 + 1 + 4 + r.app_id.size() + 4 + r.exec_id.size() + 4 + 4 + 4 +
                   r.info.shuffle_manager.size();
  for (const std::string& dir : r.info.local_dirs) bytes += 4 + dir.size();
  return bytes;
}

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

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("append to ", path));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExecutorRegistry::Options::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckRange("max-spark-executors", max_executors, 1, kMaxLimit));
  return CheckRange("max-spark-registry-bytes", max_bytes, 4096, kMaxLimit);
}

absl::StatusOr<std::unique_ptr<ExecutorRegistry>> ExecutorRegistry::Open(Options options) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  for (const std::string& root : options.dir_roots) {
    struct stat st;
    if (!IsNormalAbsolute(root) || ::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Spark dir root '", root, "' is not an absolute, normalized path of a directory"));
    }
  }
  std::unique_ptr<ExecutorRegistry> registry(new ExecutorRegistry(std::move(options)));
  for (const std::string& root : registry->options_.dir_roots) {
    UniqueFd fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open Spark dir root ", root));
    registry->root_fds_.push_back(std::move(fd));
  }
  if (registry->options_.state_dir.empty()) return registry;
  const std::string path = absl::StrCat(registry->options_.state_dir, "/", kStateFile);
  FERRY_RETURN_IF_ERROR(registry->Load(path));
  // Rewritten at once: what was dropped goes, and appends start from a whole file.
  std::lock_guard<std::mutex> lock(registry->write_mu_);
  FERRY_RETURN_IF_ERROR(registry->CompactLocked());
  return registry;
}

absl::Status ExecutorRegistry::Load(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxStateBytes) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file of at most 1 GiB"));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  if (PreadFull(fd.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    return absl::DataLossError(absl::StrCat("read ", path));
  }
  // The journal replayed: the last record of each (app, exec) wins.
  std::map<Key, spark::RegisterExecutor> replayed;
  spark::WireReader reader(bytes);
  for (size_t record = 0; !reader.rest().empty(); ++record) {
    const size_t left = reader.rest().size();
    std::string payload;
    if (!reader.String(&payload, "record", 1 << 20)) {
      // Appends are the only writes: a record cut short is the one a crash interrupted.
      LOG(WARNING) << path << ": ignoring the last " << left << " bytes, a record cut short ("
                   << reader.Finish("state file").message() << ")";
      break;
    }
    if (!payload.empty() && payload[0] == kForgetTag) {
      spark::WireReader forget(absl::string_view(payload).substr(1));
      Key key;
      forget.String(&key.first, "appId");
      forget.String(&key.second, "execId");
      if (absl::Status s = forget.Finish("forget record"); !s.ok()) {
        return absl::DataLossError(absl::StrCat(path, ": record ", record, ": ", s.message()));
      }
      replayed.erase(key);
      continue;
    }
    absl::StatusOr<spark::ShuffleRpc> rpc = spark::DecodeShuffleRpc(payload);
    auto* registration = rpc.ok() ? std::get_if<spark::RegisterExecutor>(&*rpc) : nullptr;
    if (registration == nullptr) {
      return absl::DataLossError(absl::StrCat(
          path, ": record ", record, " is not a RegisterExecutor",
          rpc.ok() ? "" : absl::StrCat(" (", rpc.status().message(), ")")));
    }
    Key key(registration->app_id, registration->exec_id);
    replayed[std::move(key)] = *std::move(registration);
  }
  for (auto& [key, registration] : replayed) {
    // Validated again: the dirs may have been deleted (the app ended while the server
    // was down) or the roots changed since it was written. Dropping it costs that
    // executor alone.
    absl::StatusOr<Registered> valid = Validate(registration);
    if (!valid.ok()) {
      LOG(WARNING) << path << ": dropping the registration of executor " << key.second
                   << " of app " << key.first << ": " << valid.status().message();
      continue;
    }
    bytes_ += valid->record_bytes;
    executors_[key] = *std::move(valid);
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecutorRegistry::Registered> ExecutorRegistry::Validate(
    const spark::RegisterExecutor& r) const {
  const std::string who = absl::StrCat("executor ", r.exec_id.substr(0, 64), " of app ",
                                       r.app_id.substr(0, 130));
  if (!IsValidId(r.app_id) || !IsValidId(r.exec_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": app and executor ids must be [A-Za-z0-9_.-]{1,128}"));
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
  auto dirs = std::make_shared<spark::ExecutorDirs>();
  dirs->sub_dirs_per_local_dir = r.info.sub_dirs_per_local_dir;
  for (const std::string& dir : r.info.local_dirs) {
    if (!IsNormalAbsolute(dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": local dir '", dir, "' is not an absolute, normalized path"));
    }
    const std::string* root = nullptr;
    size_t root_index = 0;
    for (; root_index < options_.dir_roots.size(); ++root_index) {
      const std::string& candidate = options_.dir_roots[root_index];
      if (dir.size() > candidate.size() && dir.compare(0, candidate.size(), candidate) == 0 &&
          dir[candidate.size()] == '/') {
        root = &candidate;
        break;
      }
    }
    if (root == nullptr) {
      return absl::PermissionDeniedError(absl::StrCat(
          who, ": local dir '", dir, "' is not beneath a root this server serves "
          "(--spark-dir-roots)"));
    }
    // Every component below the root must be a directory itself, not a link to one.
    std::string prefix = *root;
    for (absl::string_view part : absl::StrSplit(dir.substr(root->size() + 1), '/')) {
      absl::StrAppend(&prefix, "/", part);
      struct stat st;
      if (::lstat(prefix.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, ": local dir '", dir, "': '", prefix, "' is not a directory (symlinks are not "
            "followed)"));
      }
    }
    dirs->local_dirs.push_back(
        {root_fds_[root_index].get(), dir.substr(root->size() + 1), dir});
  }
  return Registered{r.info, std::move(dirs), RecordBytes(r)};
}

absl::Status ExecutorRegistry::Register(const spark::RegisterExecutor& registration) {
  absl::StatusOr<Registered> valid = Validate(registration);
  if (!valid.ok()) return valid.status();
  std::lock_guard<std::mutex> write(write_mu_);
  const Key key(registration.app_id, registration.exec_id);
  auto it = executors_.find(key);
  uint64_t bytes_after = bytes_ + valid->record_bytes;
  if (it != executors_.end()) {
    const spark::ExecutorShuffleInfo& had = it->second.info;
    if (had.local_dirs != registration.info.local_dirs ||
        had.sub_dirs_per_local_dir != registration.info.sub_dirs_per_local_dir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "executor ", registration.exec_id, " of app ", registration.app_id,
          " is registered already, with other local dirs (", absl::StrJoin(had.local_dirs, ","),
          "); an executor's dirs do not change: remove it first (ferry remove-app)"));
    }
    // Spark's executors register again, unchanged, when they reconnect.
    if (had.shuffle_manager == registration.info.shuffle_manager) return absl::OkStatus();
    bytes_after -= it->second.record_bytes;
  } else if (executors_.size() >= options_.max_executors) {
    return absl::ResourceExhaustedError(absl::StrCat(
        options_.max_executors, " executors are registered; remove finished apps first"));
  }
  if (bytes_after > options_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "registrations would hold ", bytes_after, " bytes, over the limit of ",
        options_.max_bytes, "; remove finished apps first"));
  }
  std::string record;
  AppendRecord(spark::EncodeRegisterExecutor(registration), &record);
  FERRY_RETURN_IF_ERROR(AppendLocked(record));
  const bool again = it != executors_.end();
  {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_ = bytes_after;
    executors_[key] = *std::move(valid);
  }
  LOG(INFO) << (again ? "re-registered" : "registered") << " Spark executor "
            << registration.exec_id << " of app " << registration.app_id << ": "
            << registration.info.local_dirs.size() << " local dirs, "
            << registration.info.sub_dirs_per_local_dir << " subdirs each";
  return absl::OkStatus();
}

absl::StatusOr<spark::ExecutorShuffleInfo> ExecutorRegistry::Find(
    absl::string_view app_id, absl::string_view exec_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = executors_.find(Key(app_id, exec_id));
  if (it == executors_.end()) return NotRegistered(app_id, exec_id);
  return it->second.info;
}

absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> ExecutorRegistry::FindDirs(
    absl::string_view app_id, absl::string_view exec_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = executors_.find(Key(app_id, exec_id));
  if (it == executors_.end()) return NotRegistered(app_id, exec_id);
  return it->second.dirs;
}

absl::Status ExecutorRegistry::NotRegistered(absl::string_view app_id,
                                             absl::string_view exec_id) const {
  return absl::NotFoundError(absl::StrCat("Executor is not registered (appId=",
                                          app_id.substr(0, 130), ", execId=",
                                          exec_id.substr(0, 130), ")"));
}

absl::Status ExecutorRegistry::ForgetLocked(const std::vector<Key>& keys,
                                            std::vector<Registered>* removed) {
  if (keys.empty()) return absl::OkStatus();
  std::string records;
  for (const Key& key : keys) records += ForgetRecord(key.first, key.second);
  FERRY_RETURN_IF_ERROR(AppendLocked(records));
  std::lock_guard<std::mutex> lock(mu_);
  for (const Key& key : keys) {
    auto it = executors_.find(key);
    bytes_ -= it->second.record_bytes;
    if (removed != nullptr) removed->push_back(std::move(it->second));
    executors_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecutorRegistry::Removal> ExecutorRegistry::Remove(absl::string_view app_id,
                                                                  absl::string_view exec_id,
                                                                  bool delete_local_dirs) {
  std::vector<Registered> removed;
  // The dirs to delete: each once, and none that a remaining registration overlaps.
  std::vector<spark::ExecutorDirs::LocalDir> doomed;
  Removal result;
  {
    std::lock_guard<std::mutex> write(write_mu_);
    std::vector<Key> keys;
    for (auto it = executors_.lower_bound(Key(app_id, exec_id));
         it != executors_.end() && it->first.first == app_id &&
         (exec_id.empty() || it->first.second == exec_id);
         ++it) {
      keys.push_back(it->first);
    }
    FERRY_RETURN_IF_ERROR(ForgetLocked(keys, &removed));
    result.executors = removed.size();
    if (delete_local_dirs) {
      for (const Registered& registered : removed) {
        for (const spark::ExecutorDirs::LocalDir& dir : registered.dirs->local_dirs) {
          if (std::any_of(doomed.begin(), doomed.end(),
                          [&](const auto& d) { return d.path == dir.path; })) {
            continue;
          }
          const bool shared = std::any_of(executors_.begin(), executors_.end(), [&](const auto& e) {
            return std::any_of(e.second.info.local_dirs.begin(), e.second.info.local_dirs.end(),
                               [&](const std::string& other) { return Overlaps(dir.path, other); });
          });
          if (shared) {
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
            << (result.kept.empty()
                    ? ""
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
  return result;
}

absl::StatusOr<size_t> ExecutorRegistry::ForgetVanished() {
  // The dirs are looked up with no lock held: registrations go on meanwhile, and one
  // that changed by then (forgotten, or registered anew) is left alone.
  std::vector<std::pair<Key, std::shared_ptr<const spark::ExecutorDirs>>> all;
  {
    std::lock_guard<std::mutex> write(write_mu_);
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
  std::lock_guard<std::mutex> write(write_mu_);
  std::vector<Key> vanished;
  for (const auto& [key, dirs] : all) {
    auto it = executors_.find(key);
    if (it != executors_.end() && it->second.dirs == dirs) vanished.push_back(key);
  }
  FERRY_RETURN_IF_ERROR(ForgetLocked(vanished, nullptr));
  for (const Key& key : vanished) {
    LOG(INFO) << "forgot Spark executor " << key.second << " of app " << key.first
              << ": its local dirs are gone";
  }
  return vanished.size();
}

size_t ExecutorRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return executors_.size();
}

uint64_t ExecutorRegistry::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

absl::Status ExecutorRegistry::AppendLocked(absl::string_view records) {
  if (options_.state_dir.empty()) return absl::OkStatus();
  if (journal_broken_) {
    FERRY_RETURN_IF_ERROR(CompactLocked());
  }
  const std::string path = absl::StrCat(options_.state_dir, "/", kStateFile);
  absl::Status written = WriteAll(journal_.get(), records, path);
  if (written.ok() && ::fdatasync(journal_.get()) != 0) {
    written = absl::ErrnoToStatus(errno, absl::StrCat("fdatasync ", path));
  }
  if (!written.ok()) {
    // What reached the file is unknown: rewrite it whole before the next append.
    journal_broken_ = true;
    return written;
  }
  journal_bytes_ += records.size();
  if (journal_bytes_ > 2 * bytes_ + kMinCompactBytes) return CompactLocked();
  return absl::OkStatus();
}

absl::Status ExecutorRegistry::CompactLocked() {
  if (options_.state_dir.empty()) return absl::OkStatus();
  const std::string path = absl::StrCat(options_.state_dir, "/", kStateFile);
  std::string bytes;
  for (const auto& [key, registered] : executors_) {
    AppendRecord(spark::EncodeRegisterExecutor({key.first, key.second, registered.info}), &bytes);
  }
  journal_.Reset();
  if (absl::Status s = ReplaceFile(path, bytes, 0600); !s.ok()) {
    journal_broken_ = true;
    return s;
  }
  journal_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
  if (!journal_.valid()) {
    journal_broken_ = true;
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path, " to append"));
  }
  journal_bytes_ = bytes.size();
  journal_broken_ = false;
  return absl::OkStatus();
}

}  // namespace ferry
