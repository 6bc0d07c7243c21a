#include "common/flag_names.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/version.h"

namespace ferry {

namespace {

// Where each flag set by a flag file was set ("FILE:LINE"), by its name as absl spells
// it. Written once, while the arguments are read, before any thread starts.
std::map<std::string, std::string>& Origins() {
  static auto* origins = new std::map<std::string, std::string>();
  return *origins;
}

// "--a-b=c" -> "--a_b=c": the name part only.
void Underscore(std::string& arg) {
  const size_t end = std::min(arg.find('='), arg.size());
  std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(end), '-', '_');
}

// The program's name, for messages.
std::string Program(const char* argv0) {
  const std::string path = argv0 != nullptr ? argv0 : "ferry";
  return path.substr(path.rfind('/') + 1);
}

[[noreturn]] void FlagFileError(const std::string& where, absl::string_view what) {
  std::fprintf(stderr, "%s: %s\n", where.c_str(), std::string(what).c_str());
  std::exit(2);
}

// Flag files: regular files of at most this many bytes, nested at most this deep.
constexpr size_t kMaxFlagFileBytes = size_t{1} << 20;
constexpr int kMaxFlagFileDepth = 8;

// A flag file's text: a regular file's (a FIFO or a device would block or never end),
// within kMaxFlagFileBytes. Exits 2 otherwise. `chain` holds the files that include it,
// by identity: one that includes itself, at any depth, is an error.
std::string FlagFileText(const std::string& path, std::vector<std::pair<dev_t, ino_t>>* chain) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    FlagFileError(path, absl::StrCat("cannot read this --flagfile: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    FlagFileError(path, "this --flagfile is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFlagFileBytes) {
    ::close(fd);
    FlagFileError(path,
                  absl::StrCat("this --flagfile holds more than ", kMaxFlagFileBytes, " bytes"));
  }
  for (const auto& [dev, ino] : *chain) {
    if (dev == st.st_dev && ino == st.st_ino) {
      ::close(fd);
      FlagFileError(path, "this --flagfile includes itself");
    }
  }
  chain->emplace_back(st.st_dev, st.st_ino);
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got > kMaxFlagFileBytes) {
    FlagFileError(path,
                  absl::StrCat("this --flagfile holds more than ", kMaxFlagFileBytes, " bytes"));
  }
  text.resize(got);
  return text;
}

// The flags of a flag file, their names spelled as absl spells them: one flag per line;
// blank lines and lines starting with '#' are skipped, as absl does. Each line is
// checked here, so that an error names the file and the line: a line that is no flag,
// a flag no one defines, a value its flag does not take. A --flagfile line is replaced
// by that file's flags, checked the same way (at most kMaxFlagFileDepth deep). Exits 2
// with that message (or when the file cannot be read).
std::vector<std::string> FlagFileLines(const std::string& path,
                                       std::vector<std::pair<dev_t, ino_t>>* chain) {
  if (static_cast<int>(chain->size()) >= kMaxFlagFileDepth) {
    FlagFileError(path, absl::StrCat("--flagfile nested more than ", kMaxFlagFileDepth, " deep"));
  }
  const std::string text = FlagFileText(path, chain);
  std::vector<std::string> lines;
  int number = 0;
  // Bounded by the file's length.
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    const absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (stripped.empty() || stripped[0] == '#') continue;
    const std::string where = absl::StrCat(path, ":", number);
    std::string flag(stripped);
    if (flag.size() < 3 || flag[0] != '-' || flag[1] != '-') {
      FlagFileError(where, absl::StrCat("'", absl::CHexEscape(stripped.substr(0, 80)),
                                        "' is not a flag (--name=value)"));
    }
    Underscore(flag);
    const size_t equals = flag.find('=');
    const std::string name = flag.substr(2, equals == std::string::npos ? flag.npos : equals - 2);
    if (name == "flagfile" || name == "flag_file") {
      if (equals == std::string::npos) FlagFileError(where, "--flagfile needs a file");
      for (std::string& nested : FlagFileLines(flag.substr(equals + 1), chain)) {
        lines.push_back(std::move(nested));
      }
      continue;
    }
    absl::CommandLineFlag* defined = absl::FindCommandLineFlag(name);
    if (defined == nullptr) {
      FlagFileError(where, absl::StrCat("unknown flag --", absl::CHexEscape(Dashed(name))));
    }
    // absl takes a bool flag without a value; everything else needs one.
    const std::string value = equals != std::string::npos ? flag.substr(equals + 1)
                              : defined->IsOfType<bool>() ? "true"
                                                          : "";
    std::string error;
    if (!defined->ParseFrom(value, &error)) {
      FlagFileError(where, absl::StrCat("--", Dashed(name), ": ", error));
    }
    Origins()[name] = where;
    lines.push_back(std::move(flag));
  }
  chain->pop_back();
  return lines;
}

std::vector<std::string>& Essentials() {
  static auto* essentials = new std::vector<std::string>();
  return *essentials;
}

std::vector<CommandHelp>& Commands() {
  static auto* commands = new std::vector<CommandHelp>();
  return *commands;
}

const CommandHelp* FindCommand(absl::string_view name) {
  for (const CommandHelp& command : Commands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

// A heading for the flags of each file that declares some, in the order --help shows
// them.
std::pair<int, std::string> GroupOf(absl::string_view file) {
  static const auto* const kGroups = new std::vector<std::pair<std::string, std::string>>{
      {"server/flags.cc", "The server: data, addresses, TLS, tokens, metrics"},
      {"server/dataplane/flags.cc", "Data plane"},
      {"common/io/flags.cc", "Data plane's I/O engine"},
      {"server/control/flags.cc", "Control plane"},
      {"server/storage/flags.cc", "Storage and disks"},
      {"server/tickets/flags.cc", "Streams"},
      {"server/spark/flags.cc", "Spark's front door"},
      {"server/main.cc", "The process"},
  };
  for (size_t i = 0; i < kGroups->size(); ++i) {
    if (absl::EndsWith(file, (*kGroups)[i].first)) {
      return {static_cast<int>(i), (*kGroups)[i].second};
    }
  }
  return {static_cast<int>(kGroups->size()), std::string(file)};
}

// `text` wrapped at 92 columns, each line indented by `indent`.
std::string Wrapped(absl::string_view text, size_t indent) {
  std::string out(indent, ' ');
  size_t column = indent;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column > indent && column + 1 + word.size() > 92) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    absl::StrAppend(&out, word);
    column += word.size();
  }
  return out;
}

// One flag for people: "  --name (default)" and its help, wrapped.
std::string FlagText(absl::string_view name, const absl::CommandLineFlag& flag) {
  const std::string value = flag.DefaultValue();
  return absl::StrCat("  --", Dashed(name), value.empty() ? "" : absl::StrCat(" (", value, ")"),
                      "\n", Wrapped(flag.Help(), 6), "\n");
}

// The flags a program defines (absl's own left out), by name as absl spells it.
std::map<std::string, const absl::CommandLineFlag*> ProgramFlags() {
  std::map<std::string, const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::StrContains(flag->Filename(), "absl/")) flags[std::string(name)] = flag;
  }
  return flags;
}

// Ways to read flags, for the end of every help text.
std::string Spelling(const std::string& program) {
  return absl::StrCat(
      Wrapped("Flags may be spelled with dashes or underscores, and read from a file, one per "
              "line, with --flagfile=FILE; --version prints the version; -h is --help.",
              0),
      "\n",
      program == "ferry_server" ? "--check-config (-t) checks the flags without serving. "
                                  "docs/operations.md explains each flag.\n"
                                : "");
}

// A program's commands for people (SetCommands): the list of them, or one command's
// usage and flags, or, with `all`, every command's. Exits 0, or 2 for an unknown command.
[[noreturn]] void PrintCommands(const std::string& program, bool all, absl::string_view name) {
  const std::map<std::string, const absl::CommandLineFlag*> flags = ProgramFlags();
  // A command's usage and flags, in the order the command lists them.
  auto command_text = [&](const CommandHelp& command) {
    std::string out =
        absl::StrCat(Wrapped(absl::StrCat(program, " ", command.name, ": ", command.summary), 0),
                     "\n\nusage: ", program, " ", command.usage, "\n\nFlags:\n");
    for (const std::string& flag : command.flags) {
      auto it = flags.find(flag);
      if (it != flags.end()) absl::StrAppend(&out, FlagText(flag, *it->second));
    }
    return out;
  };
  std::string out;
  if (!name.empty()) {
    const CommandHelp* command = FindCommand(name);
    if (command == nullptr) {
      std::fprintf(stderr, "%s: unknown command '%s' (%s help lists them)\n", program.c_str(),
                   std::string(name).c_str(), program.c_str());
      std::exit(2);
    }
    out = absl::StrCat(command_text(*command), "\n", program, " help lists the commands.\n",
                       Spelling(program));
  } else {
    out = absl::StrCat(
        Wrapped(absl::StrCat(program, " ", kFerryVersion, ": ", absl::ProgramUsageMessage()), 0),
        "\n\nCommands:\n");
    for (const CommandHelp& command : Commands()) {
      absl::StrAppend(&out, absl::StrFormat("  %-11s ", command.name),
                      Wrapped(command.summary, 14).substr(14), "\n");
    }
    if (all) {
      absl::flat_hash_set<std::string> listed;
      for (const CommandHelp& command : Commands()) {
        absl::StrAppend(&out, "\n", command_text(command));
        listed.insert(command.flags.begin(), command.flags.end());
      }
      std::string others;
      for (const auto& [flag_name, flag] : flags) {
        if (!listed.contains(flag_name)) absl::StrAppend(&others, FlagText(flag_name, *flag));
      }
      if (!others.empty()) absl::StrAppend(&out, "\nOther flags:\n", others);
    }
    absl::StrAppend(&out, "\n",
                    Wrapped(absl::StrCat(program, " help CMD (or ", program,
                                         " CMD --help) shows a command's usage and flags; ",
                                         program, " --helpfull every command's."),
                            0),
                    "\n", Spelling(program));
  }
  std::fputs(out.c_str(), stdout);
  std::exit(0);
}

// The program's flags for people: by group, dashed, with defaults; the essential ones
// only, unless `all` (or none were named). For a program with commands, PrintCommands
// with the command named among `args`. Exits 0.
[[noreturn]] void PrintHelp(const std::string& program, bool all, absl::string_view command) {
  if (!Commands().empty()) PrintCommands(program, all, command);
  const bool essentials_only = !all && !Essentials().empty();
  std::map<std::pair<int, std::string>, std::map<std::string, const absl::CommandLineFlag*>> groups;
  for (const auto& [name, flag] : ProgramFlags()) {
    if (essentials_only &&
        std::find(Essentials().begin(), Essentials().end(), name) == Essentials().end()) {
      continue;
    }
    groups[GroupOf(flag->Filename())][name] = flag;
  }
  std::string out =
      absl::StrCat(program, " ", kFerryVersion, ": ", absl::ProgramUsageMessage(), "\n");
  for (const auto& [group, group_flags] : groups) {
    absl::StrAppend(&out, "\n", group.second, ":\n");
    for (const auto& [name, flag] : group_flags) absl::StrAppend(&out, FlagText(name, *flag));
  }
  absl::StrAppend(&out, "\n",
                  essentials_only ? absl::StrCat("These are the essentials: ", program,
                                                 " --helpfull lists every flag.\n")
                                  : "",
                  Spelling(program));
  std::fputs(out.c_str(), stdout);
  std::exit(0);
}

// The first argument after argv[0] that is neither a flag nor a flag's value given
// apart (--server HOST): the command, for programs that have commands.
std::string FirstPositional(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return i + 1 < args.size() ? args[i + 1] : "";
    if (a.empty() || a[0] != '-') return a;
    if (a.size() < 3 || a[1] != '-' || absl::StrContains(a, '=')) continue;
    std::string name = a.substr(2);
    std::replace(name.begin(), name.end(), '-', '_');
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && !flag->IsOfType<bool>()) ++i;  // its value
  }
  return "";
}

}  // namespace

std::vector<std::string> NormalizeFlagNames(int argc, char** argv, std::vector<char*>* pointers) {
  std::vector<std::string> args;
  // --flagfile=F is replaced by F's lines, so that they are spelled either way too.
  for (int i = 0; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (i > 0 && (absl::StartsWith(a, "--flagfile=") || absl::StartsWith(a, "--flag-file="))) {
      std::vector<std::pair<dev_t, ino_t>> chain;
      for (std::string& line : FlagFileLines(std::string(a.substr(a.find('=') + 1)), &chain)) {
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
    if (flags_done) continue;
    // The short spellings people type first.
    if (a == "-h") a = "--help";
    if (a == "-t") a = "--check_config";
    if (a.size() < 3 || a[0] != '-' || a[1] != '-') continue;
    Underscore(a);
    // A flag no one defines, or a value its flag does not take: a usage error, one line,
    // exit 2 (absl's own parse would exit 1).
    const size_t equals = a.find('=');
    const std::string name = a.substr(2, equals == std::string::npos ? a.npos : equals - 2);
    if (name == "help" || name == "helpshort" || name == "helpfull") {
      PrintHelp(Program(argv[0]), /*all=*/name == "helpfull", FirstPositional(args));
    }
    // absl's own: handled by its parse, not in its registry.
    static const auto* const kAbslFlags = new absl::flat_hash_set<std::string>(
        {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch", "version",
         "only_check_args", "flagfile", "fromenv", "tryfromenv", "undefok"});
    if (kAbslFlags->contains(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && equals == std::string::npos) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;  // --noflag
    }
    const std::string program = Program(argv[0]);
    if (flag == nullptr) {
      std::fprintf(stderr, "%s: unknown flag --%s (%s --help lists them)\n", program.c_str(),
                   Dashed(name).c_str(), program.c_str());
      std::exit(2);
    }
    std::string value;
    if (equals != std::string::npos) {
      value = a.substr(equals + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < args.size()) {
      value = args[i + 1];  // --flag value
    } else {
      std::fprintf(stderr, "%s: --%s needs a value\n", program.c_str(), Dashed(name).c_str());
      std::exit(2);
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "%s: --%s: %s\n", program.c_str(), Dashed(name).c_str(), error.c_str());
      std::exit(2);
    }
  }
  pointers->clear();
  for (std::string& a : args) pointers->push_back(a.data());
  pointers->push_back(nullptr);
  return args;
}

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

void SetEssentialFlags(std::vector<std::string> names) {
  for (std::string& name : names) std::replace(name.begin(), name.end(), '-', '_');
  Essentials() = std::move(names);
}

void SetCommands(std::vector<CommandHelp> commands) {
  for (CommandHelp& command : commands) {
    for (std::string& flag : command.flags) std::replace(flag.begin(), flag.end(), '-', '_');
  }
  Commands() = std::move(commands);
}

void PrintCommandHelp(const char* argv0, absl::string_view command) {
  PrintCommands(Program(argv0), /*all=*/false, command);
}

std::string FlagOrigin(absl::string_view name) {
  std::string underscored(name);
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  auto it = Origins().find(underscored);
  return it == Origins().end() ? "" : it->second;
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
