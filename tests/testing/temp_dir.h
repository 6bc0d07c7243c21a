// TempDir: a fresh directory under $TEST_TMPDIR (or /tmp), removed with its contents
// when the object dies.
#ifndef FERRY_TESTS_TESTING_TEMP_DIR_H_
#define FERRY_TESTS_TESTING_TEMP_DIR_H_

#include <string>
#include <vector>

namespace ferry::testing {

class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::string& path() const { return path_; }
  // Names in the directory (not recursive), sorted, without "." and "..".
  std::vector<std::string> ListFiles() const;

 private:
  std::string path_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_TEMP_DIR_H_
