#include "tests/testing/spark_apps.h"

#include <fcntl.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/unique_fd.h"
#include "tests/testing/process_groups.h"

namespace ferry::testing {

pid_t ExecutorOf(pid_t pid) {
  for (int depth = 0; depth < 8 && pid > 1; ++depth) {
    if (absl::StrContains(ReadTextFile(absl::StrCat("/proc/", pid, "/cmdline")),
                          "CoarseGrainedExecutorBackend")) {
      return pid;
    }
    const std::optional<ProcessStat> stat = StatOf(pid);
    if (!stat.has_value()) return 0;
    pid = stat->parent;
  }
  return 0;
}

std::string EnvironmentOf(pid_t pid, const std::string& name) {
  for (absl::string_view var :
       absl::StrSplit(ReadTextFile(absl::StrCat("/proc/", pid, "/environ")), '\0')) {
    if (absl::ConsumePrefix(&var, name + "=")) return std::string(var);
  }
  return "";
}

std::vector<pid_t> ExecutorsBeneath(const std::string& root) {
  std::vector<pid_t> executors;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end;
       it.increment(error)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid)) continue;
    if (!absl::StrContains(ReadTextFile(absl::StrCat("/proc/", pid, "/cmdline")),
                           "CoarseGrainedExecutorBackend")) {
      continue;
    }
    if (absl::StartsWith(EnvironmentOf(pid, "SPARK_EXECUTOR_DIRS"), root + "/")) {
      executors.push_back(pid);
    }
  }
  return executors;
}

std::map<std::string, std::string> ShuffleFiles(const std::string& root) {
  std::map<std::string, std::string> files;
  std::error_code error;
  for (std::filesystem::recursive_directory_iterator it(root, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename();
    if (absl::StartsWith(name, "shuffle_")) files[name] = it->path();
  }
  return files;
}

std::map<int, std::vector<std::string>> DataFilesByShuffle(
    const std::map<std::string, std::string>& files) {
  std::map<int, std::vector<std::string>> data;
  for (const auto& [name, path] : files) {
    const std::vector<std::string> parts = absl::StrSplit(name, '_');
    int shuffle = -1;
    if (parts.size() == 4 && absl::EndsWith(name, ".data") &&
        absl::SimpleAtoi(parts[1], &shuffle)) {
      data[shuffle].push_back(name);
    }
  }
  return data;
}

std::string JsonField(const std::string& line, const std::string& key) {
  const std::string quoted = absl::StrCat("\"", key, "\": ");
  const size_t at = line.find(quoted);
  if (at == std::string::npos) return "";
  const size_t start = at + quoted.size();
  if (line.compare(start, 1, "\"") == 0) {
    return line.substr(start + 1, line.find('"', start + 1) - start - 1);
  }
  return line.substr(start, line.find_first_of(",}", start) - start);
}

std::map<std::string, std::string> ResultsByJob(const std::vector<std::string>& results) {
  std::map<std::string, std::string> by_job;
  for (const std::string& line : results) by_job[JsonField(line, "job")] = line;
  return by_job;
}

std::string SumsDiffer(const std::map<std::string, std::string>& by_job, const std::string& job,
                       const std::string& expected) {
  for (const std::string& name : {job, expected}) {
    if (by_job.count(name) == 0) return absl::StrCat("no RESULT of job ", name);
  }
  std::string differ;
  for (const char* field : {"keys", "total", "weighted"}) {
    if (JsonField(by_job.at(job), field) != JsonField(by_job.at(expected), field)) {
      absl::StrAppend(&differ, field, " of ", by_job.at(job), " vs ", by_job.at(expected), "; ");
    }
  }
  return differ;
}

void Touch(const std::string& path) {
  const UniqueFd created(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
}

}  // namespace ferry::testing
