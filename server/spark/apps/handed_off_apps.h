// HandedOffApps: the Spark applications this node runs, as the cluster manager's side
// hands them to ferry_server in a directory both share. Two write it:
//   * on YARN (--spark-yarn-dir), Ferry's `spark_shuffle` NodeManager aux service
//     (server/yarn: FerryShuffleService; docs/spark.md, "YARN");
//   * on Kubernetes (--spark-apps-dir), Ferry's node agent (server/kubernetes:
//     ferry-k8s-agent, which watches the API for Spark's pods; docs/spark.md,
//     "Kubernetes").
// Its layout:
//   * apps/<application id>: the application's service data: Spark's secret of the
//     application (spark.authenticate), or its JSON payload ({"secret": ...,
//     "spark.yarn.shuffle.server.recovery.disabled": true}), or nothing;
//   * stopped/<application id>: an empty marker, written when the application ended;
//   * nodemanager-local-dirs (YARN only): the NodeManager's local dirs, one per line.
// The writer writes each file to a temporary name ('.' first) and renames it, so a file
// here is whole, and it alone deletes them (docs/spark.md says when): ferry_server only
// reads, so it needs no write access to the dir and its user may differ from the
// writer's.
//
// Trust: the dir's owner is taken as the writer's user. The dir, apps/ and stopped/ must
// be directories of that owner that no one else can write (no group or other write
// bit), and a file is read only if it is a regular file of that owner, not writable by
// anyone else, opened without following a symlink. Anything else is refused: the dir at
// Open, a file or subdir with a warning (within a log budget), as if it were not there.
//
// An application's service data is read and parsed once, when its file appears or
// changes (an inotify watch, and a full look every Options::rescan for anything a watch
// missed), on a thread of its own, by a JSON parser whose nesting and size are bounded:
// lookups (a handshake, a registration) read memory only and never wait on the disk or on
// a parse.
//
// Thread-safe.
#ifndef FERRY_SERVER_SPARK_APPS_HANDED_OFF_APPS_H_
#define FERRY_SERVER_SPARK_APPS_HANDED_OFF_APPS_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/secret.h"
#include "common/unique_fd.h"
#include "server/base/clock.h"
#include "server/base/log_lines.h"

namespace ferry {

class HandedOffApps {
 public:
  struct Options {
    // At most one of the two; neither: no hand-off.
    std::string yarn_dir;  // --spark-yarn-dir: written by YARN's NodeManager
    std::string apps_dir;  // --spark-apps-dir: written by a node agent
    // How often the whole dir is looked at again (the watch sees changes at once).
    absl::Duration rescan = absl::Seconds(5);

    bool enabled() const { return !yarn_dir.empty() || !apps_dir.empty(); }
    bool yarn() const { return !yarn_dir.empty(); }
    const std::string& dir() const { return yarn() ? yarn_dir : apps_dir; }
    // "--spark-yarn-dir" or "--spark-apps-dir", for messages.
    const char* flag() const { return yarn() ? "--spark-yarn-dir" : "--spark-apps-dir"; }
    // Both dirs given.
    absl::Status Validate() const;
  };

  // What an application's service data says.
  struct ServiceData {
    // Its spark.authenticate secret; none when the application runs without it.
    std::optional<Secret> secret;
    // spark.yarn.shuffle.server.recovery.disabled: the application asked that the
    // service keep nothing of it across a restart.
    bool recovery_disabled = false;
    // It looked like a JSON object and did not parse as one (Spark's service logs
    // "Unable to parse application data" then): its bytes are the secret.
    bool unparsed = false;
  };
  // Spark's two formats, told apart as Spark's own service tells them (Jackson's
  // readValue into a map): a JSON object (what follows it ignored) is the payload,
  // anything else is the secret's bytes. An object nested deeper than kMaxJsonDepth
  // (Jackson's own bound, StreamReadConstraints' default since 2.15, which Spark 3.5 and
  // 4 ship) is no payload, as Spark's service then takes the whole bytes as the secret
  // (ServiceData::unparsed says so, for a log line); the parse costs time linear in
  // the bytes and nothing more. INVALID_ARGUMENT for a payload whose fields are of the
  // wrong types.
  static absl::StatusOr<ServiceData> ParseServiceData(absl::string_view bytes);

  // The largest service data read (Spark's is a 256-bit secret in base64, or that in
  // a JSON object of two fields); the aux service writes no more.
  static constexpr size_t kMaxServiceDataBytes = 64 * 1024;
  static constexpr int kMaxJsonDepth = 1000;
  // Applications tracked (apps/ and stopped/ each); past it, new ones are refused with a
  // warning.
  static constexpr size_t kMaxApps = 100000;
  // At most this many ended applications are handed out per PendingEnded() call.
  static constexpr size_t kMaxEndedPerCall = 10000;

  // Checks the dir (see Trust above; an error naming it and what to fix), reads what is
  // there and starts watching it. apps/ and stopped/ are the writer's to make:
  // until they exist there are no applications. `clock` (which must outlive this)
  // stamps the log budget.
  static absl::StatusOr<std::unique_ptr<HandedOffApps>> Open(const Options& options,
                                                             const Clock& clock = Clock::Real());
  ~HandedOffApps();
  HandedOffApps(const HandedOffApps&) = delete;
  HandedOffApps& operator=(const HandedOffApps&) = delete;

  const Options& options() const { return options_; }
  // The writer's user: the dir's owner.
  uid_t owner() const { return owner_; }

  // The application's service data, from memory. NOT_FOUND when the writer has not
  // started it on this node (or it has ended); an error naming the file when it could
  // not be read, was refused (see Trust) or did not parse.
  absl::StatusOr<ServiceData> Find(absl::string_view app_id) const;
  // Whether the application's end marker is there.
  bool Ended(absl::string_view app_id) const;
  // The applications that ended and are not yet marked Handled, at most
  // kMaxEndedPerCall, oldest first.
  std::vector<std::string> PendingEnded() const;
  // ferry_server has forgotten the application: PendingEnded() no longer names it (for
  // as long as its marker stays).
  void Handled(absl::string_view app_id);

  // The NodeManager's local dirs as its aux service wrote them. NOT_FOUND before a
  // NodeManager with the aux service has started, and off YARN.
  absl::StatusOr<std::vector<std::string>> NodeManagerLocalDirs() const;

  // Reads the whole dir again now (the watcher does every Options::rescan).
  void Rescan();

 private:
  // A file as last read: a change of any of these reads it again.
  struct FileKey {
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const FileKey&) const = default;
  };
  struct App {
    FileKey key;
    absl::StatusOr<ServiceData> data;
  };
  struct Sub {
    const char* name;  // "apps", "stopped"
    UniqueFd fd;       // O_PATH of the subdir once it exists and is trusted
    int watch = -1;
  };

  HandedOffApps(Options options, const Clock& clock, uid_t owner, UniqueFd dir_fd,
                UniqueFd inotify);
  // Opens and watches a subdir that has appeared (and is trusted).
  void OpenSubLocked(Sub& sub) ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  // Reads apps/<name> (or forgets it when it is gone).
  void ReadAppLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  // Notes stopped/<name> (or forgets it when it is gone).
  void ReadMarkerLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  void RescanLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  // Why the file or dir described by `st` is not trusted; empty if it is.
  std::string Distrust(const struct stat& st, bool want_dir) const;
  // A warning within the log budget.
  void Warn(absl::string_view what);
  void Watch();

  const Options options_;
  const Clock& clock_;
  const uid_t owner_;
  const UniqueFd dir_fd_;
  const UniqueFd inotify_;
  UniqueFd stop_;  // an eventfd: the watcher's cue to end
  LineBudget log_lines_{10};

  // Serializes the reads of the dir (the watcher's, Rescan()'s); lookups never take it.
  absl::Mutex scan_mu_;
  Sub apps_dir_ ABSL_GUARDED_BY(scan_mu_){"apps", UniqueFd(), -1};
  Sub stopped_dir_ ABSL_GUARDED_BY(scan_mu_){"stopped", UniqueFd(), -1};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, App> apps_ ABSL_GUARDED_BY(mu_);
  // Ended applications by when their marker was seen, and those handled.
  absl::flat_hash_map<std::string, uint64_t> ended_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> handled_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seen_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread watcher_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_APPS_HANDED_OFF_APPS_H_
