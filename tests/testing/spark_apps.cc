#include "tests/testing/spark_apps.h"

#include <fcntl.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
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

std::string AnswersDiffer(const std::vector<std::string>& results,
                          absl::Span<const absl::string_view> jobs) {
  const std::map<std::string, std::string> by_job = ResultsByJob(results);
  std::string differ;
  for (const absl::string_view job : jobs) {
    const std::string expected = absl::StrCat("expected-", job);
    const auto got = by_job.find(std::string(job));
    const auto want = by_job.find(expected);
    if (got == by_job.end() || want == by_job.end()) {
      absl::StrAppend(&differ, "no RESULT of job ",
                      got == by_job.end() ? job : absl::string_view(expected), "; ");
      continue;
    }
    // json.dumps sorts the keys: the job's name is in the same place in both lines.
    if (absl::StrReplaceAll(got->second, {{absl::StrCat("\"", job, "\""), ""}}) !=
        absl::StrReplaceAll(want->second, {{absl::StrCat("\"", expected, "\""), ""}})) {
      absl::StrAppend(&differ, got->second, " vs ", want->second, "; ");
    }
  }
  return differ;
}

void Touch(const std::string& path) {
  const UniqueFd created(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
}

namespace {

constexpr absl::string_view kFoundClosed = "Found inactive connection to ";

bool FoundClosed(absl::string_view line) { return absl::StrContains(line, kFoundClosed); }

}  // namespace

LogLines FetchTrouble(const std::map<std::string, std::string>& logs, int port) {
  // "Found inactive connection to localhost/127.0.0.1:7337, creating a new one."
  const std::string address = absl::StrCat(":", port, ",");
  LogLines found;
  for (const auto& [path, text] : logs) {
    std::vector<std::string>& lines = found[path];
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if ((FoundClosed(line) && absl::StrContains(line, address)) ||
          absl::StrContains(line, "Retrying fetch") ||
          absl::StrContains(line, "Failed while starting block fetches") ||
          absl::StrContains(line, "Failed to get block")) {
        lines.emplace_back(line);
      }
    }
  }
  return found;
}

LogLines FetchTroubleIn(const std::vector<std::string>& paths, int port) {
  std::map<std::string, std::string> logs;
  for (const std::string& path : paths) logs[path] = ReadTextFile(path);
  return FetchTrouble(logs, port);
}

std::vector<std::string> FetchTroubleSince(const LogLines& then, const LogLines& now) {
  std::vector<std::string> since;
  for (const auto& [path, lines] : now) {
    const auto earlier = then.find(path);
    const size_t held = earlier == then.end() ? 0 : std::min(earlier->second.size(), lines.size());
    // The registration's connection, found closed at the next connect.
    bool registration_seen = earlier != then.end() && absl::c_any_of(earlier->second, FoundClosed);
    for (size_t i = held; i < lines.size(); ++i) {
      if (!registration_seen && FoundClosed(lines[i])) {
        registration_seen = true;
        continue;
      }
      since.push_back(absl::StrCat(path, ": ", lines[i]));
    }
  }
  return since;
}

}  // namespace ferry::testing
