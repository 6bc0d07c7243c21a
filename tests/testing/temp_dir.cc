#include "tests/testing/temp_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "common/check.h"

namespace ferry::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/ferry.XXXXXX";
  FERRY_CHECK(::mkdtemp(tmpl.data()) != nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<std::string> TempDir::ListFiles() const {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ferry::testing
