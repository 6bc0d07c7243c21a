// Lets users spell absl flags with dashes (--data-dir) as well as underscores
// (--data_dir, absl's own spelling): rewrites the flag-name part of each argument
// before absl::ParseCommandLine sees it. Values are left untouched.
#ifndef FERRY_COMMON_FLAG_NAMES_H_
#define FERRY_COMMON_FLAG_NAMES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ferry {

// Returns argv with "--a-b=c" rewritten to "--a_b=c" (up to "=" or the end; a bare
// "--" ends flag parsing and everything after it is kept as is), "-h" as "--help" and
// "-t" as "--check_config", and each "--flagfile=F" replaced by F's flags (one per line;
// blank lines and '#' comments skipped), which are rewritten the same way. A flag file's
// line that is no flag, names a flag no one defines or gives a value its flag does not
// take exits 2 with "FILE:LINE: what is wrong"; on the command line the same, and a flag
// with no value, exit 2 with one line naming it. --help, -h and --helpfull print the
// program's flags for people and exit 0. The returned strings own the storage
// `pointers` points into.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv, std::vector<char*>* pointers);

// "max_pipes" -> "max-pipes": a flag's name as users write it.
std::string Dashed(absl::string_view name);

// The flags --help shows (either spelling); --helpfull shows every flag, grouped, and so
// does --help when none are named. Both print to stdout and exit 0.
void SetEssentialFlags(std::vector<std::string> names);

// A command of a program that has several (ferry gen, ferry fetch, ...): its name, what it
// does in one line, its usage line and the flags it reads.
struct CommandHelp {
  std::string name;
  std::string summary;
  std::string usage;
  std::vector<std::string> flags;
};

// Makes --help list the commands, and `PROGRAM CMD --help` (or --help CMD) show that
// command's usage and flags only; --helpfull shows every command's.
void SetCommands(std::vector<CommandHelp> commands);

// `PROGRAM help [CMD]`: the help above for CMD (or the list of commands when empty),
// exit 0; an unknown CMD is a usage error, one line, exit 2.
[[noreturn]] void PrintCommandHelp(const char* argv0, absl::string_view command);

// Where flag `name` (either spelling) was set when a flag file set it: "FILE:LINE";
// empty otherwise.
std::string FlagOrigin(absl::string_view name);

// absl::ParseCommandLine over the normalized arguments (exits on a bad flag, or after
// --help, or after --version, which prints the program's name and Ferry's version).
// Returns the positional arguments, argv[0] first.
std::vector<std::string> ParseFlags(int argc, char** argv);

}  // namespace ferry

#endif  // FERRY_COMMON_FLAG_NAMES_H_
