#include "common/flag_names.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"

namespace ferry {

namespace {

// The lines of a flag file: one flag per line; blank lines and lines starting with '#'
// are skipped, as absl does. Exits with a message when the file cannot be read.
std::vector<std::string> FlagFileLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read --flagfile %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<std::string> lines;
  std::string line;
  // Bounded by the file's length.
  while (std::getline(in, line)) {
    const absl::string_view flag = absl::StripAsciiWhitespace(line);
    if (flag.empty() || flag[0] == '#') continue;
    lines.emplace_back(flag);
  }
  return lines;
}

}  // namespace

std::vector<std::string> NormalizeFlagNames(int argc, char** argv, std::vector<char*>* pointers) {
  std::vector<std::string> args;
  // --flagfile=F is replaced by F's lines, so that they are spelled either way too.
  for (int i = 0; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (i > 0 && (absl::StartsWith(a, "--flagfile=") || absl::StartsWith(a, "--flag-file="))) {
      for (std::string& line : FlagFileLines(std::string(a.substr(a.find('=') + 1)))) {
        args.push_back(std::move(line));
      }
      continue;
    }
    args.emplace_back(a);
  }
  bool flags_done = false;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") flags_done = true;
    if (flags_done || a.size() < 3 || a[0] != '-' || a[1] != '-') continue;
    const size_t end = std::min(a.find('='), a.size());
    std::replace(a.begin() + 2, a.begin() + static_cast<std::ptrdiff_t>(end), '-', '_');
  }
  pointers->clear();
  for (std::string& a : args) pointers->push_back(a.data());
  pointers->push_back(nullptr);
  return args;
}

std::vector<std::string> ParseFlags(int argc, char** argv) {
  // --version: the program's name and Ferry's version.
  std::string name = argc > 0 ? argv[0] : "ferry";
  name = name.substr(name.rfind('/') + 1);
  // absl's --help lists only flags defined in a file named after the program; Ferry's
  // live in main.cc and the like. List every flag but absl's own.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [name] { return absl::StrCat(name, " ", kFerryVersion, "\n"); };
  absl::SetFlagsUsageConfig(usage);
  std::vector<char*> pointers;
  std::vector<std::string> args = NormalizeFlagNames(argc, argv, &pointers);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), pointers.data());
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace ferry
