// ProcessGroups: the daemons of a test cluster (Spark's, YARN's), each started in a
// process group of its own (what it forks joins it) with its output in a log file, and
// killed with its whole group: by Kill(), or when the ProcessGroups is destroyed (last
// started first). Each daemon also gets SIGKILL if the test process dies first.
#ifndef FERRY_TESTS_TESTING_PROCESS_GROUPS_H_
#define FERRY_TESTS_TESTING_PROCESS_GROUPS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ferry::testing {

class ProcessGroups {
 public:
  // `graceful`: Kill() asks with SIGTERM first; otherwise it SIGKILLs at once (daemons
  // whose shutdown a test need not wait for).
  explicit ProcessGroups(bool graceful = true) : graceful_(graceful) {}
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;
  ~ProcessGroups();

  // Starts `argv` with `env` added to this process's environment, in a group of its
  // own (and network namespace `netns`, when given), its stdout and stderr appended to
  // `log`. Returns the group's leader. It gets SIGKILL when the thread that called
  // Launch ends (PR_SET_PDEATHSIG is the forking thread's): launch daemons from a thread
  // that lives as long as they must.
  absl::StatusOr<pid_t> Launch(const std::vector<std::string>& argv,
                               const std::map<std::string, std::string>& env,
                               const std::string& log, const std::string& netns = "");
  // SIGTERM to the group, up to 10 s for all of it to go, then SIGKILL (at once when not
  // graceful); forgotten after.
  void Kill(pid_t group);
  // `leader`'s wait status once it has exited, waiting until `deadline`; nullopt if it
  // has not.
  static std::optional<int> WaitForExit(pid_t leader, absl::Time deadline);

 private:
  const bool graceful_;
  std::vector<pid_t> groups_;
};

// Makes this process the reaper of the orphans of the daemons it starts (prctl's
// PR_SET_CHILD_SUBREAPER) and reaps them, every 100 ms on a thread of its own, for the
// rest of the process's life: a NodeManager that is restarted leaves its containers
// behind, and they must not linger as zombies once they exit (the next NodeManager
// tells a live container by signal 0, which a zombie answers), as init reaps them on a
// real node. Processes ProcessGroups launched are left to their ProcessGroups. Once per
// process; later calls do nothing.
void ReapOrphans();

// Of /proc/<pid>/stat: the process's state letter (R, S, Z, ...) and its parent.
struct ProcessStat {
  char state = '?';
  pid_t parent = 0;
};
std::optional<ProcessStat> StatOf(pid_t pid);

// The JDK of the `java` the tests run ($JAVA_HOME, else Debian's 17); empty: none.
std::string JavaHome();
// What every JVM a test starts runs with (Spark's drivers, executors and daemons, YARN's
// daemons): the C1 compiler only. A test's JVM lives for seconds, where C2's compiling
// costs more CPU than it gains: a Spark application's CPU about halves (49 to 26 CPU s
// for spark_jobs.py's rdd and sql jobs). Benchmarks start their JVMs with the JDK's
// defaults.
inline constexpr char kTestJvmOptions[] = "-XX:TieredStopAtLevel=1";
// The last `max_lines` lines of a JVM daemon's log that say what went wrong (ERROR,
// WARN, exceptions and their causes, without stack frames), one per line.
std::string JvmFailureLines(const std::string& log_text, size_t max_lines);
// A file's contents; empty when it cannot be read.
std::string ReadTextFile(const std::string& path);
// The lines of the files at `paths` (in that order) that contain `containing`.
std::vector<std::string> LinesContaining(const std::vector<std::string>& paths,
                                         absl::string_view containing);
// Writes `text` as the whole of the file at `path`; an error naming it.
absl::Status WriteTextFile(const std::string& path, const std::string& text);
// A loopback port nothing listens on now (below the ephemeral range, never the same twice
// in one process), and whether something accepts on one.
uint16_t FreeLoopbackPort();
bool AcceptsOnLoopback(uint16_t port);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_PROCESS_GROUPS_H_
