// SmallTmpfs: a tmpfs of a few pages mounted at a directory the test names, for tests of
// a full disk. Fill() writes a file until the filesystem has no byte left; Unfill()
// removes it. Needs root: Mount() is UNIMPLEMENTED, saying why, where the test cannot
// mount one (the caller skips).
#ifndef FERRY_TESTS_TESTING_SMALL_TMPFS_H_
#define FERRY_TESTS_TESTING_SMALL_TMPFS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ferry::testing {

class SmallTmpfs {
 public:
  // Mounts `bytes` of tmpfs (mode 0700) at `path`, an empty directory or none.
  static absl::StatusOr<std::unique_ptr<SmallTmpfs>> Mount(const std::string& path, uint64_t bytes);
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  // Unmounts it (lazily: a file still open does not keep it).
  ~SmallTmpfs();

  const std::string& path() const { return path_; }
  absl::Status Fill();
  absl::Status Unfill();

 private:
  explicit SmallTmpfs(std::string path) : path_(std::move(path)) {}
  std::string filler() const { return path_ + "/filler"; }
  const std::string path_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_SMALL_TMPFS_H_
