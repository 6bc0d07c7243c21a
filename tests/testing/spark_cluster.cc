#include "tests/testing/spark_cluster.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/testing/http_get.h"
#include "tests/testing/process_groups.h"
#include "tests/testing/wait_for.h"

namespace ferry::testing {

namespace {

// "aliveworkers" : N of the master's JSON page, or -1.
int AliveWorkers(absl::string_view page) {
  const size_t key = page.find("\"aliveworkers\"");
  if (key == absl::string_view::npos) return -1;
  absl::string_view rest = page.substr(key + std::strlen("\"aliveworkers\""));
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (!absl::ConsumePrefix(&rest, ":")) return -1;
  rest = absl::StripLeadingAsciiWhitespace(rest);
  const size_t end = rest.find_first_not_of("0123456789");
  int n = -1;
  return absl::SimpleAtoi(rest.substr(0, end), &n) ? n : -1;
}

}  // namespace

std::vector<SparkDistribution> InstalledSparks(std::string* why) {
  const char* env = std::getenv("FERRY_SPARK_ROOT");
  const std::string root = env != nullptr && *env != '\0' ? env : "/opt/ferry-spark";
  std::vector<SparkDistribution> found;
  if (DIR* dir = ::opendir(root.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.empty() || name[0] == '.') continue;
      const std::string venv = absl::StrCat(root, "/", name);
      const std::string home(absl::StripAsciiWhitespace(ReadTextFile(venv + "/SPARK_HOME")));
      if (home.empty() || ::access((home + "/bin/spark-submit").c_str(), X_OK) != 0) continue;
      if (const char* only = std::getenv("FERRY_SPARK_VERSIONS");
          only != nullptr && *only != '\0') {
        const std::vector<std::string> versions = absl::StrSplit(only, ',');
        if (std::find(versions.begin(), versions.end(), name) == versions.end()) continue;
      }
      found.push_back({name, home, venv + "/bin/python3"});
    }
    ::closedir(dir);
  }
  std::sort(found.begin(), found.end(), [](const SparkDistribution& a, const SparkDistribution& b) {
    return a.version < b.version;
  });
  if (why != nullptr && found.empty()) {
    *why = absl::StrCat("no Spark distribution under ", root, " (scripts/setup installs them)");
  }
  if (why != nullptr && JavaHome().empty()) *why = "no Java runtime (scripts/setup installs one)";
  if (JavaHome().empty()) found.clear();
  return found;
}

std::map<std::string, std::string> SparkCluster::DaemonEnv() const {
  // The master and the drivers bind options_.host: with workers on other hosts, the
  // address those reach.
  return {{"JAVA_HOME", JavaHome()},
          {"SPARK_HOME", options_.spark.home},
          {"SPARK_CONF_DIR", conf_dir_},
          {"SPARK_LOCAL_IP", options_.host},
          {"SPARK_LOG_DIR", options_.work_dir},
          {"PYSPARK_PYTHON", options_.spark.python},
          {"PYSPARK_DRIVER_PYTHON", options_.spark.python},
          {"SPARK_DAEMON_JAVA_OPTS", kTestJvmOptions}};
}

absl::StatusOr<std::unique_ptr<SparkCluster>> SparkCluster::Start(const Options& options) {
  if (options.worker_netns.size() != options.worker_hosts.size() ||
      (!options.worker_netns.empty() &&
       options.worker_netns.size() != static_cast<size_t>(options.workers))) {
    return absl::InvalidArgumentError("one namespace and one address per worker, or none");
  }
  std::unique_ptr<SparkCluster> cluster(new SparkCluster(options));
  cluster->conf_dir_ = options.work_dir + "/conf";
  if (::mkdir(cluster->conf_dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", cluster->conf_dir_));
  }
  if (!options.auth_secret.empty() || !options.defaults.empty()) {
    std::ofstream defaults(cluster->conf_dir_ + "/spark-defaults.conf");
    if (!options.auth_secret.empty()) {
      defaults << "spark.authenticate true\nspark.authenticate.secret " << options.auth_secret
               << "\n";
    }
    for (const auto& [key, value] : options.defaults) defaults << key << " " << value << "\n";
    if (!defaults.flush()) return absl::InternalError("cannot write spark-defaults.conf");
  }
  const std::string spark_class = options.spark.home + "/bin/spark-class";
  // The master binds ports of its choosing and names them in its log: a port picked free
  // here could be taken by another process (another test's JVM) before the master binds
  // it, and the master would then move to the next one.
  const std::string master_log = options.work_dir + "/master.log";
  absl::StatusOr<pid_t> master =
      cluster->groups_.Launch({spark_class, "org.apache.spark.deploy.master.Master", "--host",
                               options.host, "--port", "0", "--webui-port", "0"},
                              cluster->DaemonEnv(), master_log);
  if (!master.ok()) return master.status();
  if (!WaitFor(
          [&] {
            const std::string log = ReadTextFile(master_log);
            const std::string port = PortAfter(log, "Starting Spark master at spark://");
            if (port.empty()) return false;
            cluster->master_url_ = absl::StrCat("spark://", options.host, ":", port);
            uint32_t ui = 0;
            if (!absl::SimpleAtoi(PortAfter(log, "and started at http://"), &ui) || ui == 0 ||
                ui > 65535) {
              return false;
            }
            cluster->master_ui_port_ = static_cast<uint16_t>(ui);
            return true;
          },
          absl::Seconds(120))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "Spark ", options.spark.version,
        ": its master named no ports in 2m: ", ReadTextFile(master_log).substr(0, 4000)));
  }
  for (int i = 0; i < options.workers; ++i) {
    const std::string local = absl::StrCat(options.local_dir_root, "/worker", i);
    const std::string work = absl::StrCat(options.work_dir, "/work", i);
    for (const std::string& dir : {local, work}) {
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", dir));
      }
    }
    std::map<std::string, std::string> env = cluster->DaemonEnv();
    env["SPARK_LOCAL_DIRS"] = local;
    // The workers start no shuffle service of their own: the node's is ferry_server or
    // StartSparkShuffleService's.
    env["SPARK_WORKER_OPTS"] = "-Dspark.shuffle.service.enabled=false";
    const bool on_host = !options.worker_netns.empty();
    const std::string host = on_host ? options.worker_hosts[i] : options.host;
    // The executors a worker starts inherit its environment: they bind its address too.
    env["SPARK_LOCAL_IP"] = host;
    absl::StatusOr<pid_t> worker = cluster->groups_.Launch(
        {spark_class, "org.apache.spark.deploy.worker.Worker", cluster->master_url_, "--host", host,
         "--cores", absl::StrCat(options.cores_per_worker), "--memory", "1g", "--work-dir", work,
         "--webui-port", "0"},
        env, absl::StrCat(options.work_dir, "/worker", i, ".log"),
        on_host ? options.worker_netns[i] : "");
    if (!worker.ok()) return worker.status();
  }
  if (absl::Status up = cluster->WaitForWorkers(absl::Seconds(120)); !up.ok()) return up;
  return cluster;
}

std::string SparkCluster::PortAfter(const std::string& log, absl::string_view prefix) {
  const size_t at = log.find(prefix.data(), 0, prefix.size());
  if (at == std::string::npos) return "";
  const size_t end = log.find_first_not_of(
      "0123456789.:abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOPQRSTUVWXYZ", at + prefix.size());
  const std::string address = log.substr(at + prefix.size(), end - at - prefix.size());
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(colon + 1);
}

absl::Status SparkCluster::WaitForWorkers(absl::Duration timeout) const {
  std::string last = "no answer";
  const bool up = WaitFor(
      [&] {
        absl::StatusOr<std::string> page = HttpGet(master_ui_port_, "/json/", options_.host);
        const int alive = page.ok() ? AliveWorkers(*page) : -1;
        if (alive >= 0) {
          last = absl::StrCat(alive, " workers alive");
        } else if (!page.ok()) {
          last = std::string(page.status().message());
        }
        return alive >= options_.workers;
      },
      timeout);
  if (up) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      "Spark ", options_.spark.version, ": ", options_.workers, " workers did not register in ",
      absl::FormatDuration(timeout), " (", last, "); logs in ", options_.work_dir));
}

// groups_ kills the processes, last started first: drivers and shuffle services, then
// workers (and their executors), then the master.
SparkCluster::~SparkCluster() = default;

absl::Status SparkCluster::StartSparkShuffleService(
    uint16_t port, const std::map<std::string, std::string>& conf) {
  std::map<std::string, std::string> env = DaemonEnv();
  env["SPARK_SHUFFLE_OPTS"] = absl::StrCat("-Dspark.shuffle.service.port=", port);
  for (const auto& [key, value] : conf)
    absl::StrAppend(&env["SPARK_SHUFFLE_OPTS"], " -D", key, "=", value);
  // Spark's service (3.5.x since 3.5.1 or so) refuses executors whose local dirs are not
  // beneath its own, as ferry_server's --spark-dir-roots does.
  env["SPARK_LOCAL_DIRS"] = options_.local_dir_root;
  absl::StatusOr<pid_t> pid = groups_.Launch(
      {options_.spark.home + "/bin/spark-class", "org.apache.spark.deploy.ExternalShuffleService"},
      env, options_.work_dir + "/shuffle-service.log");
  if (!pid.ok()) return pid.status();
  services_.push_back(*pid);
  bool exited = false;
  const bool listening = WaitFor(
      [&] {
        int status = 0;
        exited = ::waitpid(*pid, &status, WNOHANG) == *pid;
        return exited || AcceptsOnLoopback(port);
      },
      absl::Seconds(60));
  if (listening && !exited) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("Spark's shuffle service did not listen on ", port, ": ",
                   ReadTextFile(options_.work_dir + "/shuffle-service.log").substr(0, 4000)));
}

void SparkCluster::StopSparkShuffleServices() {
  for (const pid_t service : services_) {
    groups_.Kill(service);
  }
  services_.clear();
}

std::vector<std::string> SparkCluster::ExecutorLogs() const {
  // <work>/work<i>/<app>/<executor>/stderr, oldest first.
  std::vector<std::pair<int64_t, std::string>> found;
  for (int i = 0; i < options_.workers; ++i) {
    const std::string work = absl::StrCat(options_.work_dir, "/work", i);
    DIR* apps = ::opendir(work.c_str());
    if (apps == nullptr) continue;
    while (const dirent* app = ::readdir(apps)) {
      if (app->d_name[0] == '.') continue;
      const std::string app_dir = absl::StrCat(work, "/", app->d_name);
      DIR* executors = ::opendir(app_dir.c_str());
      if (executors == nullptr) continue;
      while (const dirent* executor = ::readdir(executors)) {
        if (executor->d_name[0] == '.') continue;
        const std::string path = absl::StrCat(app_dir, "/", executor->d_name, "/stderr");
        struct stat st;
        if (::stat(path.c_str(), &st) != 0) continue;
        found.emplace_back(int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, path);
      }
      ::closedir(executors);
    }
    ::closedir(apps);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [mtime, path] : found) paths.push_back(std::move(path));
  return paths;
}

std::vector<std::string> SparkCluster::ExecutorLogLines(absl::string_view containing) const {
  return LinesContaining(ExecutorLogs(), containing);
}

std::string SparkCluster::DiagnosticLogs() const {
  // The last lines that say what failed, without Java's stack frames.
  std::string out;
  const std::string service = ReadTextFile(options_.work_dir + "/shuffle-service.log");
  if (!service.empty()) out += "--- shuffle service log\n" + JvmFailureLines(service, 30);
  const std::vector<std::string> executors = ExecutorLogs();
  if (!executors.empty()) {
    out += "\n--- " + executors.back() + "\n" + JvmFailureLines(ReadTextFile(executors.back()), 30);
  }
  return out;
}

absl::StatusOr<SparkCluster::Submitted> SparkCluster::Submit(
    const std::string& script, const std::vector<std::string>& args,
    const std::map<std::string, std::string>& conf, absl::Duration timeout) {
  static int submissions = 0;
  const std::string log = absl::StrCat(options_.work_dir, "/submit", ++submissions, ".log");
  std::vector<std::string> argv = {options_.spark.home + "/bin/spark-submit", "--master",
                                   master_url_};
  for (const auto& [key, value] : conf) {
    argv.push_back("--conf");
    argv.push_back(absl::StrCat(key, "=", value));
  }
  argv.push_back(script);
  argv.insert(argv.end(), args.begin(), args.end());
  return RunSparkSubmit(groups_, argv, DaemonEnv(), log, timeout);
}

absl::StatusOr<SparkCluster::Submitted> RunSparkSubmit(
    ProcessGroups& groups, const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env, const std::string& log, absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("no spark-submit to run");
  // The application's JVMs with kTestJvmOptions: Spark puts its default options before
  // any extraJavaOptions `argv` gives.
  std::vector<std::string> with_options = {
      argv[0], "--conf", absl::StrCat("spark.driver.defaultJavaOptions=", kTestJvmOptions),
      "--conf", absl::StrCat("spark.executor.defaultJavaOptions=", kTestJvmOptions)};
  with_options.insert(with_options.end(), argv.begin() + 1, argv.end());
  absl::StatusOr<pid_t> pid = groups.Launch(with_options, env, log);
  if (!pid.ok()) return pid.status();
  SparkCluster::Submitted done;
  if (const std::optional<int> status = ProcessGroups::WaitForExit(*pid, absl::Now() + timeout)) {
    done.exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }
  // What the driver left behind (its Python workers) goes with it.
  groups.Kill(*pid);
  done.output = ReadTextFile(log);
  for (absl::string_view line : absl::StrSplit(done.output, '\n')) {
    if (absl::ConsumePrefix(&line, "RESULT ")) done.results.emplace_back(line);
  }
  return done;
}

}  // namespace ferry::testing
