#include "server/spark/spark_front_door.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dir_entries.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "server/spark/spark_protocol.h"

namespace ferry {

namespace {

// In --state-dir: the finalized merges of push-based shuffle (PushMerger::LoadState).
constexpr char kPushStateFile[] = "spark-push-finalized";
// The merges being written, from a server handing over to the one taking over.
constexpr char kPushHandOverFile[] = "spark-push-open.hand-over";

// The roots: --spark-dir-roots, and on YARN (`apps`, from the NodeManager) the
// NodeManager's local dirs as it names them (so as its executors name their dirs).
// FAILED_PRECONDITION when there are none.
absl::StatusOr<std::vector<std::string>> Roots(std::vector<std::string> roots,
                                               const HandedOffApps* apps) {
  if (apps == nullptr || !apps->options().yarn()) return roots;
  absl::StatusOr<std::vector<std::string>> dirs = apps->NodeManagerLocalDirs();
  if (!dirs.ok()) {
    if (roots.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no --spark-dir-roots, and the NodeManager's local dirs are not known (start the "
          "NodeManager with Ferry's aux service first, or give --spark-dir-roots): ",
          dirs.status().message()));
    }
    LOG(WARNING) << "the NodeManager's local dirs are not known; serving --spark-dir-roots "
                 << "alone: " << dirs.status();
    return roots;
  }
  for (std::string& dir : *dirs) {
    if (std::find(roots.begin(), roots.end(), dir) == roots.end()) roots.push_back(std::move(dir));
  }
  return roots;
}

}  // namespace

absl::Status SparkFrontDoor::Options::Validate() const {
  if (!enabled() && (!auth.secret_file.empty() || !auth.secrets_dir.empty())) {
    return absl::InvalidArgumentError(
        "--spark-auth-secret-file and --spark-auth-secrets-dir are for the Spark front door "
        "(--spark-address)");
  }
  if (!enabled() && (apps.enabled() || auth.yarn || auth.apps)) {
    return absl::InvalidArgumentError(
        "--spark-yarn-dir, --spark-apps-dir, --spark-auth-yarn and --spark-auth-apps are for "
        "the Spark front door (--spark-address)");
  }
  FERRY_RETURN_IF_ERROR(apps.Validate());
  if (auth.yarn && apps.yarn_dir.empty()) {
    return absl::InvalidArgumentError("--spark-auth-yarn needs --spark-yarn-dir");
  }
  if (auth.apps && apps.apps_dir.empty()) {
    return absl::InvalidArgumentError("--spark-auth-apps needs --spark-apps-dir");
  }
  if (!enabled() && tls.enabled()) {
    return absl::InvalidArgumentError(
        "--spark-tls-cert and --spark-tls-key are for the Spark front door (--spark-address)");
  }
  if (enabled() && executors.dir_roots.empty() && !apps.yarn()) {
    return absl::InvalidArgumentError(
        "the Spark front door needs the roots executors' local dirs may lie beneath "
        "(--spark-dir-roots, or on YARN the NodeManager's, from --spark-yarn-dir)");
  }
  FERRY_RETURN_IF_ERROR(executors.Validate());
  FERRY_RETURN_IF_ERROR(service.Validate());
  FERRY_RETURN_IF_ERROR(push.Validate());
  return blocking.Validate();
}

absl::StatusOr<std::unique_ptr<SparkFrontDoor>> SparkFrontDoor::Open(const Options& options,
                                                                     BlockStore* store,
                                                                     const Clock& clock,
                                                                     bool taking_over) {
  std::unique_ptr<SparkFrontDoor> door(new SparkFrontDoor(options, store));
  door->executors_options_ = options.executors;
  ExecutorRegistry::Options& executors = door->executors_options_;
  if (options.apps.enabled()) {
    FERRY_ASSIGN_OR_RETURN(door->apps_, HandedOffApps::Open(options.apps, clock));
    // An application that asked for no recovery is kept out of the state file, as
    // Spark's service keeps it out of its recovery DB; one that ended registers no
    // executor; and on YARN an application's dirs are those YARN made for it. Each reads
    // what HandedOffApps holds in memory.
    executors.kept_across_restarts = [apps = door->apps_.get()](absl::string_view app) {
      absl::StatusOr<HandedOffApps::ServiceData> data = apps->Find(app);
      return !data.ok() || !data->recovery_disabled;
    };
    executors.ended = [apps = door->apps_.get()](absl::string_view app) {
      return apps->Ended(app);
    };
    executors.yarn_layout = options.apps.yarn();
  }
  FERRY_ASSIGN_OR_RETURN(executors.dir_roots,
                         Roots(options.executors.dir_roots, door->apps_.get()));
  executors.app_gone = [door = door.get()](const std::string& app) { door->ApplicationGone(app); };
  FERRY_ASSIGN_OR_RETURN(door->executors_, ExecutorRegistry::Open(executors, clock));
  door->pool_ = std::make_unique<BlockingPool>(options.blocking);
  door->service_ = std::make_unique<SparkShuffleService>(
      options.service, store, door->executors_.get(), door->pool_.get(), clock);
  if (options.push.enabled) {
    PushMerger::Options push = options.push;
    if (!options.executors.state_dir.empty()) {
      push.state_file = absl::StrCat(options.executors.state_dir, "/", kPushStateFile);
    }
    door->push_ =
        std::make_unique<PushService>(push, door->pool_.get(), options.service.blocking_timeout);
    FERRY_RETURN_IF_ERROR(door->push_->LoadState());
    door->service_->EnablePush(door->push_.get());
    // A restarted server: the registrations kept give the merges their dirs again, and
    // the merges finalized before the restart are served.
    for (const spark::RegisterExecutor& registration : door->executors_->Registrations()) {
      if (absl::Status s = door->service_->RegisterPush(registration); !s.ok()) {
        LOG(WARNING) << "push-based shuffle of application " << registration.app_id
                     << " after the restart: " << s;
      }
    }
    // Merges of applications no registration names any more ended with them.
    door->push_->ForgetUnclaimed();
    if (const std::string open = door->PushHandOverFile(); !open.empty()) {
      if (!taking_over) {
        ::unlink(open.c_str());
      } else if (absl::StatusOr<size_t> taken = door->push_->TakeOpen(open); !taken.ok()) {
        LOG(WARNING) << "push-based shuffle: the merges being written by the server taken over "
                        "from are read unmerged: "
                     << taken.status();
      } else if (*taken > 0) {
        LOG(INFO) << "push-based shuffle: going on with " << *taken
                  << " merged partitions the server taken over from was writing";
      }
    }
  }
  FERRY_ASSIGN_OR_RETURN(door->secrets_, SparkSecrets::Load(options.auth, door->apps_.get()));
  if (options.tls.enabled()) {
    FERRY_ASSIGN_OR_RETURN(door->tls_, SparkTls::Load(options.tls));
  }
  return door;
}

absl::StatusOr<std::string> SparkFrontDoor::Check(const Options& options) {
  std::string out;
  ExecutorRegistry::Options executors = options.executors;
  std::unique_ptr<HandedOffApps> apps;
  if (options.apps.enabled()) {
    FERRY_ASSIGN_OR_RETURN(apps, HandedOffApps::Open(options.apps));
    absl::StrAppend(&out, options.apps.yarn() ? "YARN" : "node agent",
                    " hand-off dir: ", options.apps.dir(), "\n");
  }
  FERRY_ASSIGN_OR_RETURN(executors.dir_roots, Roots(executors.dir_roots, apps.get()));
  // The state files are the running server's: read as it would read them, never written.
  const std::string state_dir = executors.state_dir;
  executors.read_only = true;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<ExecutorRegistry> registry,
                         ExecutorRegistry::Open(executors));
  absl::StrAppend(&out, "Spark dir roots: ", absl::StrJoin(executors.dir_roots, ","), "\n");
  if (!state_dir.empty()) {
    absl::StrAppend(&out, "Spark executors kept: ", registry->size(), "\n");
    if (options.push.enabled) {
      FERRY_ASSIGN_OR_RETURN(std::string kept,
                             PushMerger::CheckState(absl::StrCat(state_dir, "/", kPushStateFile)));
      absl::StrAppend(&out, "push-based shuffle state: ", kept, "\n");
    }
  }
  if (!state_dir.empty()) {
    FERRY_RETURN_IF_ERROR(CheckDirectory("--state-dir", state_dir, W_OK | X_OK));
    absl::StrAppend(&out, "state dir: ", state_dir, "\n");
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<SparkSecrets> secrets,
                         SparkSecrets::Load(options.auth, apps.get()));
  absl::StrAppend(&out, "spark.authenticate: ", secrets->required() ? "required" : "off", "\n");
  if (options.tls.enabled()) {
    FERRY_RETURN_IF_ERROR(SparkTls::Load(options.tls).status());
    absl::StrAppend(&out, "Spark TLS: on\n");
  }
  return out;
}

SparkFrontDoor::~SparkFrontDoor() = default;

std::string SparkFrontDoor::PushHandOverFile() const {
  if (push_ == nullptr || options_.executors.state_dir.empty()) return "";
  return absl::StrCat(options_.executors.state_dir, "/", kPushHandOverFile);
}

absl::Status SparkFrontDoor::PrepareHandOver() {
  const std::string open = PushHandOverFile();
  return open.empty() ? absl::OkStatus() : push_->HandOverOpen(open);
}

void SparkFrontDoor::ResumeAfterHandOver() {
  if (const std::string open = PushHandOverFile(); !open.empty()) ::unlink(open.c_str());
  executors_->RewriteBeforeNextChange();
  if (push_ != nullptr) push_->RewriteStateBeforeNextChange();
}

absl::StatusOr<DataServer::Listener> SparkFrontDoor::Listener(const ConnectionOptions* connection) {
  FERRY_ASSIGN_OR_RETURN(HostPort address, ParseHostPort(options_.address));
  DataServer::Listener door;
  door.host = address.host;
  door.port = address.port;
  door.origin = "--spark-address";
  door.name = "spark";
  // A connection over the limits is closed untold: Spark's client retries that.
  door.handler = [this, connection](UniqueFd socket, ConnectionControl& control) {
    ServeSparkConnection(std::move(socket), *service_, *secrets_, tls_.get(), *connection, control);
  };
  return door;
}

void SparkFrontDoor::Sweep() {
  if (apps_ != nullptr) ForgetEndedApps();
  // Applications that ended without a RemoveSparkApp: their dirs were deleted.
  if (absl::StatusOr<size_t> forgot = executors_->ForgetVanished(); !forgot.ok()) {
    LOG(WARNING) << "forgetting Spark executors whose dirs are gone: " << forgot.status();
  }
}

void SparkFrontDoor::ForgetEndedApps() {
  const bool yarn = options_.apps.yarn();
  const char* const who = yarn ? "YARN application " : "application ";
  // Each ended application once: its marker is the writer's to delete.
  for (const std::string& app : apps_->PendingEnded()) {
    // On YARN the NodeManager deletes an application's dirs; elsewhere no one else does.
    absl::StatusOr<ExecutorRegistry::Removal> removed =
        executors_->Remove(app, /*exec_id=*/"", /*delete_local_dirs=*/!yarn);
    if (!removed.ok()) {
      // Left pending: the next sweep tries again.
      LOG(WARNING) << "forgetting " << who << app << ", which ended: " << removed.status();
      return;
    }
    // Its cached map outputs and its merges went with its last registration
    // (ApplicationGone).
    apps_->Handled(app);
    for (const std::string& error : removed->errors) {
      LOG(WARNING) << who << app << " ended: " << error;
    }
    // The NodeManager tells every aux service of every application's end, Spark's or not.
    if (removed->executors > 0) {
      LOG(INFO) << who << app << " ended: forgot its " << removed->executors
                << " executors' registrations"
                << (yarn ? "" : absl::StrCat(" and deleted ", removed->dirs_deleted, " dirs"));
    }
  }
}

absl::StatusOr<SparkApps::Removal> SparkFrontDoor::RemoveApp(absl::string_view app_id,
                                                             absl::string_view exec_id,
                                                             bool delete_local_dirs) {
  FERRY_ASSIGN_OR_RETURN(ExecutorRegistry::Removal removed,
                         executors_->Remove(app_id, exec_id, delete_local_dirs));
  // Its cached map outputs (an application's also went with its last registration:
  // ApplicationGone).
  store_->DropSpark(app_id, exec_id);
  return Removal{removed.executors, removed.dirs_deleted, std::move(removed.errors),
                 std::move(removed.kept)};
}

SparkFrontDoor::Descriptors SparkFrontDoor::DescriptorsOf(const Options& options) {
  Descriptors needs;
  if (!options.enabled() || !options.push.enabled) return needs;
  needs.per_connection = 1;
  needs.per_unit = PushMerger::kFilesPerPartition;
  needs.units = options.push.max_open_partitions;
  needs.units_are_default =
      options.push.max_open_partitions == PushMerger::Options().max_open_partitions;
  needs.what = "merged partitions";
  needs.flag = "--spark-push-max-open-partitions";
  return needs;
}

void SparkFrontDoor::FitDescriptors(uint64_t units, Options* options) {
  if (options->push.enabled) options->push.max_open_partitions = units;
}

void SparkFrontDoor::ApplicationGone(const std::string& app_id) {
  store_->DropSpark(app_id, "");
  // The merger lets go of the partitions it holds open and deletes the merges' files
  // (on YARN, YARN deletes the merge dirs with the application's too).
  if (push_ != nullptr) push_->ApplicationEnded(app_id);
}

void SparkFrontDoor::AppendMetrics(std::vector<MetricFamilySamples>* out) const {
  executors_->AppendMetrics(out);
  service_->AppendMetrics(out);
  FERRY_APPEND_READS(FERRY_SPARK_FRONT_DOOR_STATS, out);
  if (tls_ != nullptr) tls_->AppendMetrics(out);
  secrets_->AppendMetrics(out);
  if (push_ != nullptr) push_->AppendMetrics(out);
}

std::string SparkFrontDoor::Describe() const {
  // Where secrets are looked up, in order.
  std::vector<std::string> secrets;
  if (options_.auth.yarn || options_.auth.apps) {
    secrets.push_back(absl::StrCat(options_.apps.yarn() ? "YARN's, " : "the node agent's, ",
                                   options_.apps.dir(), "/apps/<app>"));
  }
  if (!options_.auth.secrets_dir.empty()) {
    secrets.push_back(absl::StrCat(options_.auth.secrets_dir, "/<app>"));
  }
  if (!options_.auth.secret_file.empty()) secrets.push_back(options_.auth.secret_file);
  return absl::StrCat(
      "Spark front door: executors' local dirs beneath ", absl::StrJoin(roots(), ","),
      !options_.apps.enabled() ? ""
                               : absl::StrCat(options_.apps.yarn() ? " (YARN applications from "
                                                                   : " (applications from ",
                                              options_.apps.dir(), ")"),
      ", ", executors_->size(), " executors registered",
      options_.executors.state_dir.empty()
          ? " (registrations kept in memory only)"
          : absl::StrCat(" (kept in ", options_.executors.state_dir, ")"),
      ", spark.authenticate ",
      secrets.empty()
          ? "off"
          : absl::StrCat("required (SASL DIGEST-MD5 with QOP auth, or AuthEngine v",
                         options_.auth.auth_engine_v1 ? "1/2" : "2", " with AES-CTR; secrets from ",
                         absl::StrJoin(secrets, ", else "), ")"),
      tls_ != nullptr ? ", TLS" : "");
}

}  // namespace ferry
