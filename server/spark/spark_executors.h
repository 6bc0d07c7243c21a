// ExecutorRegistry: the Spark executors registered with this node (RegisterExecutor):
// for each (app, executor), its local dirs, subdirectories per dir and shuffle manager,
// which say where its shuffle files are (common/spark_layout.h).
//
// Without spark.authenticate any peer can register, so a registration may only name
// local dirs beneath the configured roots (--spark-dir-roots): absolute, normalized
// paths whose every component below the root is a real directory, not a symlink. No
// peer can point the server at another directory. A registered executor keeps its local
// dirs: registering it again with other dirs is refused (an executor's dirs never
// change while it lives), so no peer can redirect another's reducers to other bytes.
// Deleting an app's local dirs spares every dir another registration still names (or
// one inside or around it).
//
// Registrations are bounded in number and in bytes (their records in the state file),
// and live until their app is removed (RemoveSparkApp, at application end) or until none
// of their local dirs exists any more (ForgetVanished: the worker or YARN deleted them
// when the application ended).
//
// With a state dir, registrations survive a restart, as Spark's recovery DB makes them
// do: `<state-dir>/spark-executors` is a journal, appended to and fdatasynced before
// Register() or Remove() returns, and rewritten whole (a temp file, fsync, rename, fsync
// of the dir) when it has grown to twice what is live, and at start. A record is its
// length (i32) and either the RegisterExecutor payload of Spark's own wire format
// (common/spark_wire.h), or 0xF0 and the (app, exec) forgotten. At start, a registration
// that no longer validates (its dirs were deleted while the server was down) is dropped
// with a warning, and a torn last record (a crash during an append) is ignored; only a
// record that does not parse makes the file unusable.
//
// Lookups take one short lock and never wait on the state file: writes are serialized
// by a second lock that lookups do not take.
//
// Thread-safe.
#ifndef FERRY_SERVER_SPARK_SPARK_EXECUTORS_H_
#define FERRY_SERVER_SPARK_SPARK_EXECUTORS_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/spark_layout.h"
#include "common/spark_wire.h"
#include "common/unique_fd.h"

namespace ferry {

class ExecutorRegistry {
 public:
  struct Options {
    // Local dirs must lie beneath one of these (absolute, existing directories).
    std::vector<std::string> dir_roots;
    // Where registrations are kept across restarts; empty: in memory only.
    std::string state_dir;
    size_t max_executors = 100000;
    // Bytes of all registrations' records together. The registry holds about three
    // times this in memory.
    uint64_t max_bytes = uint64_t{64} << 20;

    // INVALID_ARGUMENT naming the flag of a field out of range.
    absl::Status Validate() const;
  };

  // Checks the roots and loads the state file, if any. INVALID_ARGUMENT for a root that
  // is not an absolute directory; DATA_LOSS naming the file and record for a state file
  // with a record that does not parse; an error from rewriting it.
  static absl::StatusOr<std::unique_ptr<ExecutorRegistry>> Open(Options options);

  // Records the executor (again: a no-op, or a new shuffle manager). INVALID_ARGUMENT
  // naming what is wrong with it; FAILED_PRECONDITION if the executor is registered
  // with other local dirs; RESOURCE_EXHAUSTED past max_executors or max_bytes; an error
  // from writing the state file (the registration is then not kept).
  absl::Status Register(const spark::RegisterExecutor& registration);

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
  // Bytes of the registrations' records (bounded by max_bytes).
  uint64_t bytes() const;

 private:
  using Key = std::pair<std::string, std::string>;
  struct Registered {
    spark::ExecutorShuffleInfo info;
    std::shared_ptr<const spark::ExecutorDirs> dirs;
    uint64_t record_bytes = 0;
  };
  explicit ExecutorRegistry(Options options) : options_(std::move(options)) {}
  // The registration checked, and its dirs beneath the roots.
  absl::StatusOr<Registered> Validate(const spark::RegisterExecutor& registration) const;
  absl::Status NotRegistered(absl::string_view app_id, absl::string_view exec_id) const;
  // Loads the state file into executors_ (before any other thread can see the registry).
  absl::Status Load(const std::string& path);
  // Appends `records` to the journal and syncs it, compacting it first if an earlier
  // append failed and afterwards if it has grown past twice what is live. No-op without
  // a state dir. Requires write_mu_.
  absl::Status AppendLocked(absl::string_view records);
  // Rewrites the state file from executors_ and reopens the journal. Requires write_mu_.
  absl::Status CompactLocked();
  // Forgets `keys` in the state file, then in memory. Requires write_mu_.
  absl::Status ForgetLocked(const std::vector<Key>& keys, std::vector<Registered>* removed);

  const Options options_;
  // One per root, opened once: executors' files are opened beneath them.
  std::vector<UniqueFd> root_fds_;
  // Serializes every change and the state file's writes. Taken before mu_; executors_
  // may be read under either lock, and changes only under both.
  std::mutex write_mu_;
  UniqueFd journal_;            // guarded by write_mu_
  uint64_t journal_bytes_ = 0;  // guarded by write_mu_
  bool journal_broken_ = false;  // an append left it unknown; guarded by write_mu_
  mutable std::mutex mu_;
  std::map<Key, Registered> executors_;  // guarded by mu_ and write_mu_
  uint64_t bytes_ = 0;                   // guarded by mu_ and write_mu_
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_SPARK_EXECUTORS_H_
