// Where one producer's shuffle files lie, behind one interface: Ferry's layout (an app's
// directory beneath the data dir) and a registered Spark executor's (each file hashed
// into a subdirectory of its local dirs, beneath the root that holds them). The store
// loads and caches map outputs through a layout, by its owner; callers choose the
// layout a request names and ask the store for segments, never switching on it again.
// Per-disk work (queues, read-ahead) goes with the files a layout locates.
#ifndef FERRY_SERVER_STORAGE_LAYOUT_H_
#define FERRY_SERVER_STORAGE_LAYOUT_H_

#include <memory>
#include <string>
#include <utility>

#include "common/shuffle_files.h"
#include "common/spark/layout.h"
#include "common/unique_fd.h"

namespace ferry {

// Whose map outputs these are: the key of their cache entries.
struct ShuffleOwner {
  enum class Kind { kFerryApp, kSparkExecutor };
  Kind kind = Kind::kFerryApp;
  std::string app_id;
  std::string exec_id;  // a Spark executor's; empty for a Ferry app

  bool operator==(const ShuffleOwner& o) const {
    return kind == o.kind && app_id == o.app_id && exec_id == o.exec_id;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ShuffleOwner& o) {
    return H::combine(std::move(h), o.kind, o.app_id, o.exec_id);
  }
};

class ShuffleLayout {
 public:
  virtual ~ShuffleLayout() = default;
  const ShuffleOwner& owner() const { return owner_; }
  // Where the file `name` ("shuffle_3_7_0.index") is.
  virtual ShuffleFileLocation Locate(const std::string& name) const = 0;
  // "app app-1", "executor 3 of app app-1": how errors name the owner.
  virtual std::string Describe() const = 0;
  // Whether a map output whose index and data file disagree may be mid-commit (Spark
  // renames the index into place before the data file), so worth loading once more.
  virtual bool CommitsInTwoSteps() const = 0;

 protected:
  explicit ShuffleLayout(ShuffleOwner owner) : owner_(std::move(owner)) {}

 private:
  ShuffleOwner owner_;
};

// Ferry's: every file of the app in one directory, opened beneath the data dir.
class FerryAppLayout final : public ShuffleLayout {
 public:
  FerryAppLayout(std::string app_id, UniqueFd dir)
      : ShuffleLayout({ShuffleOwner::Kind::kFerryApp, std::move(app_id), ""}),
        dir_(std::move(dir)) {}
  ShuffleFileLocation Locate(const std::string& name) const override;
  std::string Describe() const override;
  bool CommitsInTwoSteps() const override { return false; }
  int dir_fd() const { return dir_.get(); }

 private:
  UniqueFd dir_;
};

// A registered Spark executor's, as the executor registry keeps its dirs.
class SparkExecutorLayout final : public ShuffleLayout {
 public:
  SparkExecutorLayout(std::string app_id, std::string exec_id,
                      std::shared_ptr<const spark::ExecutorDirs> dirs)
      : ShuffleLayout({ShuffleOwner::Kind::kSparkExecutor, std::move(app_id), std::move(exec_id)}),
        dirs_(std::move(dirs)) {}
  ShuffleFileLocation Locate(const std::string& name) const override { return dirs_->Locate(name); }
  std::string Describe() const override;
  bool CommitsInTwoSteps() const override { return true; }

 private:
  std::shared_ptr<const spark::ExecutorDirs> dirs_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_LAYOUT_H_
