#include "server/spark/apps/handed_off_apps.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/dir_entries.h"
#include "common/json_object.h"
#include "common/status_macros.h"
#include "server/base/small_file.h"
#include "server/storage/ids.h"

namespace ferry {

namespace {

constexpr char kSecretKey[] = "secret";
constexpr char kRecoveryDisabledKey[] = "spark.yarn.shuffle.server.recovery.disabled";
constexpr char kLocalDirsFile[] = "nodemanager-local-dirs";
constexpr size_t kMaxLocalDirsBytes = 1 << 20;

int64_t Nanos(const struct timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

}  // namespace

absl::StatusOr<HandedOffApps::ServiceData> HandedOffApps::ParseServiceData(
    absl::string_view bytes) {
  ServiceData data;
  if (bytes.size() > kMaxServiceDataBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "service data of ", bytes.size(), " bytes (at most ", kMaxServiceDataBytes, " are read)"));
  }
  const absl::string_view trimmed = absl::StripAsciiWhitespace(bytes);
  if (!trimmed.empty() && trimmed.front() == '{') {
    std::optional<JsonObject> payload =
        JsonObject::Read(trimmed, {kSecretKey, kRecoveryDisabledKey}, kMaxJsonDepth);
    if (payload.has_value()) {
      if (JsonField* secret = payload->Find(kSecretKey); secret != nullptr) {
        if (secret->kind == JsonField::kString) {
          if (!secret->string.empty()) data.secret = Secret(std::move(secret->string));
        } else if (secret->kind != JsonField::kNull) {
          return absl::InvalidArgumentError("the service data's \"secret\" is not a string");
        }
      }
      if (const JsonField* recovery = payload->Find(kRecoveryDisabledKey); recovery != nullptr) {
        if (recovery->kind == JsonField::kBool) {
          data.recovery_disabled = recovery->boolean;
        } else if (recovery->kind == JsonField::kString) {
          data.recovery_disabled = absl::AsciiStrToLower(recovery->string) == "true";
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("the service data's \"", kRecoveryDisabledKey, "\" is not a boolean"));
        }
      }
      return data;
    }
  }
  // The secret's bytes (Spark's JavaUtils.stringToBytes: UTF-8); none without
  // spark.authenticate.
  data.unparsed = !trimmed.empty() && trimmed.front() == '{';
  if (!bytes.empty()) data.secret = Secret(bytes);
  return data;
}

absl::Status HandedOffApps::Options::Validate() const {
  if (!yarn_dir.empty() && !apps_dir.empty()) {
    return absl::InvalidArgumentError(
        "--spark-yarn-dir and --spark-apps-dir: one writer hands the applications over, "
        "YARN's NodeManager or a node agent");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HandedOffApps>> HandedOffApps::Open(const Options& options,
                                                                   const Clock& clock) {
  FERRY_RETURN_IF_ERROR(options.Validate());
  const std::string flag = absl::StrCat(options.flag(), " ", options.dir());
  if (options.dir().empty() || options.dir().front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(flag, " is not an absolute path"));
  }
  if (options.rescan <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the hand-off dir's rescan interval must be positive");
  }
  UniqueFd dir(::open(options.dir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    if (errno == ENOTDIR)
      return absl::InvalidArgumentError(absl::StrCat(flag, " is not a directory"));
    return absl::ErrnoToStatus(errno, flag);
  }
  struct stat st {};
  if (::fstat(dir.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", flag));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s is writable by %s (mode %04o): whoever can write it can act as any application; "
        "make it 0750, owned by its writer's user and in ferry_server's group",
        flag, (st.st_mode & S_IWOTH) != 0 ? "anyone" : "its group", st.st_mode & 07777));
  }
  UniqueFd inotify(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify.valid()) return absl::ErrnoToStatus(errno, "inotify_init1");
  if (::inotify_add_watch(
          inotify.get(), options.dir().c_str(),
          IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB | IN_ONLYDIR) < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("watch ", flag));
  }
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) return absl::ErrnoToStatus(errno, "eventfd");
  std::unique_ptr<HandedOffApps> apps(
      new HandedOffApps(options, clock, st.st_uid, std::move(dir), std::move(inotify)));
  apps->stop_ = std::move(stop);
  apps->Rescan();
  apps->watcher_ = std::thread([a = apps.get()] { a->Watch(); });
  return apps;
}

HandedOffApps::HandedOffApps(Options options, const Clock& clock, uid_t owner, UniqueFd dir_fd,
                             UniqueFd inotify)
    : options_(std::move(options)),
      clock_(clock),
      owner_(owner),
      dir_fd_(std::move(dir_fd)),
      inotify_(std::move(inotify)) {}

HandedOffApps::~HandedOffApps() {
  if (watcher_.joinable()) {
    const uint64_t one = 1;
    if (::write(stop_.get(), &one, sizeof(one)) != sizeof(one)) PLOG(ERROR) << "eventfd";
    watcher_.join();
  }
}

std::string HandedOffApps::Distrust(const struct stat& st, bool want_dir) const {
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return want_dir ? "not a directory" : "not a regular file";
  }
  if (st.st_uid != owner_) {
    return absl::StrCat("owned by uid ", st.st_uid, ", not by the dir's owner (uid ", owner_,
                        ", its writer's user)");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::StrFormat("writable by others than its owner (mode %04o)", st.st_mode & 07777);
  }
  return "";
}

void HandedOffApps::Warn(absl::string_view what) {
  uint64_t held_back = 0;
  if (log_lines_.Take(clock_.Now(), &held_back)) {
    LOG(WARNING) << options_.flag() << " " << options_.dir() << ": " << what
                 << (held_back > 0 ? absl::StrCat(" (", held_back, " warnings not logged)") : "");
  }
}

void HandedOffApps::OpenSubLocked(Sub& sub) {
  struct stat st {};
  UniqueFd fd(::openat(dir_fd_.get(), sub.name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  std::string distrust;
  if (!fd.valid()) {
    if (errno != ENOENT) distrust = std::strerror(errno);
  } else if (::fstat(fd.get(), &st) != 0) {
    distrust = std::strerror(errno);
  } else {
    distrust = Distrust(st, /*want_dir=*/true);
  }
  if (!fd.valid() || !distrust.empty()) {
    if (!distrust.empty()) Warn(absl::StrCat(sub.name, "/ is refused: ", distrust));
    if (sub.watch >= 0) ::inotify_rm_watch(inotify_.get(), sub.watch);
    sub.fd.Reset();
    sub.watch = -1;
    return;
  }
  if (sub.fd.valid()) {
    struct stat had {};
    if (::fstat(sub.fd.get(), &had) == 0 && had.st_ino == st.st_ino && had.st_dev == st.st_dev) {
      return;  // the same dir as before
    }
  }
  // A new dir (made, or put in place of the old one): its own watch.
  if (sub.watch >= 0) ::inotify_rm_watch(inotify_.get(), sub.watch);
  sub.fd = std::move(fd);
  const std::string path = absl::StrCat(options_.dir(), "/", sub.name);
  sub.watch = ::inotify_add_watch(inotify_.get(), path.c_str(),
                                  IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM |
                                      IN_ATTRIB | IN_DONT_FOLLOW | IN_ONLYDIR);
  if (sub.watch < 0) {
    // Still read at every rescan.
    Warn(absl::StrCat("cannot watch ", path, ": ", std::strerror(errno)));
  }
}

void HandedOffApps::ReadAppLocked(const std::string& name) {
  const std::string path = absl::StrCat(options_.dir(), "/apps/", name);
  auto forget = [&] {
    absl::MutexLock lock(&mu_);
    auto it = apps_.find(name);
    if (it != apps_.end()) apps_.erase(it);
  };
  if (!apps_dir_.fd.valid()) return forget();
  UniqueFd fd(::openat(apps_dir_.fd.get(), name.c_str(),
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  App app;
  struct stat st {};
  if (!fd.valid()) {
    if (errno == ENOENT) return forget();
    app.data = absl::PermissionDeniedError(
        absl::StrCat(path, errno == ELOOP ? " is a symlink; refused"
                                          : absl::StrCat(": ", std::strerror(errno))));
  } else if (::fstat(fd.get(), &st) != 0) {
    app.data = absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  } else {
    app.key = {st.st_ino, st.st_size, Nanos(st.st_mtim), Nanos(st.st_ctim)};
    {
      absl::MutexLock lock(&mu_);
      auto it = apps_.find(name);
      if (it != apps_.end() && it->second.key == app.key) return;  // read already
      if (it == apps_.end() && apps_.size() >= kMaxApps) {
        Warn(absl::StrCat(kMaxApps, " applications are known; ", name, " is not read"));
        return;
      }
    }
    if (std::string distrust = Distrust(st, /*want_dir=*/false); !distrust.empty()) {
      app.data = absl::PermissionDeniedError(absl::StrCat(path, " is refused: ", distrust));
    } else {
      absl::StatusOr<std::string> bytes = ReadSmallFile(fd.get(), st, path, kMaxServiceDataBytes);
      if (!bytes.ok()) {
        app.data = bytes.status();
      } else {
        const Secret file(*std::move(bytes));
        app.data = ParseServiceData(file.view());
        if (!app.data.ok()) {
          app.data =
              absl::InvalidArgumentError(absl::StrCat(path, ": ", app.data.status().message()));
        }
      }
    }
  }
  if (!app.data.ok()) Warn(app.data.status().message());
  if (app.data.ok() && app.data->unparsed) {
    Warn(absl::StrCat(path, " starts as a JSON object but is none (or nests deeper than ",
                      kMaxJsonDepth,
                      "): its whole bytes are the secret, as Spark's service "
                      "takes them"));
  }
  forget();
  absl::MutexLock lock(&mu_);
  apps_.insert_or_assign(name, std::move(app));
}

void HandedOffApps::ReadMarkerLocked(const std::string& name) {
  struct stat st {};
  std::string distrust = "gone";
  if (stopped_dir_.fd.valid() &&
      ::fstatat(stopped_dir_.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    distrust = Distrust(st, /*want_dir=*/false);
    if (!distrust.empty()) Warn(absl::StrCat("stopped/", name, " is refused: ", distrust));
  }
  absl::MutexLock lock(&mu_);
  if (!distrust.empty()) {
    ended_.erase(name);
    handled_.erase(name);
  } else if (!ended_.contains(name)) {
    if (ended_.size() >= kMaxApps) {
      Warn(absl::StrCat(kMaxApps, " ended applications are known; ", name, " is not read"));
      return;
    }
    ended_.emplace(name, next_seen_++);
  }
}

void HandedOffApps::Rescan() {
  absl::MutexLock scan(&scan_mu_);
  RescanLocked();
}

void HandedOffApps::RescanLocked() {
  for (Sub* sub : {&apps_dir_, &stopped_dir_}) {
    OpenSubLocked(*sub);
    absl::flat_hash_set<std::string> names;
    if (sub->fd.valid()) {
      const absl::Status listed = ForEachEntry(sub->fd.get(), sub->name, [&](const char* name) {
        if (IsValidAppId(name)) names.insert(name);
        return names.size() < kMaxApps;
      });
      if (!listed.ok()) {
        Warn(absl::StrCat("cannot list ", sub->name, "/: ", listed.message()));
        continue;  // what is known stays known
      }
    }
    std::vector<std::string> gone;
    {
      absl::MutexLock lock(&mu_);
      if (sub == &apps_dir_) {
        for (const auto& [name, app] : apps_) {
          if (!names.contains(name)) gone.push_back(name);
        }
      } else {
        for (const auto& [name, seen] : ended_) {
          if (!names.contains(name)) gone.push_back(name);
        }
      }
    }
    for (const std::string& name : gone) names.insert(name);
    for (const std::string& name : names) {
      if (sub == &apps_dir_) {
        ReadAppLocked(name);
      } else {
        ReadMarkerLocked(name);
      }
    }
  }
}

void HandedOffApps::Watch() {
  const int rescan_ms =
      static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(options_.rescan), INT32_MAX));
  alignas(struct inotify_event) char events[16 * 1024];
  absl::Time next_rescan = clock_.Now() + options_.rescan;
  for (;;) {
    pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, rescan_ms);
    if (ready < 0 && errno != EINTR) {
      PLOG(ERROR) << "poll of the YARN dir's watch";
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) return;
    absl::MutexLock scan(&scan_mu_);
    bool rescan = false;
    for (;;) {
      const ssize_t n = ::read(inotify_.get(), events, sizeof(events));
      if (n <= 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* event = reinterpret_cast<const struct inotify_event*>(events + at);
        at += static_cast<ssize_t>(sizeof(struct inotify_event) + event->len);
        const std::string name = event->len > 0 ? std::string(event->name) : "";
        if ((event->mask & (IN_Q_OVERFLOW | IN_IGNORED)) != 0 ||
            (event->wd != apps_dir_.watch && event->wd != stopped_dir_.watch)) {
          rescan = true;  // a subdir came or went, or events were lost
        } else if (IsValidAppId(name)) {
          if (event->wd == apps_dir_.watch) {
            ReadAppLocked(name);
          } else {
            ReadMarkerLocked(name);
          }
        }
      }
    }
    if (rescan || clock_.Now() >= next_rescan) {
      RescanLocked();
      next_rescan = clock_.Now() + options_.rescan;
    }
  }
}

absl::StatusOr<HandedOffApps::ServiceData> HandedOffApps::Find(absl::string_view app_id) const {
  absl::MutexLock lock(&mu_);
  auto it = apps_.find(app_id);
  if (it == apps_.end()) {
    return absl::NotFoundError(absl::StrCat(options_.yarn()
                                                ? "the NodeManager has not started application "
                                                : "the node agent has not seen application ",
                                            app_id.substr(0, 130), " on this node"));
  }
  return it->second.data;
}

bool HandedOffApps::Ended(absl::string_view app_id) const {
  absl::MutexLock lock(&mu_);
  return ended_.contains(app_id);
}

std::vector<std::string> HandedOffApps::PendingEnded() const {
  std::vector<std::pair<uint64_t, std::string>> pending;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, seen] : ended_) {
      if (!handled_.contains(name)) pending.emplace_back(seen, name);
    }
  }
  std::sort(pending.begin(), pending.end());
  if (pending.size() > kMaxEndedPerCall) pending.resize(kMaxEndedPerCall);
  std::vector<std::string> names;
  names.reserve(pending.size());
  for (auto& [seen, name] : pending) names.push_back(std::move(name));
  return names;
}

void HandedOffApps::Handled(absl::string_view app_id) {
  absl::MutexLock lock(&mu_);
  if (ended_.contains(app_id)) handled_.emplace(app_id);
}

absl::StatusOr<std::vector<std::string>> HandedOffApps::NodeManagerLocalDirs() const {
  if (!options_.yarn()) {
    return absl::NotFoundError(absl::StrCat(options_.dir(), " is no NodeManager's"));
  }
  const std::string path = absl::StrCat(options_.dir(), "/", kLocalDirsFile);
  UniqueFd fd(::openat(dir_fd_.get(), kLocalDirsFile,
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (std::string distrust = Distrust(st, /*want_dir=*/false); !distrust.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(path, " is refused: ", distrust));
  }
  FERRY_ASSIGN_OR_RETURN(std::string bytes, ReadSmallFile(fd.get(), st, path, kMaxLocalDirsBytes));
  std::vector<std::string> dirs;
  for (absl::string_view line : absl::StrSplit(bytes, '\n', absl::SkipWhitespace())) {
    dirs.emplace_back(absl::StripAsciiWhitespace(line));
  }
  if (dirs.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " names no dir"));
  return dirs;
}

}  // namespace ferry
