#include "common/flag_names.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

// The flags a flag file below sets (a flag file's lines are checked against the flags
// the binary defines).
ABSL_FLAG(std::string, data_dir, "", "for the test");
ABSL_FLAG(std::string, spark_dir_roots, "", "for the test");
ABSL_FLAG(int, threads, 0, "for the test");
ABSL_FLAG(std::string, mode, "", "for the test");
ABSL_FLAG(bool, check_config, false, "for the test");

namespace ferry {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::vector<char*> pointers;
  return NormalizeFlagNames(static_cast<int>(argv.size()), argv.data(), &pointers);
}

TEST(FlagNamesTest, DashedNamesBecomeAbslsAndValuesStay) {
  EXPECT_EQ(
      Normalize({"prog", "--data-dir=/a-b/c-d", "--mode", "copy-x", "--", "--x-y"}),
      (std::vector<std::string>{"prog", "--data_dir=/a-b/c-d", "--mode", "copy-x", "--", "--x-y"}));
}

TEST(FlagNamesTest, AFlagFileIsExpandedAndNormalizedToo) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/flags";
  std::ofstream(path) << "# a comment\n\n  --data-dir=/srv/a-b  \n--spark-dir-roots=/x,/y\n";
  EXPECT_EQ(Normalize({"prog", "--threads=2", "--flagfile=" + path, "ls"}),
            (std::vector<std::string>{"prog", "--threads=2", "--data_dir=/srv/a-b",
                                      "--spark_dir_roots=/x,/y", "ls"}));
}

// Usage errors on the command line are one line and exit 2, as the README promises
// (absl's parse exits 1).
TEST(FlagNamesTest, AnUnknownFlagOrABadValueIsAUsageError) {
  EXPECT_EXIT(Normalize({"prog", "--threads=2", "--nope=1"}), ::testing::ExitedWithCode(2),
              "prog: unknown flag --nope \\(prog --help lists them\\)");
  EXPECT_EXIT(Normalize({"prog", "--threads=many"}), ::testing::ExitedWithCode(2),
              "prog: --threads: Illegal value 'many'");
  EXPECT_EXIT(Normalize({"prog", "--data-dir"}), ::testing::ExitedWithCode(2),
              "prog: --data-dir needs a value");
  // absl's own flags, "--flag value" and what follows "--" are absl's to read.
  EXPECT_EQ(Normalize({"prog", "--threads", "4", "--helpfull", "--", "--nope"}).size(), 6u);
}

TEST(FlagNamesTest, ShortSpellings) {
  EXPECT_EQ(Normalize({"prog", "-h", "-t", "--", "-h"}),
            (std::vector<std::string>{"prog", "--help", "--check_config", "--", "-h"}));
}

// An error in a flag file names the file and the line; where a flag was set is kept for
// the errors found later (its range, by Validate()).
TEST(FlagNamesTest, AFlagFilesLinesAreCheckedAndRemembered) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/flags";
  std::ofstream(path) << "# a comment\n\n--threads=3\n--data-dir=/d\n";
  Normalize({"prog", "--flagfile=" + path});
  EXPECT_EQ(FlagOrigin("threads"), path + ":3");
  EXPECT_EQ(FlagOrigin("data-dir"), path + ":4");
  EXPECT_EQ(FlagOrigin("never-set"), "");
  const auto file_of = [&](const std::string& contents) {
    std::ofstream(path, std::ios::trunc) << contents;
    return std::vector<std::string>{"prog", "--flagfile=" + path};
  };
  EXPECT_EXIT(Normalize(file_of("--threads=1\n--nope=2\n")), ::testing::ExitedWithCode(2),
              "flags:2: unknown flag --nope");
  EXPECT_EXIT(Normalize(file_of("\n--threads=many\n")), ::testing::ExitedWithCode(2),
              "flags:2: --threads: Illegal value 'many'");
  EXPECT_EXIT(Normalize(file_of("threads=1\n")), ::testing::ExitedWithCode(2),
              "flags:1: 'threads=1' is not a flag");
  EXPECT_EXIT(Normalize({"prog", "--flagfile=" + dir.path() + "/none"}),
              ::testing::ExitedWithCode(2), "none: cannot read this --flagfile");
}

// Nested flag files are expanded in place and checked as the outer one; a circle, a
// file that is not regular, and nesting past 8 are usage errors naming the file.
TEST(FlagNamesTest, NestedFlagFilesAreCheckedAndBounded) {
  testing::TempDir dir;
  const std::string inner = dir.path() + "/inner";
  const std::string outer = dir.path() + "/outer";
  std::ofstream(inner) << "--mode=copy\n";
  std::ofstream(outer) << "--threads=5\n--flag-file=" << inner << "\n--data-dir=/o\n";
  EXPECT_EQ(Normalize({"prog", "--flagfile=" + outer}),
            (std::vector<std::string>{"prog", "--threads=5", "--mode=copy", "--data_dir=/o"}));
  EXPECT_EQ(FlagOrigin("mode"), inner + ":1");
  std::ofstream(inner, std::ios::trunc) << "--threads=x\n";
  EXPECT_EXIT(Normalize({"prog", "--flagfile=" + outer}), ::testing::ExitedWithCode(2),
              "inner:1: --threads: Illegal value 'x'");
  std::ofstream(inner, std::ios::trunc) << "--flagfile=" << outer << "\n";
  EXPECT_EXIT(Normalize({"prog", "--flagfile=" + outer}), ::testing::ExitedWithCode(2),
              "outer: this --flagfile includes itself");
  EXPECT_EXIT(Normalize({"prog", "--flagfile=/dev/zero"}), ::testing::ExitedWithCode(2),
              "/dev/zero: this --flagfile is not a regular file");
  EXPECT_EXIT(Normalize({"prog", "--flagfile=" + dir.path()}), ::testing::ExitedWithCode(2),
              "this --flagfile is not a regular file");
}

// A program with commands: --help lists them; `prog CMD --help` (wherever the flags
// and their values stand) and `prog help CMD` show that command's usage and flags only.
TEST(FlagNamesTest, HelpIsPerCommand) {
  // Help goes to stdout; the death test reads stderr.
  const auto help = [](std::vector<std::string> args) {
    ::dup2(2, 1);
    SetCommands({{"ls", "list things.", "ls --data-dir=D", {"data-dir"}},
                 {"run", "run things.", "run --threads=N", {"threads", "mode"}}});
    if (args.size() == 3 && args[1] == "help") PrintCommandHelp("prog", args[2]);
    Normalize(std::move(args));
  };
  EXPECT_EXIT(help({"prog", "--help"}), ::testing::ExitedWithCode(0),
              "Commands:\n  ls +list things.\n  run +run things.");
  EXPECT_EXIT(help({"prog", "--threads", "4", "run", "-h"}), ::testing::ExitedWithCode(0),
              "prog run: run things.\n\nusage: prog run --threads=N\n\nFlags:\n  --threads "
              "\\(0\\)\n      for the test\n  --mode\n      for the test\n\n");
  EXPECT_EXIT(help({"prog", "--help", "ls"}), ::testing::ExitedWithCode(0),
              "Flags:\n  --data-dir\n      for the test\n\nprog help lists");
  EXPECT_EXIT(help({"prog", "help", "run"}), ::testing::ExitedWithCode(0), "prog run: run things");
  EXPECT_EXIT(help({"prog", "help", "walk"}), ::testing::ExitedWithCode(2),
              "prog: unknown command 'walk' \\(prog help lists them\\)");
  // --helpfull: every command's flags; a flag no command lists is not left out.
  EXPECT_EXIT(help({"prog", "--helpfull"}), ::testing::ExitedWithCode(0),
              "prog ls: list things.(.|\n)*prog run: run things.(.|\n)*Other "
              "flags:\n  --check-config \\(false\\)(.|\n)*--spark-dir-roots");
}

}  // namespace
}  // namespace ferry
