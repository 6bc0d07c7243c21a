#include "server/spark/push/push_merger.h"

#include <endian.h>
#include <fcntl.h>
#include <glog/logging.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/option_check.h"
#include "common/pread_full.h"
#include "common/shuffle_files.h"
#include "common/spark/merge_dirs.h"
#include "common/status_macros.h"
#include "server/base/replace_file.h"
#include "server/base/small_file.h"
#include "server/storage/dirty_memory.h"
#include "server/storage/ids.h"

namespace ferry {

namespace {

using spark::PushReturnCode;

constexpr const char* kSuffixes[] = {"data", "index", "meta"};
// As Spark's resolver makes them (0666 less the usual umask): the executors of the
// application, whose user need not be ferry_server's or in its group, read a merger's
// merged files on their own host from the disk. The application's dirs (0710 and less
// on YARN) keep others out.
constexpr mode_t kMergedFileMode = 0644;
// A finalized merge is a line of under 200 bytes; the file is rewritten whole once it
// holds twice what is live: far more than any node holds.
constexpr size_t kMaxStateFileBytes = size_t{64} << 20;
// Lines of a damaged state file logged one by one; the rest are counted.
constexpr int kBadLinesLogged = 3;

// A state file's line: a finalized merge ("app attempt shuffle merge"), an attempt's
// merge dirs ("= app attempt path...", each path C-escaped), or a deletion ("- app
// attempt shuffle", '*' for every attempt or shuffle; "- app * *" deletes its dirs too).
std::string FinalizedLine(absl::string_view app, int32_t attempt, int32_t shuffle, int32_t merge) {
  return absl::StrCat(app, "\t", attempt, "\t", shuffle, "\t", merge, "\n");
}
std::string DirsLine(absl::string_view app, int32_t attempt,
                     const std::vector<std::string>& paths) {
  std::string line = absl::StrCat("=\t", app, "\t", attempt);
  for (const std::string& path : paths) absl::StrAppend(&line, "\t", absl::CEscape(path));
  return line + "\n";
}
std::vector<std::string> PathsOf(const spark::ExecutorDirs& dirs) {
  std::vector<std::string> paths;
  for (const spark::ExecutorDirs::LocalDir& dir : dirs.local_dirs) paths.push_back(dir.path);
  return paths;
}
std::string DeletedLine(absl::string_view app, absl::string_view attempt,
                        absl::string_view shuffle) {
  return absl::StrCat("-\t", app, "\t", attempt, "\t", shuffle, "\n");
}

// A state file's text replayed: the finalized merges it keeps, by application and
// shuffle (attempt, merge id), the merge dirs of each application's attempt, and its
// lines that are none of those (the first few, and how many).
struct Replayed {
  std::map<std::pair<std::string, int32_t>, std::pair<int32_t, int32_t>> merges;
  std::map<std::string, std::pair<int32_t, std::vector<std::string>>> dirs;
  uint64_t lines = 0;
  uint64_t bad = 0;
  std::vector<std::string> first_bad;
};
Replayed Replay(absl::string_view text) {
  Replayed out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++out.lines;
    const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    int32_t attempt = 0, shuffle = 0, merge = 0;
    if (f.size() == 4 && f[0] == "-" && IsValidAppId(f[1]) &&
        (f[2] == "*" || absl::SimpleAtoi(f[2], &attempt)) &&
        (f[3] == "*" || absl::SimpleAtoi(f[3], &shuffle))) {
      const std::string app(f[1]);
      for (auto it = out.merges.lower_bound({app, INT32_MIN});
           it != out.merges.end() && it->first.first == app;) {
        const bool doomed = (f[2] == "*" || it->second.first == attempt) &&
                            (f[3] == "*" || it->first.second == shuffle);
        it = doomed ? out.merges.erase(it) : std::next(it);
      }
      if (f[2] == "*" && f[3] == "*") out.dirs.erase(app);
      continue;
    }
    if (f.size() >= 4 && f[0] == "=" && IsValidAppId(f[1]) && absl::SimpleAtoi(f[2], &attempt)) {
      std::vector<std::string> paths(f.size() - 3);
      bool escaped = true;
      for (size_t i = 3; i < f.size(); ++i)
        escaped = escaped && absl::CUnescape(f[i], &paths[i - 3]);
      if (escaped) {
        out.dirs[std::string(f[1])] = {attempt, std::move(paths)};
        continue;
      }
    }
    if (f.size() == 4 && IsValidAppId(f[0]) && absl::SimpleAtoi(f[1], &attempt) &&
        absl::SimpleAtoi(f[2], &shuffle) && absl::SimpleAtoi(f[3], &merge)) {
      out.merges[{std::string(f[0]), shuffle}] = {attempt, merge};
      continue;
    }
    if (++out.bad <= kBadLinesLogged) {
      out.first_bad.push_back(absl::CHexEscape(line.substr(0, 100)));
    }
  }
  return out;
}

std::string PushBlockName(const spark::PushBlockStream& p) {
  return absl::StrCat("shufflePush_", p.shuffle_id, "_", p.shuffle_merge_id, "_", p.map_index, "_",
                      p.reduce_id);
}

// NOT_FOUND for an application that registered no merge dirs here.
absl::Status NotRegistered(absl::string_view app_id) {
  return absl::NotFoundError(
      absl::StrCat("application ", app_id, " is not registered with push-based shuffle here"));
}

// The directory of the file `at` names, opened beneath its root without following a
// symlink, and the file's name in it.
UniqueFd OpenDirOf(const ShuffleFileLocation& at, int flags, std::string* name, mode_t mode = 0) {
  const size_t slash = at.relative.rfind('/');
  if (name != nullptr) *name = at.relative.substr(slash == std::string::npos ? 0 : slash + 1);
  return OpenBeneath(at.dir_fd, slash == std::string::npos ? "." : at.relative.substr(0, slash),
                     flags, mode);
}

// Deletes the file `at` names; with `only`, only while it is still that file.
void UnlinkBeneath(const ShuffleFileLocation& at, const struct stat* only = nullptr) {
  std::string name;
  UniqueFd dir = OpenDirOf(at, O_PATH | O_DIRECTORY | O_CLOEXEC, &name);
  if (!dir.valid()) return;
  struct stat now {};
  if (only != nullptr && (::fstatat(dir.get(), name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 ||
                          now.st_ino != only->st_ino || now.st_dev != only->st_dev)) {
    return;
  }
  (void)::unlinkat(dir.get(), name.c_str(), 0);
}

}  // namespace

absl::StatusOr<std::optional<PushMerger::DiskClaim>> PushMerger::ClaimDisk(
    uint64_t dev, int fd, uint64_t bytes, const ShuffleFileLocation& at, bool on_worker) {
  if (on_worker) {
    struct statvfs disk {};
    if (::fstatvfs(fd, &disk) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("statvfs the file system of ", at.display));
    }
    const uint64_t available = static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
    // Sampled with the free space, and as stale at most: small writes are done inline
    // while it says so (server/storage/dirty_memory.h).
    const bool dirty_memory_low = DirtyMemoryLow().value_or(false);
    absl::MutexLock lock(&disk_mu_);
    Disk& sampled = disks_[dev];
    sampled.available = available;
    sampled.dirty_memory_low = dirty_memory_low;
    sampled.sampled = absl::Now();
    sampled.written = 0;
  }
  absl::MutexLock lock(&disk_mu_);
  auto it = disks_.find(dev);
  if (it == disks_.end() ||
      (!on_worker && absl::Now() - it->second.sampled > options_.free_space_staleness)) {
    return std::nullopt;  // the fiber's: no fresh sample
  }
  Disk& disk = it->second;
  const uint64_t taken = disk.written + disk.in_flight;
  const uint64_t left = disk.available < taken ? 0 : disk.available - taken;
  if (left < bytes || left - bytes < options_.min_free_disk) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the file system of ", at.display, " has ", left, " bytes free (", disk.in_flight,
        " more admitted to pushes being written); ", bytes,
        " more would leave less than --spark-push-min-free-disk, ", options_.min_free_disk));
  }
  disk.in_flight += bytes;
  return DiskClaim(this, dev, bytes, disk.dirty_memory_low);
}

void PushMerger::Written(uint64_t dev, uint64_t bytes) {
  // Written bytes count against the sample until the next one sees them.
  absl::MutexLock lock(&disk_mu_);
  auto held = disks_.find(dev);
  if (held == disks_.end()) return;
  held->second.in_flight -= std::min(held->second.in_flight, bytes);
  held->second.written += bytes;
}

absl::Status PushMerger::Options::Validate() const {
  // A chunk of at most 2 GiB: Spark's reducers read a chunk in one frame.
  FERRY_RETURN_IF_ERROR(CheckRange("--spark-push-min-chunk-bytes",
                                   static_cast<uint64_t>(min_chunk_bytes), 1, uint64_t{1} << 31));
  FERRY_RETURN_IF_ERROR(
      CheckRange("--spark-push-max-open-partitions", max_open_partitions, 1, uint64_t{1} << 20));
  FERRY_RETURN_IF_ERROR(CheckRange("--spark-push-max-open-partitions-per-app",
                                   max_open_partitions_per_app, 1, uint64_t{1} << 20));
  FERRY_RETURN_IF_ERROR(
      CheckRange("--spark-push-max-app-bytes", max_app_bytes, 1, uint64_t{1} << 50));
  FERRY_RETURN_IF_ERROR(
      CheckRange("--spark-push-max-app-partitions", max_app_partitions, 1, uint64_t{1} << 24));
  FERRY_RETURN_IF_ERROR(CheckRange("--spark-push-max-deferred-memory-per-client",
                                   max_deferred_memory_per_client, 0, max_deferred_memory));
  FERRY_RETURN_IF_ERROR(CheckRange("--spark-push-max-deferred-disk-per-client",
                                   max_deferred_disk_per_client, 0, max_deferred_disk));
  return CheckPositive("--spark-push-timeout", push_timeout);
}

PushMerger::PushMerger(Options options)
    : options_(options),
      deferred_memory_(options.max_deferred_memory, options.max_deferred_memory_per_client,
                       "bytes of pushed blocks waiting in memory for their partition"),
      deferred_disk_(options.max_deferred_disk, options.max_deferred_disk_per_client,
                     "bytes of pushed blocks waiting on disk for their partition") {}

absl::StatusOr<PushMerger::Deferral> PushMerger::DeferInMemory(const std::string& client,
                                                               uint64_t bytes) {
  Deferral deferral;
  FERRY_ASSIGN_OR_RETURN(deferral.lease, deferred_memory_.Acquire(client, bytes));
  stats_.deferred[0].Add();
  return deferral;
}

absl::StatusOr<PushMerger::Deferral> PushMerger::DeferOnDisk(const Partition& partition,
                                                             const std::string& client,
                                                             uint64_t bytes) {
  Deferral deferral;
  FERRY_ASSIGN_OR_RETURN(deferral.lease, deferred_disk_.Acquire(client, bytes));
  deferral.spill = OpenDirOf(partition.data_at, O_TMPFILE | O_RDWR | O_CLOEXEC, nullptr, 0600);
  if (!deferral.spill.valid()) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("open a file for a waiting block beside ", partition.data_at.display));
  }
  struct stat st {};
  if (::fstat(deferral.spill.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("stat a file beside ", partition.data_at.display));
  }
  FERRY_ASSIGN_OR_RETURN(std::optional<DiskClaim> claimed,
                         ClaimDisk(static_cast<uint64_t>(st.st_dev), deferral.spill.get(), bytes,
                                   partition.data_at, /*on_worker=*/true));
  if (!claimed.has_value()) {
    return absl::UnavailableError(
        absl::StrCat("the free space of ", partition.data_at.display, " was not sampled in time"));
  }
  deferral.in_flight = *std::move(claimed);
  stats_.deferred[1].Add();
  return deferral;
}

void PushMerger::RegisterAttempt(const std::string& app_id, int32_t attempt_id,
                                 std::shared_ptr<const spark::ExecutorDirs> merge_dirs) {
  std::vector<std::shared_ptr<Partition>> deleted;
  std::string records;
  {
    absl::MutexLock lock(&mu_);
    // A restart's registrations: the attempt's merges are in the dirs it kept.
    if (auto kept = loaded_dirs_.find(app_id);
        kept != loaded_dirs_.end() && kept->second.attempt_id == attempt_id) {
      if (kept->second.paths != PathsOf(*merge_dirs)) return;
      loaded_dirs_.erase(kept);
    }
    auto [it, inserted] = apps_.try_emplace(app_id);
    App& app = it->second;
    if (!inserted && attempt_id <= app.attempt_id) return;  // set already, or an older attempt's
    // A newer attempt: the former one's merges go.
    for (auto& [shuffle_id, shuffle] : app.shuffles) {
      Detach(app_id, shuffle_id, app, shuffle, &deleted, &records);
    }
    app.shuffles.clear();
    app.bytes = 0;
    app.cost = 0;
    app.attempt_id = attempt_id;
    app.merge_dirs = std::move(merge_dirs);
    records += DirsLine(app_id, attempt_id, PathsOf(*app.merge_dirs));
    // Merges finalized before a restart.
    std::erase_if(loaded_, [&](const Finalized& merge) {
      if (merge.app_id != app_id || merge.attempt_id != attempt_id) return false;
      Shuffle& shuffle = app.shuffles[merge.shuffle_id];
      shuffle.merge_id = merge.merge_id;
      shuffle.finalized = true;
      shuffle.kept = true;
      ++app.cost;
      return true;
    });
  }
  DeleteFiles(deleted);
  AppendState(records);
}

absl::StatusOr<std::string> PushMerger::CheckState(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxStateFileBytes);
  if (absl::IsNotFound(text.status())) return absl::StrCat(path, ": none yet");
  if (absl::IsInvalidArgument(text.status())) {
    return absl::StrCat(path, ": would be set aside at start (", text.status().message(), ")");
  }
  if (!text.ok()) return text.status();
  const Replayed replayed = Replay(*text);
  return absl::StrCat(
      path, ": ", replayed.merges.size(), " finalized merges",
      replayed.bad > 0 ? absl::StrCat(", ", replayed.bad, " damaged lines skipped") : "");
}

absl::Status PushMerger::LoadState() {
  if (options_.state_file.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = ReadSmallFile(options_.state_file, kMaxStateFileBytes);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  if (absl::IsInvalidArgument(text.status())) {
    // Not a file this server wrote, or past any it writes: the server starts without it
    // (reducers read what it named unmerged).
    const std::string aside = absl::StrCat(options_.state_file, ".set-aside");
    LOG(WARNING) << text.status().message() << "; set aside as " << aside
                 << ", finalized merges start empty";
    if (::rename(options_.state_file.c_str(), aside.c_str()) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("set ", options_.state_file, " aside"));
    }
    return absl::OkStatus();
  }
  if (!text.ok()) return text.status();
  const Replayed replayed = Replay(*text);
  for (const std::string& line : replayed.first_bad) {
    LOG(WARNING) << options_.state_file
                 << ": skipping a line that is no finalized merge, merge dirs or deletion: "
                 << line;
  }
  if (replayed.bad > replayed.first_bad.size()) {
    LOG(WARNING) << options_.state_file << ": skipped " << replayed.bad - replayed.first_bad.size()
                 << " more such lines";
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, value] : replayed.merges) {
      loaded_.push_back({key.first, value.first, key.second, value.second});
    }
    for (const auto& [app_id, dirs] : replayed.dirs) {
      loaded_dirs_[app_id] = {dirs.first, dirs.second};
    }
  }
  absl::MutexLock saving(&state_mu_);
  state_lines_ = replayed.lines;
  return absl::OkStatus();
}

std::string PushMerger::StateTextLocked() const {
  std::string text;
  for (const auto& [app_id, app] : apps_) {
    if (app.merge_dirs != nullptr)
      text += DirsLine(app_id, app.attempt_id, PathsOf(*app.merge_dirs));
    for (const auto& [shuffle_id, shuffle] : app.shuffles) {
      if (!shuffle.kept) continue;
      text += FinalizedLine(app_id, app.attempt_id, shuffle_id, shuffle.merge_id);
    }
  }
  for (const Finalized& merge : loaded_) {
    text += FinalizedLine(merge.app_id, merge.attempt_id, merge.shuffle_id, merge.merge_id);
  }
  for (const auto& [app_id, dirs] : loaded_dirs_) {
    text += DirsLine(app_id, dirs.attempt_id, dirs.paths);
  }
  return text;
}

void PushMerger::RewriteStateBeforeNextChange() {
  absl::MutexLock lock(&state_mu_);
  state_fd_.Reset();
}

void PushMerger::AppendState(const std::string& records) {
  if (options_.state_file.empty() || records.empty()) return;
  absl::MutexLock saving(&state_mu_);
  state_lines_ += static_cast<uint64_t>(std::count(records.begin(), records.end(), '\n'));
  absl::Status written;
  if (state_fd_.valid()) {
    written = WriteFully(state_fd_.get(), records, absl::StrCat("append to ", options_.state_file));
    if (written.ok() && ::fdatasync(state_fd_.get()) != 0) {
      written = absl::ErrnoToStatus(errno, absl::StrCat("fdatasync ", options_.state_file));
    }
    if (!written.ok()) state_fd_.Reset();
  }
  // Rewritten whole: the first time, after a failed write, or once it holds more than
  // twice what is live.
  std::string text;
  uint64_t live = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_fd_.valid() && state_lines_ <= 1024) return;
    text = StateTextLocked();
    live = static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n'));
  }
  if (state_fd_.valid() && state_lines_ <= 2 * live + 1024) return;
  if (absl::Status s = ReplaceFile(options_.state_file, text, 0600); !s.ok()) {
    written = s;
  } else {
    state_lines_ = live;
    state_fd_ =
        UniqueFd(::open(options_.state_file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
    // Whole again (a failed append's records are in it): only a failed open is news.
    written = state_fd_.valid()
                  ? absl::OkStatus()
                  : absl::ErrnoToStatus(errno, absl::StrCat("open ", options_.state_file));
  }
  uint64_t held_back = 0;
  if (!written.ok() && state_log_.Take(absl::Now(), &held_back)) {
    LOG(WARNING) << "keeping finalized merges across restarts: " << written
                 << (held_back > 0 ? absl::StrCat(" (", held_back, " such lines held back)") : "");
  }
}

ShuffleFileLocation PushMerger::Partition::Locate(const char* suffix) const {
  return dirs->Locate(spark::MergedFileName(app_id, shuffle_id, merge_id, reduce_id, suffix));
}

absl::Status PushMerger::CreateFiles(Partition& partition) {
  MergedPartition::Files files;
  UniqueFd* fds[] = {&files.data, &files.index, &files.meta};
  struct stat made[3] = {};
  absl::Status status;
  for (int i = 0; i < 3 && status.ok(); ++i) {
    const ShuffleFileLocation at = partition.Locate(kSuffixes[i]);
    *fds[i] = OpenBeneath(at.dir_fd, at.relative,
                          O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, kMergedFileMode);
    if (!fds[i]->valid() || ::fstat(fds[i]->get(), &made[i]) != 0) {
      status = absl::ErrnoToStatus(errno, absl::StrCat("create ", at.display));
    }
  }
  absl::StatusOr<std::unique_ptr<MergedPartition>> merged = absl::InternalError("not created");
  if (status.ok()) {
    merged = MergedPartition::Create(
        std::move(files), options_.min_chunk_bytes,
        spark::MergedFileName(partition.app_id, partition.shuffle_id, partition.merge_id,
                              partition.reduce_id, "*"));
    status = merged.status();
  }
  bool gone = false;
  {
    absl::MutexLock p(&partition.mu);
    gone = partition.finalized;
    if (!status.ok()) {
      partition.broken = status;
    } else if (!gone) {
      partition.files = *std::move(merged);
      partition.dev = static_cast<uint64_t>(made[0].st_dev);
    }
  }
  if (!status.ok() || gone) {
    merged = absl::InternalError("let go");  // closes the files
    // Finalized or deleted while they were made: they go, unless the names are another
    // partition's by now.
    for (int i = 0; i < 3; ++i) {
      if (made[i].st_ino != 0) UnlinkBeneath(partition.Locate(kSuffixes[i]), &made[i]);
    }
    absl::MutexLock lock(&mu_);
    ClosedLocked(partition.app_id, 1);
  }
  return status;
}

absl::StatusOr<PushMerger::Admission> PushMerger::Admit(const spark::PushBlockStream& push,
                                                        bool on_worker) {
  std::shared_ptr<Partition> created;
  std::vector<std::shared_ptr<Partition>> deleted;
  std::string records;
  absl::StatusOr<Admission> admission;
  {
    absl::MutexLock lock(&mu_);
    admission = AdmitLocked(push, on_worker, &created, &deleted, &records);
  }
  DeleteFiles(deleted);
  AppendState(records);
  if (created != nullptr) {
    absl::Status made = CreateFiles(*created);
    if (!made.ok()) {
      absl::MutexLock lock(&mu_);
      // Gone from the maps, unless the merge went first.
      if (auto [app, shuffle] = HolderLocked(*created); shuffle != nullptr) {
        shuffle->partitions.erase(created->reduce_id);
        --shuffle->cost;
        --app->cost;
      }
      return made;  // the turn goes with the admission
    }
  }
  return admission;
}

absl::StatusOr<PushMerger::Admission> PushMerger::AdmitLocked(
    const spark::PushBlockStream& push, bool on_worker, std::shared_ptr<Partition>* created,
    std::vector<std::shared_ptr<Partition>>* deleted, std::string* records) {
  Admission admission;
  admission.block_id = PushBlockName(push);
  auto app_it = apps_.find(push.app_id);
  if (app_it == apps_.end()) {
    return NotRegistered(push.app_id);
  }
  App& app = app_it->second;
  if (push.app_attempt_id != app.attempt_id) {
    admission.code = PushReturnCode::kTooOldAttemptPush;
    return admission;
  }
  if (push.map_index < 0 || push.reduce_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(admission.block_id, ": a negative index"));
  }
  auto [shuffle_it, new_shuffle] = app.shuffles.try_emplace(push.shuffle_id);
  Shuffle& shuffle = shuffle_it->second;
  if (new_shuffle) {
    if (absl::Status bound = CostBoundLocked(push.app_id, app); !bound.ok()) {
      app.shuffles.erase(shuffle_it);
      return bound;
    }
    ++app.cost;
    shuffle.merge_id = push.shuffle_merge_id;
  } else if (push.shuffle_merge_id < shuffle.merge_id) {
    admission.code = PushReturnCode::kStaleBlockPush;
    return admission;
  } else if (push.shuffle_merge_id > shuffle.merge_id) {
    // A new attempt of an indeterminate stage: the older merge goes.
    if (!on_worker) {
      admission.needs_worker = true;
      return admission;
    }
    Detach(push.app_id, push.shuffle_id, app, shuffle, deleted, records);
    shuffle.merge_id = push.shuffle_merge_id;
    shuffle.finalized = false;
  } else if (shuffle.finalized) {
    admission.code = PushReturnCode::kTooLateBlockPush;
    return admission;
  }
  if (app.bytes >= options_.max_app_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("application ", push.app_id, " holds ",
                                                     app.bytes, " merged bytes here, its bound"));
  }
  auto partition_it = shuffle.partitions.find(push.reduce_id);
  if (partition_it == shuffle.partitions.end()) {
    if (!on_worker) {
      admission.needs_worker = true;
      return admission;
    }
    FERRY_RETURN_IF_ERROR(CostBoundLocked(push.app_id, app));
    if (open_partitions_ >= options_.max_open_partitions) {
      return absl::ResourceExhaustedError(absl::StrCat(
          options_.max_open_partitions, " merged partitions are open on this shuffle service"));
    }
    uint64_t& open_of_app = open_by_app_[push.app_id];
    if (open_of_app >= options_.max_open_partitions_per_app) {
      return absl::ResourceExhaustedError(
          absl::StrCat("application ", push.app_id, " has ", open_of_app,
                       " merged partitions open on this shuffle service, its share"));
    }
    ++open_of_app;
    ++app.cost;
    ++shuffle.cost;
    auto partition = std::make_shared<Partition>();
    partition->dirs = app.merge_dirs;
    partition->app_id = push.app_id;
    partition->shuffle_id = push.shuffle_id;
    partition->merge_id = shuffle.merge_id;
    partition->reduce_id = push.reduce_id;
    partition->data_at = partition->Locate(kSuffixes[0]);
    // Its files are made once the maps are let go; whoever comes meanwhile waits for
    // its turn, held by this push until then.
    CHECK(partition->turn().TryLock());
    ++open_partitions_;
    shuffle.partitions.emplace(push.reduce_id, partition);
    admission.turn = Turn(partition);
    admission.partition = partition;
    *created = std::move(partition);
    return admission;
  }
  Partition& partition = *partition_it->second;
  // A duplicate is drained and answered success at once; one the partition (busy) does
  // not say is found under its turn.
  if (partition.mu.TryLock()) {
    const bool duplicate =
        partition.files != nullptr && partition.files->Has(static_cast<uint32_t>(push.map_index));
    partition.mu.Unlock();
    if (duplicate) return admission;
  }
  admission.partition = partition_it->second;
  return admission;
}

absl::StatusOr<PushMerger::Target> PushMerger::TargetOf(Partition& partition, int32_t map_index,
                                                        int64_t length, bool on_worker) {
  Target target;
  bool gone = false;
  uint64_t dev = 0;
  absl::Status broken;
  const auto read = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(partition.mu) {
    broken = partition.broken;
    gone = partition.finalized || partition.files == nullptr;
    if (gone || !broken.ok()) return;
    if (partition.files->Has(static_cast<uint32_t>(map_index))) {
      target.duplicate = true;
      return;
    }
    target.fd = partition.files->shared_data();
    target.offset = partition.files->end();
    dev = partition.dev;
  };
  if (on_worker) {
    absl::MutexLock p(&partition.mu);
    read();
  } else if (partition.mu.TryLock()) {
    read();
    partition.mu.Unlock();
  } else {
    target.needs_worker = true;
    return target;
  }
  if (!broken.ok()) return broken;
  {
    absl::MutexLock lock(&mu_);
    auto app = apps_.find(partition.app_id);
    if (gone || app == apps_.end()) {
      // Finalized, or deleted by a newer merge or attempt meanwhile.
      bool newer = false;
      if (app != apps_.end()) {
        auto shuffle = app->second.shuffles.find(partition.shuffle_id);
        newer =
            shuffle != app->second.shuffles.end() && shuffle->second.merge_id > partition.merge_id;
      }
      target.code = newer ? PushReturnCode::kStaleBlockPush : PushReturnCode::kTooLateBlockPush;
      target.fd.reset();
      return target;
    }
    if (!target.duplicate &&
        app->second.bytes + static_cast<uint64_t>(length) > options_.max_app_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("application ", partition.app_id, " would pass its bound of ",
                       options_.max_app_bytes, " merged bytes here"));
    }
  }
  // The file system's free space: with no lock of the merger's held.
  if (!target.duplicate) {
    FERRY_ASSIGN_OR_RETURN(std::optional<DiskClaim> claimed,
                           ClaimDisk(dev, target.fd->get(), static_cast<uint64_t>(length),
                                     partition.data_at, on_worker));
    if (!claimed.has_value()) {
      target = Target();
      target.needs_worker = true;
      return target;
    }
    target.in_flight = *std::move(claimed);
  }
  return target;
}

std::optional<PushReturnCode> PushMerger::Commit(Partition& partition, int32_t map_index,
                                                 int64_t length, int data_fd, bool on_worker) {
  std::optional<PushReturnCode> code;
  const auto commit = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(partition.mu) {
    if (partition.finalized || partition.files == nullptr) {
      if (!on_worker) return;
      // The write may have landed after the finalize cut the file.
      if (::ftruncate(data_fd, partition.final_size) != 0) {
        PLOG(WARNING) << "cutting a late push to " << partition.data_at.display
                      << " back to its finalized size";
      }
      code = PushReturnCode::kTooLateBlockPush;
      return;
    }
    if (!on_worker && partition.files->ClosesChunkWith(length)) return;
    // An error recording the chunk leaves the block merged and the chunk open.
    (void)partition.files->Commit(static_cast<uint32_t>(map_index), length);
    code = PushReturnCode::kSuccess;
  };
  if (on_worker) {
    absl::MutexLock p(&partition.mu);
    commit();
  } else if (partition.mu.TryLock()) {
    commit();
    partition.mu.Unlock();
  }
  if (code != PushReturnCode::kSuccess) return code;
  // The bytes count against the application while its merge holds the partition.
  absl::MutexLock lock(&mu_);
  if (auto [app, shuffle] = HolderLocked(partition); shuffle != nullptr) {
    app->bytes += static_cast<uint64_t>(length);
    shuffle->bytes += static_cast<uint64_t>(length);
  }
  return code;
}

std::pair<PushMerger::App*, PushMerger::Shuffle*> PushMerger::HolderLocked(
    const Partition& partition) {
  auto app = apps_.find(partition.app_id);
  if (app == apps_.end()) return {nullptr, nullptr};
  auto shuffle = app->second.shuffles.find(partition.shuffle_id);
  if (shuffle == app->second.shuffles.end() || shuffle->second.merge_id != partition.merge_id) {
    return {nullptr, nullptr};
  }
  auto held = shuffle->second.partitions.find(partition.reduce_id);
  if (held == shuffle->second.partitions.end() || held->second.get() != &partition) {
    return {nullptr, nullptr};
  }
  return {&app->second, &shuffle->second};
}

absl::StatusOr<spark::MergeStatuses> PushMerger::Finalize(
    const spark::FinalizeShuffleMerge& request) {
  spark::MergeStatuses statuses;
  statuses.shuffle_id = request.shuffle_id;
  statuses.shuffle_merge_id = request.shuffle_merge_id;
  std::vector<std::shared_ptr<Partition>> deleted;
  std::string records;
  std::vector<std::pair<int32_t, std::shared_ptr<Partition>>> finalizing;
  {
    absl::MutexLock lock(&mu_);
    auto app_it = apps_.find(request.app_id);
    if (app_it == apps_.end()) {
      return NotRegistered(request.app_id);
    }
    App& app = app_it->second;
    if (request.app_attempt_id != app.attempt_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "The attempt id ", request.app_attempt_id,
          " in this FinalizeShuffleMerge message does not match with the current attempt id ",
          app.attempt_id, " stored in shuffle service for application ", request.app_id));
    }
    auto [it, inserted] = app.shuffles.try_emplace(request.shuffle_id);
    Shuffle& shuffle = it->second;
    if (inserted) {
      // Never pushed here: finalized with nothing, kept (so that later pushes are too
      // late) within the application's bound, and never in the state file.
      if (!CostBoundLocked(request.app_id, app).ok()) {
        app.shuffles.erase(it);
        return statuses;
      }
      ++app.cost;
    } else {
      if (request.shuffle_merge_id < shuffle.merge_id || shuffle.finalized) {
        return absl::FailedPreconditionError(
            absl::StrCat("Shuffle merge finalize request for shuffle ", request.shuffle_id,
                         " with shuffleMergeId ", request.shuffle_merge_id,
                         " is stale shuffle finalize request as shuffle blocks of a higher "
                         "shuffleMergeId for the shuffle is already being pushed"));
      }
      if (request.shuffle_merge_id > shuffle.merge_id) {
        Detach(request.app_id, request.shuffle_id, app, shuffle, &deleted, &records);
      }
    }
    shuffle.merge_id = request.shuffle_merge_id;
    shuffle.finalized = true;
    for (const auto& [reduce_id, partition] : shuffle.partitions) {
      finalizing.emplace_back(reduce_id, partition);
    }
  }
  DeleteFiles(deleted);
  uint64_t closed = 0;
  std::vector<std::shared_ptr<Partition>> empty;
  for (const auto& [reduce_id, partition] : finalizing) {
    absl::MutexLock p(&partition->mu);
    partition->finalized = true;
    if (partition->files == nullptr) continue;  // its files not made (yet)
    absl::StatusOr<MergedPartition::Final> final = partition->files->Finalize();
    partition->files.reset();
    ++closed;
    if (!final.ok() || final->map_indexes.empty()) {
      empty.push_back(partition);  // no reducer reads it
      continue;
    }
    partition->final_size = final->size;
    statuses.bitmaps.push_back(std::move(final->map_indexes));
    statuses.reduce_ids.push_back(reduce_id);
    statuses.sizes.push_back(final->size);
  }
  {
    absl::MutexLock lock(&mu_);
    ClosedLocked(request.app_id, closed);
    // What the merge keeps once finalized: the reduce ids that hold blocks, as Spark's
    // resolver keeps them, unless the merge went meanwhile (its partitions went with it).
    auto app = apps_.find(request.app_id);
    if (app == apps_.end()) {
      empty.clear();  // deleted with the application
    } else {
      auto shuffle = app->second.shuffles.find(request.shuffle_id);
      if (shuffle != app->second.shuffles.end() &&
          shuffle->second.merge_id == request.shuffle_merge_id && shuffle->second.finalized &&
          !shuffle->second.partitions.empty()) {
        shuffle->second.partitions.clear();
        shuffle->second.finalized_reduce_ids = statuses.reduce_ids;
        app->second.cost -= shuffle->second.cost - 1 - statuses.reduce_ids.size();
        shuffle->second.cost = 1 + statuses.reduce_ids.size();
        if (!statuses.reduce_ids.empty()) {
          shuffle->second.kept = true;
          records += FinalizedLine(request.app_id, request.app_attempt_id, request.shuffle_id,
                                   request.shuffle_merge_id);
        }
      } else {
        empty.clear();  // deleted with the merge
      }
    }
  }
  for (const std::shared_ptr<Partition>& partition : empty) {
    for (const char* suffix : kSuffixes) UnlinkBeneath(partition->Locate(suffix));
  }
  AppendState(records);
  return statuses;
}

absl::Status PushMerger::Remove(const spark::RemoveShuffleMerge& request) {
  std::vector<std::shared_ptr<Partition>> deleted;
  std::string records;
  {
    absl::MutexLock lock(&mu_);
    auto app_it = apps_.find(request.app_id);
    if (app_it == apps_.end()) return absl::OkStatus();
    App& app = app_it->second;
    if (request.app_attempt_id != app.attempt_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("RemoveShuffleMerge of attempt ", request.app_attempt_id, " of application ",
                       request.app_id, ", whose attempt here is ", app.attempt_id));
    }
    auto it = app.shuffles.find(request.shuffle_id);
    if (it == app.shuffles.end()) return absl::OkStatus();
    if (request.shuffle_merge_id != -1 && request.shuffle_merge_id != it->second.merge_id) {
      return absl::OkStatus();  // not the merge held here
    }
    Detach(request.app_id, request.shuffle_id, app, it->second, &deleted, &records);
    app.shuffles.erase(it);
    --app.cost;
  }
  DeleteFiles(deleted);
  AppendState(records);
  return absl::OkStatus();
}

void PushMerger::ApplicationEnded(const std::string& app_id) {
  std::vector<std::shared_ptr<Partition>> deleted;
  std::string records;
  {
    absl::MutexLock lock(&mu_);
    auto it = apps_.find(app_id);
    bool kept =
        (std::erase_if(loaded_, [&](const Finalized& merge) { return merge.app_id == app_id; }) |
         loaded_dirs_.erase(app_id)) > 0;
    if (it == apps_.end() && !kept) return;
    if (it != apps_.end()) {
      kept = kept || it->second.merge_dirs != nullptr;
      for (auto& [shuffle_id, shuffle] : it->second.shuffles) {
        Detach(app_id, shuffle_id, it->second, shuffle, &deleted, &records);
      }
      apps_.erase(it);
    }
    // One line for all the state file kept of it (its dirs, its merges), if it kept any.
    if (kept || !records.empty()) records = DeletedLine(app_id, "*", "*");
  }
  ForgetIndexes(app_id);
  DeleteFiles(deleted);
  AppendState(records);
}

void PushMerger::ForgetUnclaimed() {
  std::string records;
  {
    absl::MutexLock lock(&mu_);
    for (const Finalized& merge : loaded_) {
      records +=
          DeletedLine(merge.app_id, absl::StrCat(merge.attempt_id), absl::StrCat(merge.shuffle_id));
    }
    loaded_.clear();
    for (const auto& [app_id, dirs] : loaded_dirs_) {
      if (!apps_.contains(app_id)) records += DeletedLine(app_id, "*", "*");
    }
    loaded_dirs_.clear();
  }
  AppendState(records);
}

void PushMerger::ForgetIndexes(const std::string& app_id) {
  absl::MutexLock lock(&index_mu_);
  indexes_.EraseIf([&](const IndexKey& key, const auto&) { return key.app_id == app_id; });
}

absl::Status PushMerger::CostBoundLocked(const std::string& app_id, const App& app) const {
  if (app.cost < options_.max_app_partitions) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("application ", app_id, " holds ", app.cost,
                   " merged partitions and shuffles here, its bound "
                   "(--spark-push-max-app-partitions)"));
}

void PushMerger::Detach(const std::string& app_id, int32_t shuffle_id, App& app, Shuffle& shuffle,
                        std::vector<std::shared_ptr<Partition>>* out, std::string* records) {
  app.bytes -= shuffle.bytes;
  shuffle.bytes = 0;
  app.cost -= shuffle.cost - 1;
  shuffle.cost = 1;
  for (auto& [reduce_id, partition] : shuffle.partitions) out->push_back(std::move(partition));
  shuffle.partitions.clear();
  // A finalized merge's partitions, made again to name their files.
  for (int32_t reduce_id : shuffle.finalized_reduce_ids) {
    auto partition = std::make_shared<Partition>();
    partition->dirs = app.merge_dirs;
    partition->app_id = app_id;
    partition->shuffle_id = shuffle_id;
    partition->merge_id = shuffle.merge_id;
    partition->reduce_id = reduce_id;
    out->push_back(std::move(partition));
  }
  if (shuffle.kept && records != nullptr) {
    *records += DeletedLine(app_id, absl::StrCat(app.attempt_id), absl::StrCat(shuffle_id));
  }
  shuffle.finalized_reduce_ids.clear();
  shuffle.kept = false;
}

void PushMerger::ClosedLocked(const std::string& app_id, uint64_t n) {
  if (n == 0) return;
  open_partitions_ -= n;
  auto app = open_by_app_.find(app_id);
  if (app == open_by_app_.end()) return;
  app->second -= std::min(app->second, n);
  if (app->second == 0) open_by_app_.erase(app);
}

void PushMerger::DeleteFiles(const std::vector<std::shared_ptr<Partition>>& partitions) {
  absl::flat_hash_map<std::string, uint64_t> closed;
  for (const std::shared_ptr<Partition>& partition : partitions) {
    {
      absl::MutexLock p(&partition->mu);
      if (partition->files != nullptr) ++closed[partition->app_id];
      partition->files.reset();
      partition->finalized = true;
    }
    for (const char* suffix : kSuffixes) UnlinkBeneath(partition->Locate(suffix));
  }
  if (closed.empty()) return;
  absl::MutexLock lock(&mu_);
  for (const auto& [app_id, n] : closed) ClosedLocked(app_id, n);
}

absl::StatusOr<PushMerger::MergedFiles> PushMerger::OpenMerged(const std::string& app_id,
                                                               int32_t shuffle_id, int32_t merge_id,
                                                               int32_t reduce_id) const {
  std::shared_ptr<const spark::ExecutorDirs> dirs;
  {
    absl::MutexLock lock(&mu_);
    auto app = apps_.find(app_id);
    if (app == apps_.end()) {
      return NotRegistered(app_id);
    }
    auto shuffle = app->second.shuffles.find(shuffle_id);
    if (shuffle != app->second.shuffles.end() && shuffle->second.merge_id > merge_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MergedBlockData fetch for shuffle ", shuffle_id, " with shuffleMergeId ", merge_id,
          " reduceId ", reduce_id, " is stale shuffle block fetch request ",
          "as shuffle blocks of a higher shuffleMergeId for the shuffle is available"));
    }
    if (shuffle == app->second.shuffles.end() || shuffle->second.merge_id != merge_id ||
        !shuffle->second.finalized) {
      return absl::FailedPreconditionError(absl::StrCat("shuffle ", shuffle_id, " merge ", merge_id,
                                                        " of ", app_id, " is not finalized here"));
    }
    dirs = app->second.merge_dirs;
  }
  const auto open = [&](const char* suffix,
                        struct stat* st) -> absl::StatusOr<std::shared_ptr<DataFile>> {
    const ShuffleFileLocation at =
        dirs->Locate(spark::MergedFileName(app_id, shuffle_id, merge_id, reduce_id, suffix));
    FERRY_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(at.dir_fd, at.relative, at.display, st));
    auto file = std::make_shared<DataFile>();
    file->path = at.display;
    file->fd = std::move(fd);
    file->identity = {static_cast<uint64_t>(st->st_dev), static_cast<uint64_t>(st->st_ino)};
    return file;
  };
  MergedFiles files;
  struct stat data_st {};
  struct stat index_st {};
  struct stat meta_st {};
  FERRY_ASSIGN_OR_RETURN(files.data, open("data", &data_st));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<DataFile> index, open("index", &index_st));
  FERRY_ASSIGN_OR_RETURN(files.meta, open("meta", &meta_st));
  const auto damaged = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(index->path, ": ", why));
  };
  if (static_cast<uint64_t>(index_st.st_size) > kMaxIndexFileBytes) {
    return damaged(absl::StrCat(index_st.st_size, " bytes are not a merged partition's index"));
  }
  if (static_cast<uint64_t>(meta_st.st_size) > kMaxIndexFileBytes * 64) {
    return damaged(absl::StrCat("its meta file has ", meta_st.st_size, " bytes"));
  }
  const IndexKey key{app_id, shuffle_id, merge_id, reduce_id};
  const auto same_file = [&](const CachedIndex& c) {
    return c.dev == static_cast<uint64_t>(index_st.st_dev) &&
           c.ino == static_cast<uint64_t>(index_st.st_ino) && c.size == index_st.st_size &&
           c.mtime_ns == absl::ToUnixNanos(absl::TimeFromTimespec(index_st.st_mtim));
  };
  std::shared_ptr<const CachedIndex> cached;
  {
    absl::MutexLock lock(&index_mu_);
    if (const auto* found = indexes_.Find(key); found != nullptr && same_file(**found)) {
      cached = *found;
    }
  }
  if (cached == nullptr) {
    stats_.index_reads.Add();
    std::string bytes(static_cast<size_t>(index_st.st_size), '\0');
    if (PreadFull(index->fd.get(), bytes.data(), bytes.size(), 0) !=
        static_cast<ssize_t>(bytes.size())) {
      return absl::ErrnoToStatus(errno, absl::StrCat("read ", index->path));
    }
    // A map output's index, checked as one (common/shuffle_files). The chunks may end
    // before the data does: a push that lands after the finalize is cut back by its writer.
    uint64_t end = 0;
    if (bytes.size() >= 8) {
      std::memcpy(&end, bytes.data() + bytes.size() - 8, 8);
      end = be64toh(end);
    }
    auto parsed = std::make_shared<CachedIndex>();
    parsed->dev = static_cast<uint64_t>(index_st.st_dev);
    parsed->ino = static_cast<uint64_t>(index_st.st_ino);
    parsed->size = index_st.st_size;
    parsed->mtime_ns = absl::ToUnixNanos(absl::TimeFromTimespec(index_st.st_mtim));
    FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, ParseIndex(bytes, end, index->path));
    parsed->offsets = std::make_shared<const std::vector<uint64_t>>(std::move(offsets));
    cached = parsed;
    absl::MutexLock lock(&index_mu_);
    indexes_.Insert(key, cached, 64 + parsed->offsets->size() * sizeof(uint64_t));
  }
  if (!cached->offsets->empty() &&
      cached->offsets->back() > static_cast<uint64_t>(data_st.st_size)) {
    return damaged(absl::StrCat("its chunks end at ", cached->offsets->back(), " but the data has ",
                                data_st.st_size, " bytes"));
  }
  files.offsets = cached->offsets;
  files.meta_bytes = meta_st.st_size;
  return files;
}

absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> PushMerger::MergeDirs(
    const std::string& app_id) const {
  absl::MutexLock lock(&mu_);
  auto app = apps_.find(app_id);
  if (app == apps_.end() || app->second.merge_dirs == nullptr) {
    return NotRegistered(app_id);
  }
  return app->second.merge_dirs;
}

uint64_t PushMerger::open_partitions() const {
  absl::MutexLock lock(&mu_);
  return open_partitions_;
}

PushMerger::Outcome PushMerger::OutcomeOf(spark::PushReturnCode code) {
  switch (code) {
    case PushReturnCode::kSuccess:
      return Outcome::kMerged;
    case PushReturnCode::kTooLateBlockPush:
      return Outcome::kTooLate;
    case PushReturnCode::kBlockAppendCollisionDetected:
      return Outcome::kCollision;
    case PushReturnCode::kStaleBlockPush:
      return Outcome::kStale;
    case PushReturnCode::kTooOldAttemptPush:
      return Outcome::kTooOldAttempt;
  }
  return Outcome::kRefused;
}

uint64_t PushMerger::admitted_bytes() const {
  uint64_t admitted = 0;
  absl::MutexLock lock(&disk_mu_);
  for (const auto& [dev, disk] : disks_) admitted += disk.in_flight;
  return admitted;
}

void PushMerger::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  FERRY_APPEND_STATS(FERRY_PUSH_STATS, {&stats_}, out);
}

// The hand-over file: a header line, then a line per merge being written and per
// partition of one, tab-separated:
//   shuffle   <app> <attempt> <shuffle> <merge>
//   partition <app> <attempt> <shuffle> <merge> <reduce> <end> <chunk start> <index bytes>
//             <meta bytes> <chunks> <merged maps> <open chunk's maps>
// (the bitmaps in Spark's portable format, base64).
constexpr absl::string_view kOpenHeader = "ferry push merges being written 1";

absl::Status PushMerger::HandOverOpen(const std::string& path) {
  std::string text = absl::StrCat(kOpenHeader, "\n");
  std::vector<std::pair<int32_t, std::shared_ptr<Partition>>> partitions;  // with attempts
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [app_id, app] : apps_) {
      for (const auto& [shuffle_id, shuffle] : app.shuffles) {
        if (shuffle.finalized) continue;
        absl::StrAppend(&text, "shuffle\t", app_id, "\t", app.attempt_id, "\t", shuffle_id, "\t",
                        shuffle.merge_id, "\n");
        for (const auto& [reduce_id, partition] : shuffle.partitions) {
          partitions.emplace_back(app.attempt_id, partition);
        }
      }
    }
  }
  for (const auto& [attempt_id, partition] : partitions) {
    absl::MutexLock p(&partition->mu);
    if (partition->files == nullptr || partition->finalized) continue;
    const MergedPartition::Progress at = partition->files->progress();
    absl::StrAppend(&text, "partition\t", partition->app_id, "\t", attempt_id, "\t",
                    partition->shuffle_id, "\t", partition->merge_id, "\t", partition->reduce_id,
                    "\t", at.end, "\t", at.chunk_start, "\t", at.index_end, "\t", at.meta_end, "\t",
                    at.chunks, "\t", absl::Base64Escape(at.merged.Serialize()), "\t",
                    absl::Base64Escape(at.chunk_maps.Serialize()), "\n");
  }
  return ReplaceFile(path, text, 0600);
}

namespace {

// A line of the hand-over file: a merge being written, or one of its partitions.
struct OpenLine {
  bool partition = false;
  std::string app_id;
  int32_t attempt = 0, shuffle_id = 0, merge_id = 0, reduce_id = 0;
  MergedPartition::Progress progress;
};

absl::StatusOr<OpenLine> ParseOpenLine(absl::string_view line) {
  const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
  OpenLine open;
  open.partition = f[0] == "partition";
  const auto bad = [] { return absl::InvalidArgumentError("not a line of merges being written"); };
  if (f.size() != (open.partition ? 13u : 5u) || (!open.partition && f[0] != "shuffle") ||
      !absl::SimpleAtoi(f[2], &open.attempt) || !absl::SimpleAtoi(f[3], &open.shuffle_id) ||
      !absl::SimpleAtoi(f[4], &open.merge_id)) {
    return bad();
  }
  open.app_id = std::string(f[1]);
  if (!open.partition) return open;
  MergedPartition::Progress& p = open.progress;
  std::string merged, chunk_maps;
  if (!absl::SimpleAtoi(f[5], &open.reduce_id) || !absl::SimpleAtoi(f[6], &p.end) ||
      !absl::SimpleAtoi(f[7], &p.chunk_start) || !absl::SimpleAtoi(f[8], &p.index_end) ||
      !absl::SimpleAtoi(f[9], &p.meta_end) || !absl::SimpleAtoi(f[10], &p.chunks) ||
      !absl::Base64Unescape(f[11], &merged) || !absl::Base64Unescape(f[12], &chunk_maps)) {
    return bad();
  }
  absl::string_view merged_bytes = merged, chunk_bytes = chunk_maps;
  FERRY_ASSIGN_OR_RETURN(p.merged, spark::Bitmap::Read(&merged_bytes, 1u << 31));
  FERRY_ASSIGN_OR_RETURN(p.chunk_maps, spark::Bitmap::Read(&chunk_bytes, 1u << 31));
  return open;
}

}  // namespace

absl::StatusOr<size_t> PushMerger::TakeOpen(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxStateFileBytes);
  if (absl::IsNotFound(text.status())) return 0;
  ::unlink(path.c_str());  // read once: a later start finds nothing
  if (!text.ok()) return text.status();
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
  if (lines.empty() || lines[0] != kOpenHeader) {
    return absl::DataLossError(absl::StrCat(path, " is not a list of merges being written"));
  }
  size_t taken = 0;
  size_t dropped = 0;
  std::string first_drop;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::StatusOr<bool> took = TakeOpenLine(lines[i]);
    if (took.ok()) {
      taken += *took;
    } else if (dropped++ == 0) {
      first_drop = absl::StrCat(lines[i].substr(0, 120), ": ", took.status().message());
    }
  }
  if (dropped > 0) {
    LOG(WARNING) << "push-based shuffle: " << dropped
                 << " merged partitions handed over are read unmerged; the first: " << first_drop;
  }
  return taken;
}

absl::StatusOr<bool> PushMerger::TakeOpenLine(absl::string_view line) {
  FERRY_ASSIGN_OR_RETURN(OpenLine open, ParseOpenLine(line));
  auto partition = std::make_shared<Partition>();
  {
    absl::MutexLock lock(&mu_);
    auto app = apps_.find(open.app_id);
    const bool registered = app != apps_.end() && app->second.attempt_id == open.attempt;
    if (!open.partition) {
      // A merge of an attempt not registered here is not one.
      if (!registered) return false;
      auto [shuffle, inserted] = app->second.shuffles.try_emplace(open.shuffle_id);
      if (inserted) {
        shuffle->second.merge_id = open.merge_id;
        ++app->second.cost;
      }
      return false;
    }
    if (!registered) return absl::NotFoundError("its attempt is not registered here");
    partition->dirs = app->second.merge_dirs;
  }
  partition->app_id = open.app_id;
  partition->shuffle_id = open.shuffle_id;
  partition->merge_id = open.merge_id;
  partition->reduce_id = open.reduce_id;
  partition->data_at = partition->Locate(kSuffixes[0]);
  FERRY_RETURN_IF_ERROR(ReopenFiles(*partition, std::move(open.progress)));
  int64_t bytes = 0;
  {
    absl::MutexLock p(&partition->mu);
    bytes = partition->files->end();
  }
  absl::MutexLock lock(&mu_);
  auto app = apps_.find(open.app_id);
  if (app == apps_.end() || app->second.attempt_id != open.attempt ||
      open_partitions_ >= options_.max_open_partitions ||
      open_by_app_[open.app_id] >= options_.max_open_partitions_per_app) {
    return absl::ResourceExhaustedError("over a bound here");
  }
  Shuffle& shuffle = app->second.shuffles[open.shuffle_id];
  if (shuffle.finalized || shuffle.merge_id != open.merge_id ||
      !shuffle.partitions.emplace(open.reduce_id, std::move(partition)).second) {
    return absl::FailedPreconditionError("its merge is not being written here");
  }
  ++open_partitions_;
  ++open_by_app_[open.app_id];
  ++app->second.cost;
  ++shuffle.cost;
  shuffle.bytes += static_cast<uint64_t>(bytes);
  app->second.bytes += static_cast<uint64_t>(bytes);
  return true;
}

absl::Status PushMerger::ReopenFiles(Partition& partition, MergedPartition::Progress progress) {
  // Its files as they are: opened, not made.
  MergedPartition::Files files;
  UniqueFd* fds[] = {&files.data, &files.index, &files.meta};
  for (int k = 0; k < 3; ++k) {
    const ShuffleFileLocation at = partition.Locate(kSuffixes[k]);
    *fds[k] = OpenBeneath(at.dir_fd, at.relative, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (!fds[k]->valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", at.display));
  }
  struct stat data {};
  if (::fstat(files.data.get(), &data) != 0) return absl::ErrnoToStatus(errno, "stat");
  FERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<MergedPartition> resumed,
      MergedPartition::Resume(std::move(files), options_.min_chunk_bytes,
                              spark::MergedFileName(partition.app_id, partition.shuffle_id,
                                                    partition.merge_id, partition.reduce_id, "*"),
                              std::move(progress)));
  absl::MutexLock p(&partition.mu);
  partition.files = std::move(resumed);
  partition.dev = static_cast<uint64_t>(data.st_dev);
  return absl::OkStatus();
}

}  // namespace ferry
