#include "server/spark/yarn_apps.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/small_file.h"
#include "common/status_macros.h"

namespace ferry {

namespace {

constexpr char kSecretKey[] = "secret";
constexpr char kRecoveryDisabledKey[] = "spark.yarn.shuffle.server.recovery.disabled";
constexpr size_t kMaxLocalDirsBytes = 1 << 20;

// Makes `path` a directory if it is not one yet (the NodeManager's aux service makes
// them too, whichever starts first).
absl::Status EnsureDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a directory"));
  return absl::OkStatus();
}

}  // namespace

bool IsAppFileName(absl::string_view app_id) {
  if (app_id.empty() || app_id.size() > 255 || app_id[0] == '.') return false;
  for (char c : app_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<YarnApps::ServiceData> YarnApps::ParseServiceData(absl::string_view bytes) {
  ServiceData data;
  google::protobuf::Struct payload;
  const absl::string_view trimmed = absl::StripAsciiWhitespace(bytes);
  // Spark's own service takes whatever parses as a JSON object as the payload.
  if (!trimmed.empty() && trimmed.front() == '{' &&
      google::protobuf::util::JsonStringToMessage(std::string(trimmed), &payload).ok()) {
    const auto& fields = payload.fields();
    if (auto it = fields.find(kSecretKey); it != fields.end()) {
      if (it->second.has_string_value()) {
        if (!it->second.string_value().empty()) data.secret = it->second.string_value();
      } else if (!it->second.has_null_value()) {
        return absl::InvalidArgumentError("the service data's \"secret\" is not a string");
      }
    }
    if (auto it = fields.find(kRecoveryDisabledKey); it != fields.end()) {
      if (it->second.has_bool_value()) {
        data.recovery_disabled = it->second.bool_value();
      } else if (it->second.has_string_value()) {
        data.recovery_disabled = absl::AsciiStrToLower(it->second.string_value()) == "true";
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("the service data's \"", kRecoveryDisabledKey, "\" is not a boolean"));
      }
    }
    payload.Clear();
    return data;
  }
  // The secret's bytes (Spark's JavaUtils.stringToBytes: UTF-8); none without
  // spark.authenticate.
  if (!bytes.empty()) data.secret = std::string(bytes);
  return data;
}

absl::StatusOr<std::unique_ptr<YarnApps>> YarnApps::Open(const Options& options) {
  if (options.dir.empty() || options.dir.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--spark-yarn-dir ", options.dir, " is not an absolute path"));
  }
  struct stat st {};
  if (::stat(options.dir.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("--spark-yarn-dir ", options.dir));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spark-yarn-dir ", options.dir, " is not a directory"));
  }
  for (const char* sub : {"/apps", "/stopped"}) {
    if (absl::Status s = EnsureDir(absl::StrCat(options.dir, sub)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--spark-yarn-dir: ", s.message()));
    }
  }
  return std::unique_ptr<YarnApps>(new YarnApps(options.dir));
}

absl::StatusOr<YarnApps::ServiceData> YarnApps::Find(absl::string_view app_id) const {
  if (!IsAppFileName(app_id)) {
    return absl::NotFoundError(absl::StrCat("no YARN application ", app_id));
  }
  const std::string path = absl::StrCat(dir_, "/apps/", app_id);
  absl::StatusOr<std::string> bytes = ReadSmallFile(path, kMaxServiceDataBytes);
  if (!bytes.ok()) {
    if (absl::IsNotFound(bytes.status())) {
      return absl::NotFoundError(
          absl::StrCat("the NodeManager has not started application ", app_id, " on this node"));
    }
    return bytes.status();
  }
  absl::StatusOr<ServiceData> data = ParseServiceData(*bytes);
  explicit_bzero(bytes->data(), bytes->size());
  if (!data.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", data.status().message()));
  return data;
}

absl::StatusOr<std::vector<std::string>> YarnApps::Stopped() const {
  const std::string path = absl::StrCat(dir_, "/stopped");
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), ::closedir);
  if (dir == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("opendir ", path));
  std::vector<std::string> stopped;
  errno = 0;
  while (stopped.size() < kMaxStoppedPerCall) {
    const dirent* entry = ::readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return absl::ErrnoToStatus(errno, absl::StrCat("readdir ", path));
      break;
    }
    if (IsAppFileName(entry->d_name)) stopped.emplace_back(entry->d_name);
  }
  return stopped;
}

absl::Status YarnApps::Forget(absl::string_view app_id) const {
  if (!IsAppFileName(app_id))
    return absl::InvalidArgumentError(absl::StrCat("bad app id ", app_id));
  // The service data first: the marker is what says there is still something to do.
  for (const char* sub : {"/apps/", "/stopped/"}) {
    const std::string path = absl::StrCat(dir_, sub, app_id);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::ErrnoToStatus(errno, absl::StrCat("unlink ", path));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> YarnApps::NodeManagerLocalDirs() const {
  const std::string path = absl::StrCat(dir_, "/nodemanager-local-dirs");
  FERRY_ASSIGN_OR_RETURN(std::string bytes, ReadSmallFile(path, kMaxLocalDirsBytes));
  std::vector<std::string> dirs;
  for (absl::string_view line : absl::StrSplit(bytes, '\n', absl::SkipWhitespace())) {
    dirs.emplace_back(absl::StripAsciiWhitespace(line));
  }
  if (dirs.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " names no dir"));
  return dirs;
}

}  // namespace ferry
