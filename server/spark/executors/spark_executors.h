// ExecutorRegistry: the Spark executors registered with this node (RegisterExecutor):
// for each (app, executor), its local dirs, subdirectories per dir and shuffle manager,
// which say where its shuffle files are (common/spark/layout.h).
//
// Without spark.authenticate any peer can register, so a registration may only name
// local dirs beneath the configured roots (--spark-dir-roots): absolute, normalized
// paths at most kMaxDirDepth components below the root, each a real directory, not a
// symlink below the root (one openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS per dir, so
// checking one costs its depth, not its depth squared). No peer can point the server at another
// directory. A registered executor keeps its local dirs: registering it again with
// other dirs is refused (an executor's dirs never change while it lives), so no peer can
// redirect another's reducers to other bytes. On YARN (Options::yarn_layout) a dir
// belongs to the application it lies under, <root>/usercache/<user>/appcache/<app>/...,
// whatever is registered; a dir named ferry-<app>-<executor> (Ferry's Spark plugin's)
// belongs to that executor alone; everywhere, a dir belongs to the application whose live
// registration names it: another application's registration naming it, or a dir
// inside or around it, is refused, so an application can neither read nor delete
// another's files through a registration of its own. Deleting an app's local dirs
// spares every dir another registration still names (or one inside or around it).
//
// Registrations are bounded in number and in bytes (their records in the state file),
// and live until their app is removed (RemoveSparkApp, at application end) or until none
// of their local dirs exists any more (ForgetVanished: the worker or YARN deleted them
// when the application ended).
//
// With a state dir, registrations survive a restart (those of applications
// Options::kept_across_restarts does not keep excepted), as Spark's recovery DB makes
// them do: `<state-dir>/spark-executors` is a journal, appended to and fdatasynced before
// Register() or Remove() returns, and rewritten whole (a temp file, fsync, rename, fsync
// of the dir) once the change is in memory, when it has grown to twice what is live. A
// record is its length (i32, 1 to kMaxRecordBytes) and either the RegisterExecutor
// payload of Spark's own wire format (common/spark/wire.h), or 0xF0 and the (app, exec)
// forgotten. Starting never needs room on the state disk: the journal is appended to as
// it is; a torn last record (a crash during an append: it runs past the end of the file,
// or the file ends in zeros) is cut off; a compaction that fails (a full disk) leaves the
// journal as it was and is tried again later. At start, a registration that no longer
// validates (its dirs were deleted while the server was down, or another application
// holds them) is dropped with a warning. Damage before the last record (a length out of
// range, a record that does not parse) is not a torn tail: the records before it load,
// the file is set aside as `spark-executors.damaged-<unix seconds>` with an ERROR naming
// it and what was lost, and a new journal is written.
//
// Lookups take one short lock and never wait on the state file: writes are serialized
// by a second lock that lookups do not take.
//
// Thread-safe.
#ifndef FERRY_SERVER_SPARK_EXECUTORS_SPARK_EXECUTORS_H_
#define FERRY_SERVER_SPARK_EXECUTORS_SPARK_EXECUTORS_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/spark/layout.h"
#include "common/spark/wire.h"
#include "common/unique_fd.h"
#include "server/base/clock.h"
#include "server/base/log_lines.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"

namespace ferry {

// The registry's metric families (docs/operations.md).
#define FERRY_EXECUTOR_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY) \
  READ("ferry_spark_executors_registered", "Spark executors registered.", kGauge, size())

class ExecutorRegistry {
 public:
  struct Options {
    // Local dirs must lie beneath one of these (absolute, normalized paths; a root may be
    // a symlink, followed at start, and one that is missing then is skipped with a
    // warning as long as another is there).
    std::vector<std::string> dir_roots;
    // Where registrations are kept across restarts; empty: in memory only.
    std::string state_dir;
    size_t max_executors = 100000;
    // Bytes of all registrations' records together. The registry holds about three
    // times this in memory.
    uint64_t max_bytes = uint64_t{64} << 20;
    // Whether an application's registrations go in the state file (null: every
    // application's). On YARN an application may ask that the service keep nothing of it
    // across a restart (spark.yarn.shuffle.server.recovery.disabled), as Spark's own
    // service then keeps it out of its recovery DB. Called outside the registry's locks.
    std::function<bool(absl::string_view app_id)> kept_across_restarts = nullptr;
    // Whether an application has ended (on YARN, its end marker): its executors are
    // refused. Called under the registry's write lock; null: none ends.
    std::function<bool(absl::string_view app_id)> ended = nullptr;
    // Called once the last registration of an application is forgotten, whatever said
    // so (RemoveSparkApp, YARN's end marker, its dirs deleted and swept): the
    // application's end, for the parts that keep something of it. Called outside the
    // registry's locks, on the thread that forgot it; null: no one listens.
    std::function<void(const std::string& app_id)> app_gone = nullptr;
    // The state file is read and never written (ferry_server --check-config, while the
    // server that writes it may run).
    bool read_only = false;
    // On YARN: a local dir must lie inside its application's own dir,
    // <root>/usercache/<user>/appcache/<application id>/..., as YARN lays them out and
    // deletes them; any other dir is another application's, or none's.
    bool yarn_layout = false;

    // INVALID_ARGUMENT naming the flag of a field out of range.
    absl::Status Validate() const;
  };

  // How deep below its root a local dir may be: Spark's are 1 (a root as
  // spark.local.dir) to 5 (YARN's usercache/<user>/appcache/<app>/blockmgr-*).
  static constexpr int kMaxDirDepth = 16;
  // The largest record of the state file (the largest registration that validates
  // needs 270 KB).
  static constexpr uint32_t kMaxRecordBytes = uint32_t{1} << 20;

  // Checks the roots and loads the state file, if any. INVALID_ARGUMENT for a root that
  // is not an absolute directory; an error opening or reading the state file (one it
  // cannot rewrite is not an error: see above).
  // `clock` (which must outlive the registry) stamps what the log budget and a damaged
  // state file's name read.
  static absl::StatusOr<std::unique_ptr<ExecutorRegistry>> Open(Options options,
                                                                const Clock& clock = Clock::Real());

  // Records the executor (again: a no-op, or a new shuffle manager). INVALID_ARGUMENT
  // naming what is wrong with it; FAILED_PRECONDITION if the executor is registered
  // with other local dirs; PERMISSION_DENIED for a dir of another application's;
  // RESOURCE_EXHAUSTED past max_executors or max_bytes; an error from writing the state
  // file (the registration is then not kept). Registering an executor again as it is
  // costs one lookup.
  absl::Status Register(const spark::RegisterExecutor& registration);
  // Another server may have rewritten the journal since this one last wrote it (a
  // hand-over that failed after the new server read it): rewritten whole from memory
  // before the next change.
  void RewriteBeforeNextChange();
  // What Register() would say of the registration's shape and dirs, registering nothing:
  // so that an invalid registration is refused before it costs anything else.
  absl::Status Check(const spark::RegisterExecutor& registration) const;
  // Whether registering `registration` would change nothing (it is registered as it is,
  // so it would write nothing).
  bool Unchanged(const spark::RegisterExecutor& registration) const;

  // NOT_FOUND "Executor is not registered (appId=..., execId=...)", Spark's wording.
  absl::StatusOr<spark::ExecutorShuffleInfo> Find(absl::string_view app_id,
                                                  absl::string_view exec_id) const;
  // The executor's local dirs, to open its files beneath the roots. NOT_FOUND as Find().
  absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> FindDirs(
      absl::string_view app_id, absl::string_view exec_id) const;

  struct Removal {
    size_t executors = 0;
    // Local dirs deleted (with delete_local_dirs), and those that could not be.
    size_t dirs_deleted = 0;
    std::vector<std::string> errors;
    // Local dirs left in place because a registration that stays names them, or a dir
    // inside or around them.
    std::vector<std::string> kept;
  };
  // Forgets one executor of the app, or every executor of it when `exec_id` is empty,
  // after the state file says so; with `delete_local_dirs`, then deletes their local
  // dirs and everything in them, as Spark's worker does when an application ends.
  // Deleting never follows a symlink or leaves the dir's root, and never touches a dir
  // that a remaining registration names.
  absl::StatusOr<Removal> Remove(absl::string_view app_id, absl::string_view exec_id,
                                 bool delete_local_dirs);

  // Forgets the registrations none of whose local dirs exists any more (looked up
  // beneath the roots opened at start, so an unmounted disk does not count as gone).
  // Returns how many; an error from writing the state file (nothing is then forgotten).
  absl::StatusOr<size_t> ForgetVanished();

  size_t size() const;
  // PERMISSION_DENIED if one of `dirs` (absolute) is, or is inside or around, a dir a
  // registration of another application names: push-based shuffle's merge dirs, which
  // an executor names beside its local dirs, are its application's alone too. Takes the
  // registry's write lock: call on a blocking worker.
  absl::Status CheckOwnDirs(absl::string_view app_id, const std::vector<std::string>& dirs);
  // Every registration (as a RegisterExecutor), in key order: a restarted server's
  // parts that keep something per registration learn it so.
  std::vector<spark::RegisterExecutor> Registrations() const;
  // Its metric families (docs/operations.md): the executors registered.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;
  // Bytes of the registrations' records (bounded by max_bytes).
  uint64_t bytes() const;

 private:
  using Key = std::pair<std::string, std::string>;
  struct Registered {
    spark::ExecutorShuffleInfo info;
    std::shared_ptr<const spark::ExecutorDirs> dirs;
    uint64_t record_bytes = 0;
    bool in_state_file = true;  // Options::kept_across_restarts
  };
  // Applications' claims on dirs: for each dir some registration names, the app of
  // those registrations and how many they are.
  struct DirClaim {
    std::string app_id;
    size_t registrations = 0;
  };
  // What Load() found in the state file.
  struct Loaded {
    bool exists = false;
    uint64_t good_bytes = 0;  // the whole records, from the start
    uint64_t file_bytes = 0;
    std::string damage;  // what is wrong before the last record, if anything
  };
  ExecutorRegistry(Options options, const Clock& clock)
      : options_(std::move(options)), clock_(clock) {}
  // The registration checked, and its dirs beneath the roots.
  absl::StatusOr<Registered> Validate(const spark::RegisterExecutor& registration) const;
  absl::Status NotRegistered(absl::string_view app_id, absl::string_view exec_id) const;
  // Reads the state file and puts what validates in executors_ (before any other thread
  // can see the registry).
  absl::StatusOr<Loaded> Load(const std::string& path);
  // Puts the registrations a replay kept in the registry, in the order of their records
  // (where claims on dirs are settled), each validated again.
  void InsertReplayed(const std::string& path,
                      std::map<Key, std::pair<size_t, spark::RegisterExecutor>>& replayed);
  // Readies the journal after Load(): cuts a torn tail, sets a damaged file aside, and
  // compacts when that is worth it; none of it needs to succeed for the registry to
  // serve.
  void OpenJournalLocked(const std::string& path, const Loaded& loaded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // PERMISSION_DENIED if one of the dirs is, or is inside or around, a dir another app's
  // registration names.
  absl::Status CheckClaimsLocked(absl::string_view app_id,
                                 const std::vector<std::string>& dirs) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Whether some registration names `dir` or a dir inside or around it.
  bool ClaimedLocked(absl::string_view dir) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Records in executors_ and claims_.
  void InsertLocked(const Key& key, Registered registered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, write_mu_);
  void EraseLocked(std::map<Key, Registered>::iterator it, std::vector<Registered>* removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, write_mu_);
  // Appends `records` to the journal and syncs it, rewriting it whole first if an
  // earlier write left it unknown. No-op without a state dir.
  absl::Status AppendLocked(absl::string_view records) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // After a change is in memory: compacts the journal if it has grown past twice what
  // is live. A failed compaction leaves the journal as it was (logged, and tried again
  // once the journal has grown by kMinCompactBytes more).
  void MaybeCompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Rewrites the state file from executors_ and reopens the journal; on failure the
  // journal appended to before (if any) stays as it was.
  absl::Status CompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Forgets `keys` in the state file, then in memory; the applications left with no
  // registration go in *gone.
  absl::Status ForgetLocked(const std::vector<Key>& keys, std::vector<Registered>* removed,
                            std::vector<std::string>* gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Options::app_gone for each of `apps`.
  void TellGone(const std::vector<std::string>& apps) const ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  const Options options_;
  const Clock& clock_;
  // The roots there were at start, each opened once: executors' files are opened
  // beneath them.
  struct Root {
    std::string path;  // as configured: executors' dirs are named beneath it
    UniqueFd fd;
  };
  std::vector<Root> roots_;
  // Serializes every change and the state file's writes. Taken before mu_; executors_
  // may be read under either lock, and changes only under both.
  absl::Mutex write_mu_;
  UniqueFd journal_ ABSL_GUARDED_BY(write_mu_);
  uint64_t journal_bytes_ ABSL_GUARDED_BY(write_mu_) = 0;
  // A write left the file unknown (or there is none): rewrite it before appending.
  bool journal_broken_ ABSL_GUARDED_BY(write_mu_) = false;
  // A compaction failed at this journal size: the next is tried past it.
  uint64_t compaction_failed_at_ ABSL_GUARDED_BY(write_mu_) = 0;
  std::map<std::string, DirClaim> claims_ ABSL_GUARDED_BY(write_mu_);
  // Registrations' log lines: a client re-registering in a loop does not fill the disk.
  LineBudget log_lines_{20};
  mutable absl::Mutex mu_;
  std::map<Key, Registered> executors_;  // guarded by mu_ and write_mu_
  uint64_t bytes_ = 0;                   // guarded by mu_ and write_mu_
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_EXECUTORS_SPARK_EXECUTORS_H_
