#include "server/storage/layout.h"

#include "absl/strings/str_cat.h"

namespace ferry {

ShuffleFileLocation FerryAppLayout::Locate(const std::string& name) const {
  return ShuffleFileLocation{dir_.get(), name, absl::StrCat(owner().app_id, "/", name)};
}

std::string FerryAppLayout::Describe() const { return absl::StrCat("app ", owner().app_id); }

std::string SparkExecutorLayout::Describe() const {
  return absl::StrCat("executor ", owner().exec_id, " of app ", owner().app_id);
}

}  // namespace ferry
