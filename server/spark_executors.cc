#include "server/spark_executors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/pread_full.h"
#include "common/replace_file.h"
#include "common/shuffle_files.h"
#include "common/unique_fd.h"
#include "server/block_store.h"

namespace ferry {

namespace {

constexpr char kStateFile[] = "spark-executors";
// A state file larger than this is not a state file of this server.
constexpr uint64_t kMaxStateBytes = uint64_t{1} << 30;

// An absolute path with no empty, "." or ".." component.
bool IsNormalAbsolute(absl::string_view path) {
  if (path.size() < 2 || path[0] != '/' || path.back() == '/') return false;
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

}  // namespace

absl::StatusOr<std::unique_ptr<ExecutorRegistry>> ExecutorRegistry::Open(Options options) {
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
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return registry;
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
  spark::WireReader reader(bytes);
  for (size_t record = 0; !reader.rest().empty(); ++record) {
    std::string payload;
    if (!reader.String(&payload, "record", 1 << 20)) {
      return absl::DataLossError(absl::StrCat(path, ": record ", record, ": ",
                                              reader.Finish("state file").message()));
    }
    absl::StatusOr<spark::ShuffleRpc> rpc = spark::DecodeShuffleRpc(payload);
    const auto* registration =
        rpc.ok() ? std::get_if<spark::RegisterExecutor>(&*rpc) : nullptr;
    if (registration == nullptr) {
      return absl::DataLossError(absl::StrCat(
          path, ": record ", record, " is not a RegisterExecutor",
          rpc.ok() ? "" : absl::StrCat(" (", rpc.status().message(), ")")));
    }
    // Validated again: the roots may have changed since it was written.
    absl::StatusOr<Registered> valid = registry->Validate(*registration);
    if (!valid.ok()) {
      return absl::DataLossError(
          absl::StrCat(path, ": record ", record, ": ", valid.status().message()));
    }
    registry->executors_[{registration->app_id, registration->exec_id}] = *std::move(valid);
  }
  return registry;
}

absl::StatusOr<ExecutorRegistry::Registered> ExecutorRegistry::Validate(
    const spark::RegisterExecutor& r) const {
  const std::string who = absl::StrCat("executor ", r.exec_id.substr(0, 64), " of app ",
                                       r.app_id.substr(0, 130));
  if (!BlockStore::IsValidAppId(r.app_id) || !BlockStore::IsValidAppId(r.exec_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": app and executor ids must be [A-Za-z0-9_.-]{1,128}"));
  }
  if (r.info.local_dirs.empty() || r.info.local_dirs.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", r.info.local_dirs.size(), " local dirs (1 to 64 allowed)"));
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
  return Registered{r.info, std::move(dirs)};
}

absl::Status ExecutorRegistry::Register(const spark::RegisterExecutor& registration) {
  absl::StatusOr<Registered> valid = Validate(registration);
  if (!valid.ok()) return valid.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Key key(registration.app_id, registration.exec_id);
  auto it = executors_.find(key);
  if (it == executors_.end() && executors_.size() >= options_.max_executors) {
    return absl::ResourceExhaustedError(absl::StrCat(
        options_.max_executors, " executors are registered; remove finished apps first"));
  }
  std::optional<Registered> previous;
  if (it != executors_.end()) previous = it->second;
  executors_[key] = *std::move(valid);
  if (absl::Status s = PersistLocked(); !s.ok()) {
    if (previous.has_value()) {
      executors_[key] = *std::move(previous);
    } else {
      executors_.erase(key);
    }
    return s;
  }
  LOG(INFO) << (previous.has_value() ? "re-registered" : "registered") << " Spark executor "
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

absl::StatusOr<ExecutorRegistry::Removal> ExecutorRegistry::Remove(absl::string_view app_id,
                                                                  absl::string_view exec_id,
                                                                  bool delete_local_dirs) {
  std::vector<std::pair<Key, Registered>> removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = executors_.lower_bound(Key(app_id, exec_id));
    while (it != executors_.end() && it->first.first == app_id &&
           (exec_id.empty() || it->first.second == exec_id)) {
      removed.push_back(*it);
      it = executors_.erase(it);
    }
    if (removed.empty()) return Removal{};
    if (absl::Status s = PersistLocked(); !s.ok()) {
      executors_.insert(removed.begin(), removed.end());
      return s;
    }
  }
  Removal result;
  result.executors = removed.size();
  LOG(INFO) << "removed " << removed.size() << " Spark executor(s) of app " << app_id
            << (delete_local_dirs ? ", deleting their local dirs" : "");
  if (!delete_local_dirs) return result;
  // Outside the lock: deleting a big executor's files takes a while.
  for (const auto& [key, registered] : removed) {
    for (const spark::ExecutorDirs::LocalDir& dir : registered.dirs->local_dirs) {
      if (absl::Status s = DeleteTree(dir.root_fd, dir.relative, dir.path, 0); !s.ok()) {
        result.errors.push_back(std::string(s.message()));
      } else {
        ++result.dirs_deleted;
      }
    }
  }
  return result;
}

size_t ExecutorRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return executors_.size();
}

absl::Status ExecutorRegistry::PersistLocked() const {
  if (options_.state_dir.empty()) return absl::OkStatus();
  std::string bytes;
  spark::WireWriter writer(&bytes);
  for (const auto& [key, registered] : executors_) {
    writer.String(spark::EncodeRegisterExecutor({key.first, key.second, registered.info}));
  }
  return ReplaceFile(absl::StrCat(options_.state_dir, "/", kStateFile), bytes, 0600);
}

}  // namespace ferry
