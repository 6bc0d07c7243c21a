// YarnApps: the applications YARN's NodeManager runs on this node, as the NodeManager's
// `spark_shuffle` aux service (server/yarn: FerryShuffleService) hands them to
// ferry_server in the directory both share (--spark-yarn-dir; docs/spark.md, "YARN"):
//   * apps/<application id>: the application's service data, exactly as the
//     NodeManager got it from the application's containers: Spark's secret of the
//     application (spark.authenticate), or its JSON payload ({"secret": ...,
//     "spark.yarn.shuffle.server.recovery.disabled": true}), or nothing;
//   * stopped/<application id>: an empty marker, written when the application ended;
//   * nodemanager-local-dirs: the NodeManager's local dirs, one per line.
// The shim writes each file to a temporary name ('.' first) and renames it, so a file
// here is whole. The files outlive both processes: an application started or ended
// while ferry_server was down is found when it starts again, and a NodeManager restart
// loses nothing. ferry_server removes both files of an ended application once it has
// forgotten the application (Forget).
//
// Reads only; a lookup never holds a lock. Thread-safe.
#ifndef FERRY_SERVER_SPARK_YARN_APPS_H_
#define FERRY_SERVER_SPARK_YARN_APPS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry {

class YarnApps {
 public:
  struct Options {
    std::string dir;  // --spark-yarn-dir; empty: not on YARN
  };

  // What an application's service data says.
  struct ServiceData {
    // Its spark.authenticate secret; none when the application runs without it.
    std::optional<std::string> secret;
    // spark.yarn.shuffle.server.recovery.disabled: the application asked that the
    // service keep nothing of it across a restart.
    bool recovery_disabled = false;
  };
  // Spark's two formats, told apart as Spark's own service tells them: a JSON object
  // is the payload, anything else is the secret's bytes. INVALID_ARGUMENT for a payload
  // whose fields are of the wrong types.
  static absl::StatusOr<ServiceData> ParseServiceData(absl::string_view bytes);

  // The largest service data read (Spark's is a 256-bit secret in base64, or that in
  // a JSON object of two fields).
  static constexpr size_t kMaxServiceDataBytes = 64 * 1024;
  // At most this many ended applications are taken per Stopped() call.
  static constexpr size_t kMaxStoppedPerCall = 10000;

  // Checks the dir and makes its apps/ and stopped/ if the NodeManager has not yet.
  // An error naming the dir.
  static absl::StatusOr<std::unique_ptr<YarnApps>> Open(const Options& options);

  const std::string& dir() const { return dir_; }

  // The application's service data. NOT_FOUND when the NodeManager has not started it
  // on this node (or it has ended); an error naming the file when it cannot be read or
  // parsed.
  absl::StatusOr<ServiceData> Find(absl::string_view app_id) const;

  // The applications that ended (their markers), at most kMaxStoppedPerCall. A name
  // that cannot be an application id is skipped.
  absl::StatusOr<std::vector<std::string>> Stopped() const;
  // Removes the application's service data and its end marker, once ferry_server has
  // forgotten it.
  absl::Status Forget(absl::string_view app_id) const;

  // The NodeManager's local dirs as its aux service wrote them. NOT_FOUND before a
  // NodeManager with the aux service has started.
  absl::StatusOr<std::vector<std::string>> NodeManagerLocalDirs() const;

 private:
  explicit YarnApps(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Whether `app_id` can name a file of these dirs (and of --spark-auth-secrets-dir):
// the ids of every cluster manager (application_<ts>_<n>, app-<ts>-<n>, spark-<uuid>,
// local-<ts>) are of letters, digits, '-', '_' and '.', and never start with '.'.
bool IsAppFileName(absl::string_view app_id);

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_YARN_APPS_H_
