// SparkApps: what the control plane asks of the Spark front door, whose types it does not
// know: a registered executor's dirs (a ferry client fetching a Spark executor's map
// outputs names it) and an application's removal (`ferry remove-app`). The front door
// implements it (server/spark), so the dependency points from spark to control.
#ifndef FERRY_SERVER_CONTROL_SPARK_APPS_H_
#define FERRY_SERVER_CONTROL_SPARK_APPS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/spark/layout.h"

namespace ferry {

class SparkApps {
 public:
  virtual ~SparkApps() = default;
  // The executor's local dirs. NOT_FOUND when it is not registered (Spark's wording).
  virtual absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> ExecutorDirs(
      absl::string_view app_id, absl::string_view exec_id) const = 0;

  struct Removal {
    size_t executors = 0;
    // Local dirs deleted (with delete_local_dirs), those that could not be, and those
    // kept because a registration that stays names them.
    size_t dirs_deleted = 0;
    std::vector<std::string> errors;
    std::vector<std::string> kept;
  };
  // Forgets one executor of the application, or all of them when `exec_id` is empty
  // (the application's end), with their cached files; with `delete_local_dirs`, deletes
  // their local dirs too, as Spark's worker does.
  virtual absl::StatusOr<Removal> RemoveApp(absl::string_view app_id, absl::string_view exec_id,
                                            bool delete_local_dirs) = 0;
};

}  // namespace ferry

#endif  // FERRY_SERVER_CONTROL_SPARK_APPS_H_
