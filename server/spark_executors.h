// ExecutorRegistry: the Spark executors registered with this node (RegisterExecutor):
// for each (app, executor), its local dirs, subdirectories per dir and shuffle manager,
// which say where its shuffle files are (common/spark_layout.h).
//
// Without spark.authenticate any peer can register, so a registration may only name
// local dirs beneath the configured roots (--spark-dir-roots): absolute, normalized
// paths whose every component below the root is a real directory, not a symlink. No
// peer can point the server at another directory.
//
// With a state dir, registrations survive a restart, as Spark's recovery DB makes them
// do: the whole set is written to `<state-dir>/spark-executors` atomically (a temp file,
// fsync, rename, fsync of the dir) before Register() returns. Each record is the
// RegisterExecutor payload of Spark's own wire format (common/spark_wire.h), preceded by
// its length, and is validated again when loaded.
//
// Thread-safe.
#ifndef FERRY_SERVER_SPARK_EXECUTORS_H_
#define FERRY_SERVER_SPARK_EXECUTORS_H_

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
  };

  // Checks the roots and loads the state file, if any. INVALID_ARGUMENT for a root that
  // is not an absolute directory; DATA_LOSS naming the file and record for a state file
  // that does not parse.
  static absl::StatusOr<std::unique_ptr<ExecutorRegistry>> Open(Options options);

  // Records (or replaces) the executor. INVALID_ARGUMENT naming what is wrong with it;
  // RESOURCE_EXHAUSTED past max_executors; an error from writing the state file (the
  // registration is then not kept).
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
  };
  // Forgets one executor of the app, or every executor of it when `exec_id` is empty,
  // after the state file says so; with `delete_local_dirs`, then deletes their local
  // dirs and everything in them, as Spark's worker does when an application ends.
  // Deleting never follows a symlink or leaves the dir's root.
  absl::StatusOr<Removal> Remove(absl::string_view app_id, absl::string_view exec_id,
                                 bool delete_local_dirs);

  size_t size() const;

 private:
  using Key = std::pair<std::string, std::string>;
  struct Registered {
    spark::ExecutorShuffleInfo info;
    std::shared_ptr<const spark::ExecutorDirs> dirs;
  };
  explicit ExecutorRegistry(Options options) : options_(std::move(options)) {}
  // The registration checked, and its dirs beneath the roots.
  absl::StatusOr<Registered> Validate(const spark::RegisterExecutor& registration) const;
  absl::Status NotRegistered(absl::string_view app_id, absl::string_view exec_id) const;
  // Writes the whole set to the state file atomically (no-op without a state dir).
  absl::Status PersistLocked() const;

  const Options options_;
  // One per root, opened once: executors' files are opened beneath them.
  std::vector<UniqueFd> root_fds_;
  mutable std::mutex mu_;
  std::map<Key, Registered> executors_;  // guarded by mu_
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_EXECUTORS_H_
