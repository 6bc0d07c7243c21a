#include "tests/testing/yarn_cluster.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tests/testing/wait_for.h"

namespace ferry::testing {

namespace {

// JDK 17 closes what Hadoop's RPC and web layers reach into.
constexpr const char* kOpens[] = {
    "java.lang", "java.lang.reflect", "java.util", "java.util.concurrent",
    "java.io",   "java.net",          "java.nio",  "sun.nio.ch"};

std::string SiteXml(const std::map<std::string, std::string>& properties) {
  std::string xml = "<?xml version=\"1.0\"?>\n<configuration>\n";
  for (const auto& [name, value] : properties) {
    absl::StrAppend(&xml, "  <property><name>", name, "</name><value>", value,
                    "</value></property>\n");
  }
  return xml + "</configuration>\n";
}

// Hadoop's daemons log through log4j 1 (reload4j) to stderr, which Launch puts in the
// daemon's log file.
constexpr char kLog4j[] =
    "log4j.rootLogger=INFO, stderr\n"
    "log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
    "log4j.appender.stderr.Target=System.err\n"
    "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
    "log4j.appender.stderr.layout.ConversionPattern=%d{ISO8601} %p %c{1}: %m%n\n";

// Whether a daemon this process started has exited (a zombie until it is reaped).
bool Exited(pid_t pid) {
  const std::optional<ProcessStat> stat = StatOf(pid);
  return !stat.has_value() || stat->state == 'Z';
}

absl::Status WriteConfDir(const std::string& dir, const std::string& work,
                          const std::map<std::string, std::string>& yarn_site) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", error.message()));
  if (absl::Status s = WriteTextFile(
          dir + "/core-site.xml",
          SiteXml({{"fs.defaultFS", "file:///"}, {"hadoop.tmp.dir", work + "/hadoop-tmp"}}));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteTextFile(dir + "/log4j.properties", kLog4j); !s.ok()) return s;
  return WriteTextFile(dir + "/yarn-site.xml", SiteXml(yarn_site));
}

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `java` and its options for a YARN daemon, up to its class path.
std::vector<std::string> DaemonArgv() {
  std::vector<std::string> argv = {JavaHome() + "/bin/java", "-Xmx384m", kTestJvmOptions,
                                   "-Djava.net.preferIPv4Stack=true"};
  for (const char* package : kOpens) {
    argv.push_back(absl::StrCat("--add-opens=java.base/", package, "=ALL-UNNAMED"));
  }
  return argv;
}

}  // namespace

absl::StatusOr<std::string> YarnJarsFor(const SparkDistribution& spark) {
  std::string hadoop;
  if (DIR* dir = ::opendir((spark.home + "/jars").c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      absl::string_view name = entry->d_name;
      if (absl::ConsumePrefix(&name, "hadoop-client-api-") && absl::ConsumeSuffix(&name, ".jar")) {
        hadoop = std::string(name);
      }
    }
    ::closedir(dir);
  }
  if (hadoop.empty()) {
    return absl::NotFoundError(absl::StrCat("Spark ", spark.version, " at ", spark.home,
                                            " bundles no hadoop-client-api jar"));
  }
  const char* env = std::getenv("FERRY_YARN_ROOT");
  const std::string root = env != nullptr && *env != '\0' ? env : "/opt/ferry-yarn";
  const std::string jars = absl::StrCat(root, "/hadoop-", hadoop, "/lib");
  if (::access((jars + "/hadoop-yarn-server-nodemanager-" + hadoop + ".jar").c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no YARN ", hadoop, " (for Spark ", spark.version,
                                            ") in ", jars, ": scripts/setup fetches it"));
  }
  return jars;
}

std::map<std::string, std::string> YarnCluster::JavaEnv() const {
  return {{"JAVA_HOME", JavaHome()}};
}

std::string YarnCluster::local_dir(int i) const {
  return absl::StrCat(local_dirs_root(), "/", i, "/local");
}

absl::StatusOr<std::unique_ptr<YarnCluster>> YarnCluster::Start(const Options& options) {
  if (JavaHome().empty()) return absl::NotFoundError("no Java runtime");
  // A restarted NodeManager's containers are orphans of this process.
  ReapOrphans();
  std::unique_ptr<YarnCluster> cluster(new YarnCluster(options));
  const std::string& work = options.work_dir;
  std::map<std::string, std::string> site = {
      {"yarn.resourcemanager.hostname", "127.0.0.1"},
      {"yarn.resourcemanager.scheduler.class",
       "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler"},
      {"yarn.scheduler.minimum-allocation-mb", "256"},
      {"yarn.resourcemanager.recovery.enabled", "false"},
  };
  std::vector<std::string> jars;
  for (const auto& entry : std::filesystem::directory_iterator(options.hadoop_jars)) {
    if (absl::EndsWith(entry.path().string(), ".jar")) jars.push_back(entry.path().string());
  }
  std::sort(jars.begin(), jars.end());
  cluster->classpath_ = absl::StrJoin(jars, ":");

  std::vector<std::string> argv = DaemonArgv();
  std::vector<std::string> rm = argv;
  rm.insert(rm.end(), {"-cp", absl::StrCat(work, "/conf:", cluster->classpath_),
                       "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"});
  // The ResourceManager, until it accepts on its resource tracker's port: a port
  // FreeLoopbackPort() chose can be taken by another test's process before the JVM
  // binds it, and the ResourceManager then exits. Each attempt takes new ports.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    for (const char* key : {"address", "scheduler.address", "resource-tracker.address",
                            "admin.address", "webapp.address"}) {
      site[absl::StrCat("yarn.resourcemanager.", key)] =
          absl::StrCat("127.0.0.1:", FreeLoopbackPort());
    }
    if (absl::Status s = WriteConfDir(work + "/conf", work, site); !s.ok()) return s;
    const std::string log = work + "/resourcemanager.log";
    absl::StatusOr<pid_t> started = cluster->groups_.Launch(rm, cluster->JavaEnv(), log);
    if (!started.ok()) return started.status();
    uint32_t tracker = 0;
    if (!absl::SimpleAtoi(site["yarn.resourcemanager.resource-tracker.address"].substr(10),
                          &tracker)) {
      return absl::InternalError("the resource tracker's port");
    }
    testing::WaitFor(
        [&] { return AcceptsOnLoopback(static_cast<uint16_t>(tracker)) || Exited(*started); },
        absl::Seconds(120));
    if (AcceptsOnLoopback(static_cast<uint16_t>(tracker))) break;
    cluster->groups_.Kill(*started);
    if (attempt == kAttempts) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the ResourceManager did not listen on its resource tracker's port in ", kAttempts,
          " attempts; its last log: ", log, "\n", JvmFailureLines(ReadTextFile(log), 20)));
    }
  }

  cluster->site_ = site;
  cluster->node_managers_.assign(options.node_managers, 0);
  for (int i = 0; i < options.node_managers; ++i) {
    if (absl::Status s = cluster->WriteNodeManagerConf(i); !s.ok()) return s;
    absl::StatusOr<pid_t> nm = cluster->StartNodeManager(i);
    if (!nm.ok()) return nm.status();
  }
  // A NodeManager whose port was taken before its JVM bound it exits: it starts again on
  // new ports, up to three times.
  constexpr int kNodeManagerAttempts = 3;
  for (int i = 0; i < options.node_managers; ++i) {
    for (int attempt = 1;; ++attempt) {
      absl::Status registered = cluster->WaitForRegistration(i, 1, absl::Seconds(120));
      if (registered.ok()) break;
      if (attempt == kNodeManagerAttempts || !Exited(cluster->node_managers_[i])) {
        return registered;
      }
      cluster->groups_.Kill(cluster->node_managers_[i]);
      if (absl::Status s = cluster->WriteNodeManagerConf(i); !s.ok()) return s;
      absl::StatusOr<pid_t> nm = cluster->StartNodeManager(i);
      if (!nm.ok()) return nm.status();
    }
  }
  return cluster;
}

absl::Status YarnCluster::WriteNodeManagerConf(int i) const {
  const std::string nm = absl::StrCat(local_dirs_root(), "/", i);
  std::map<std::string, std::string> nm_site = site_;
  nm_site.insert({
      {"yarn.nodemanager.hostname", "127.0.0.1"},
      {"yarn.nodemanager.address", absl::StrCat("127.0.0.1:", FreeLoopbackPort())},
      {"yarn.nodemanager.localizer.address", absl::StrCat("127.0.0.1:", FreeLoopbackPort())},
      {"yarn.nodemanager.webapp.address", absl::StrCat("127.0.0.1:", FreeLoopbackPort())},
      {"yarn.nodemanager.resource.memory-mb", absl::StrCat(options_.memory_mb_per_node)},
      {"yarn.nodemanager.resource.cpu-vcores", "8"},
      {"yarn.nodemanager.vmem-check-enabled", "false"},
      {"yarn.nodemanager.pmem-check-enabled", "false"},
      {"yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "100"},
      {"yarn.nodemanager.local-dirs", local_dir(i)},
      {"yarn.nodemanager.log-dirs", nm + "/logs"},
      {"yarn.nodemanager.recovery.enabled", "true"},
      {"yarn.nodemanager.recovery.dir", nm + "/recovery"},
      {"yarn.nodemanager.recovery.supervised", "true"},
      {"yarn.nodemanager.aux-services", "spark_shuffle"},
      {"yarn.nodemanager.aux-services.spark_shuffle.class", options_.aux_service_class},
      {"yarn.nodemanager.aux-services.spark_shuffle.classpath", options_.aux_service_jar},
  });
  for (const auto& [key, value] : options_.node_manager_site) nm_site[key] = value;
  for (const std::string& dir : {local_dir(i), nm + "/logs", nm + "/recovery"}) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", error.message()));
  }
  return WriteConfDir(nm + "/conf", options_.work_dir, nm_site);
}

absl::StatusOr<pid_t> YarnCluster::StartNodeManager(int i) {
  const std::string nm = absl::StrCat(local_dirs_root(), "/", i);
  std::vector<std::string> argv = DaemonArgv();
  argv.insert(argv.end(), {"-cp", absl::StrCat(nm, "/conf:", classpath_),
                           "org.apache.hadoop.yarn.server.nodemanager.NodeManager"});
  absl::StatusOr<pid_t> pid = groups_.Launch(argv, JavaEnv(), nm + "/nodemanager.log");
  if (pid.ok()) node_managers_[i] = *pid;
  return pid;
}

absl::Status YarnCluster::WaitForRegistration(int i, int times, absl::Duration timeout) const {
  const std::string log = absl::StrCat(local_dirs_root(), "/", i, "/nodemanager.log");
  const auto registered = [&] {
    return CountOf(ReadTextFile(log), "Registered with ResourceManager") >= times;
  };
  if (WaitFor([&] { return registered() || Exited(node_managers_[i]); }, timeout) && registered()) {
    return absl::OkStatus();
  }
  const std::string what = Exited(node_managers_[i]) ? "exited before it registered"
                                                     : absl::StrCat("did not register in ",
                                                                    absl::FormatDuration(timeout));
  return absl::DeadlineExceededError(
      absl::StrCat("NodeManager ", i, " ", what, "; its log: ", log, "\n", DiagnosticLogs()));
}

absl::Status YarnCluster::RestartNodeManager(int i) {
  const std::string log = absl::StrCat(local_dirs_root(), "/", i, "/nodemanager.log");
  const int registered = CountOf(ReadTextFile(log), "Registered with ResourceManager");
  // Only the NodeManager's JVM: its containers are process groups of their own, and a
  // supervised NodeManager leaves them running for the next one to recover.
  const pid_t old = node_managers_[i];
  ::kill(old, SIGTERM);
  if (!ProcessGroups::WaitForExit(old, absl::Now() + absl::Seconds(30)).has_value()) {
    ::kill(old, SIGKILL);
    (void)ProcessGroups::WaitForExit(old, absl::InfiniteFuture());
  }
  groups_.Kill(old);
  absl::StatusOr<pid_t> pid = StartNodeManager(i);
  if (!pid.ok()) return pid.status();
  return WaitForRegistration(i, registered + 1, absl::Seconds(120));
}

YarnCluster::~YarnCluster() {
  // The NodeManagers first (they are supervised: they leave their containers running),
  // then every container: its processes run in sessions of their own beneath a local dir.
  for (const pid_t nm : node_managers_) {
    if (nm > 0) groups_.Kill(nm);
  }
  KillContainers();
  // The daemons' logs outlive the cluster in the test's outputs (Bazel keeps them in
  // bazel-testlogs/<test>/test.outputs), for the failure at hand.
  if (const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
      outputs != nullptr && *outputs != '\0') {
    static int clusters = 0;
    const std::string dir = absl::StrCat(outputs, "/yarn", ++clusters);
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    std::filesystem::copy_file(options_.work_dir + "/resourcemanager.log",
                               dir + "/resourcemanager.log", error);
    for (int i = 0; i < options_.node_managers; ++i) {
      std::filesystem::copy_file(absl::StrCat(local_dirs_root(), "/", i, "/nodemanager.log"),
                                 absl::StrCat(dir, "/nodemanager", i, ".log"), error);
      // The containers' stdout and stderr: the executors' own account of a failure.
      std::filesystem::copy(absl::StrCat(local_dirs_root(), "/", i, "/logs"),
                            absl::StrCat(dir, "/containers", i),
                            std::filesystem::copy_options::recursive, error);
    }
  }
}

void YarnCluster::KillContainers() const {
  for (int round = 0; round < 50; ++round) {
    int found = 0;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(entry.path().filename().string(), &pid) || pid == ::getpid()) continue;
      std::string cmdline = ReadTextFile(absl::StrCat("/proc/", pid, "/cmdline"));
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      if (absl::StrContains(cmdline, local_dirs_root() + "/")) {
        ::kill(pid, SIGKILL);
        ++found;
      }
    }
    if (found == 0) return;
    ::usleep(100 * 1000);
  }
}

absl::StatusOr<YarnCluster::Submitted> YarnCluster::Submit(
    const std::string& script, const std::vector<std::string>& args,
    const std::map<std::string, std::string>& conf, absl::Duration timeout) {
  static int submissions = 0;
  const std::string log = absl::StrCat(options_.work_dir, "/submit", ++submissions, ".log");
  std::vector<std::string> argv = {options_.spark.home + "/bin/spark-submit", "--master", "yarn",
                                   "--deploy-mode", "client"};
  // The Spark jars are on this node at the same path as the driver's: no upload.
  std::map<std::string, std::string> all = {
      {"spark.yarn.jars", absl::StrCat("local:", options_.spark.home, "/jars/*")},
      {"spark.yarn.am.memory", "512m"},
      {"spark.yarn.am.extraJavaOptions", kTestJvmOptions},
      {"spark.yarn.report.interval", "5s"},
  };
  for (const auto& [key, value] : conf) all[key] = value;
  for (const auto& [key, value] : all) {
    argv.push_back("--conf");
    argv.push_back(absl::StrCat(key, "=", value));
  }
  argv.push_back(script);
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string spark_conf = options_.work_dir + "/spark-conf";
  std::error_code error;
  std::filesystem::create_directories(spark_conf, error);
  std::map<std::string, std::string> env = JavaEnv();
  env.insert({{"SPARK_HOME", options_.spark.home},
              {"SPARK_CONF_DIR", spark_conf},
              {"HADOOP_CONF_DIR", options_.work_dir + "/conf"},
              {"SPARK_LOCAL_IP", "127.0.0.1"},
              {"PYSPARK_PYTHON", options_.spark.python},
              {"PYSPARK_DRIVER_PYTHON", options_.spark.python}});
  return RunSparkSubmit(groups_, argv, env, log, timeout);
}

std::vector<std::string> YarnCluster::NodeManagerLogLines(absl::string_view containing) const {
  std::vector<std::string> logs;
  for (int i = 0; i < options_.node_managers; ++i) {
    logs.push_back(absl::StrCat(local_dirs_root(), "/", i, "/nodemanager.log"));
  }
  return LinesContaining(logs, containing);
}

int YarnCluster::NodeManagerOf(const std::string& container_id) const {
  for (int i = 0; i < options_.node_managers; ++i) {
    const std::string log =
        ReadTextFile(absl::StrCat(local_dirs_root(), "/", i, "/nodemanager.log"));
    if (absl::StrContains(log, absl::StrCat("Adding ", container_id, " to application"))) return i;
  }
  return -1;
}

std::vector<std::string> YarnCluster::ResourceManagerLogLines(absl::string_view containing) const {
  return LinesContaining({options_.work_dir + "/resourcemanager.log"}, containing);
}

std::vector<std::string> YarnCluster::ContainerLogs(const std::string& app) const {
  std::vector<std::string> paths;
  for (int i = 0; i < options_.node_managers; ++i) {
    std::error_code error;
    // logs/<application>/<container>/stderr
    const std::string dir = absl::StrCat(local_dirs_root(), "/", i, "/logs/", app);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, error)) {
      if (entry.path().filename() == "stderr") paths.push_back(entry.path().string());
    }
  }
  return paths;
}

std::vector<std::string> YarnCluster::ContainerLogLines(const std::string& app,
                                                        absl::string_view containing) const {
  return LinesContaining(ContainerLogs(app), containing);
}

std::string YarnCluster::DiagnosticLogs() const {
  std::string out;
  for (int i = 0; i < options_.node_managers; ++i) {
    const std::string nm = absl::StrCat(local_dirs_root(), "/", i);
    out += absl::StrCat("--- NodeManager ", i, "\n",
                        JvmFailureLines(ReadTextFile(nm + "/nodemanager.log"), 20));
    // logs/<application>/<container>/stderr: the newest container's.
    std::string newest;
    std::filesystem::file_time_type newest_time;
    std::error_code error;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(nm + "/logs", error)) {
      if (entry.path().filename() != "stderr") continue;
      const auto time = std::filesystem::last_write_time(entry.path(), error);
      if (newest.empty() || time > newest_time) {
        newest = entry.path().string();
        newest_time = time;
      }
    }
    if (!newest.empty())
      out += absl::StrCat("--- ", newest, "\n", JvmFailureLines(ReadTextFile(newest), 20));
  }
  return out;
}

}  // namespace ferry::testing
