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
#include "absl/time/time.h"

namespace ferry::testing {

class ProcessGroups {
 public:
  ProcessGroups() = default;
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;
  ~ProcessGroups();

  // Starts `argv` with `env` added to this process's environment, in a group of its
  // own (and network namespace `netns`, when given), its stdout and stderr appended to
  // `log`. Returns the group's leader.
  absl::StatusOr<pid_t> Launch(const std::vector<std::string>& argv,
                               const std::map<std::string, std::string>& env,
                               const std::string& log, const std::string& netns = "");
  // SIGTERM to the group, up to 10 s for all of it to go, then SIGKILL; forgotten after.
  void Kill(pid_t group);
  // `leader`'s wait status once it has exited, waiting until `deadline`; nullopt if it
  // has not.
  static std::optional<int> WaitForExit(pid_t leader, absl::Time deadline);

 private:
  std::vector<pid_t> groups_;
};

// The JDK of the `java` the tests run ($JAVA_HOME, else Debian's 17); empty: none.
std::string JavaHome();
// A file's contents; empty when it cannot be read.
std::string ReadTextFile(const std::string& path);
// A loopback port nothing listens on now, and whether something accepts on one.
uint16_t FreeLoopbackPort();
bool AcceptsOnLoopback(uint16_t port);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_PROCESS_GROUPS_H_
