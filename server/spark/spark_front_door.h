// SparkFrontDoor: Spark's external shuffle service on the data plane's threads, as one
// component: the executors' registry, the service that answers them, spark.authenticate's
// secrets, TLS, YARN's applications and the blocking pool behind them. The server holds
// one (or none, without --spark-address), as it holds its data server: it opens it, runs
// its Listener() on the data plane, sweeps it, collects its metrics and logs its
// Describe(); it knows nothing else of Spark. docs/protocol.md says what it answers.
#ifndef FERRY_SERVER_SPARK_SPARK_FRONT_DOOR_H_
#define FERRY_SERVER_SPARK_SPARK_FRONT_DOOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/io/blocking_pool.h"
#include "server/base/clock.h"
#include "server/control/spark_apps.h"
#include "server/dataplane/connection_core.h"
#include "server/dataplane/data_server.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/spark/apps/handed_off_apps.h"
#include "server/spark/auth/spark_auth.h"
#include "server/spark/auth/spark_tls.h"
#include "server/spark/executors/spark_executors.h"
#include "server/spark/push/push_service.h"
#include "server/spark/spark_service.h"
#include "server/storage/block_store.h"

namespace ferry {

// The front door's own metric families (docs/operations.md); its parts append theirs.
#define FERRY_SPARK_FRONT_DOOR_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY) \
  READ("ferry_blocking_jobs_queued", "Blocking jobs waiting for a worker.", kGauge, pool_->queued())

class SparkFrontDoor : public SparkApps {
 public:
  struct Options {
    // host:port for Spark's shuffle protocol (Spark's default port is 7337); empty: off.
    std::string address;
    // The registered executors: the roots their local dirs must lie beneath (or, on
    // YARN, the NodeManager's), the state dir that keeps them across restarts, bounds.
    ExecutorRegistry::Options executors;
    SparkShuffleService::Options service;
    // spark.authenticate: where applications' secrets are; none: no authentication.
    SparkSecrets::Options auth;
    // spark.ssl.rpc.enabled: the certificate and key; both empty: no TLS.
    SparkTls::Options tls;
    // Where YARN's NodeManager aux service, or Kubernetes' node agent, hands over
    // applications (their secrets and ends; YARN's local dirs). Ended applications are
    // forgotten at each sweep, and off YARN their executors' dirs deleted.
    HandedOffApps::Options apps;
    // Threads for the blocking work (index loads, file opens, deletes, fsyncs).
    BlockingPool::Options blocking;
    // Push-based shuffle's merges.
    PushMerger::Options push;

    bool enabled() const { return !address.empty(); }
    // Each part's Validate(), and the rules between the flags: Spark's flags without
    // --spark-address, --spark-auth-yarn without --spark-yarn-dir (and
    // --spark-auth-apps without --spark-apps-dir), no roots.
    // INVALID_ARGUMENT naming the flag.
    absl::Status Validate() const;
  };

  // Opens every part: the hand-off dir, the roots, the registry (its state file
  // read), the secrets, the certificate. `store` must outlive the front door.
  // `taking_over`: a server handing over left the merges it was writing in the state
  // dir (PrepareHandOver), which this one goes on with; otherwise such a file (of one
  // killed mid-hand-over) is deleted unread.
  static absl::StatusOr<std::unique_ptr<SparkFrontDoor>> Open(const Options& options,
                                                              BlockStore* store, const Clock& clock,
                                                              bool taking_over = false);
  // What --check-config prints of it, after opening what Open() opens but the state
  // file (the running server's: only its dir is looked at).
  static absl::StatusOr<std::string> Check(const Options& options);

  SparkFrontDoor(const SparkFrontDoor&) = delete;
  SparkFrontDoor& operator=(const SparkFrontDoor&) = delete;
  ~SparkFrontDoor();

  // The listener the data server runs for it. `connection` must outlive the server.
  absl::StatusOr<DataServer::Listener> Listener(const ConnectionOptions* connection);
  // Forgets the applications that ended and the executors whose dirs are gone.
  void Sweep();
  // A hand-over, once no connection is served: leaves the merges being written in the
  // state dir for the server taking over (PushMerger::HandOverOpen). An error means they
  // are not carried over (their pushes are read unmerged).
  absl::Status PrepareHandOver();
  // A hand-over failed after the new server read the state files: they are this server's
  // again, each rewritten from memory before its next change.
  void ResumeAfterHandOver();
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;
  // One line for the start-up log: roots, registrations, where secrets come from.
  std::string Describe() const;

  // SparkApps: for the control plane.
  absl::StatusOr<std::shared_ptr<const spark::ExecutorDirs>> ExecutorDirs(
      absl::string_view app_id, absl::string_view exec_id) const override {
    return executors_->FindDirs(app_id, exec_id);
  }
  absl::StatusOr<Removal> RemoveApp(absl::string_view app_id, absl::string_view exec_id,
                                    bool delete_local_dirs) override;

  // The descriptors its parts hold beyond a connection's socket, for the server's
  // descriptor plan: one more per connection with push-based shuffle (a pushed block
  // waiting in a file), and the merged partitions being written, three files each, of
  // which it wants options.push.max_open_partitions (`flag`). None when it is off.
  struct Descriptors {
    uint64_t per_connection = 0;
    uint64_t per_unit = 0;
    uint64_t units = 0;
    bool units_are_default = true;
    std::string what;  // "merged partitions", for the start-up log
    std::string flag;  // the setting `units` is
  };
  static Descriptors DescriptorsOf(const Options& options);
  // `options` with what it wants lowered to `units`.
  static void FitDescriptors(uint64_t units, Options* options);

  ExecutorRegistry* executors() { return executors_.get(); }
  const SparkSecrets* secrets() const { return secrets_.get(); }
  const SparkShuffleService* service() const { return service_.get(); }
  bool tls() const { return tls_ != nullptr; }
  // The roots executors' dirs lie beneath, as served (with the NodeManager's).
  const std::vector<std::string>& roots() const { return executors_options_.dir_roots; }

 private:
  SparkFrontDoor(const Options& options, BlockStore* store) : options_(options), store_(store) {}
  // Forgets the applications whose end was handed over; off YARN (where the NodeManager
  // deletes an application's dirs) deletes their executors' dirs too.
  void ForgetEndedApps();
  // An application's last registration is forgotten (its end, from whatever source):
  // its cached map outputs and its merges go.
  void ApplicationGone(const std::string& app_id);
  // Where a hand-over leaves the merges being written; empty without push-based shuffle
  // or a state dir.
  std::string PushHandOverFile() const;

  const Options options_;
  BlockStore* const store_;
  ExecutorRegistry::Options executors_options_;
  // The data plane's threads use these: the server stops them before it lets go of
  // the front door.
  // Null without a hand-off dir; the registry and secrets read it.
  std::unique_ptr<HandedOffApps> apps_;
  std::unique_ptr<ExecutorRegistry> executors_;
  // Before the pool: the pool's jobs use it, and the pool is destroyed (its workers
  // joined) first.
  std::unique_ptr<PushService> push_;  // null without --spark-push-merge
  std::unique_ptr<BlockingPool> pool_;
  std::unique_ptr<SparkShuffleService> service_;
  std::unique_ptr<SparkSecrets> secrets_;
  std::unique_ptr<SparkTls> tls_;  // null without TLS
};

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_SPARK_FRONT_DOOR_H_
