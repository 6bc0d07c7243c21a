// The Spark front door's flags: its address (SparkFrontDoor::Options), executors'
// registrations (ExecutorRegistry::Options), the service (SparkShuffleService::Options),
// spark.authenticate (SparkSecrets::Options), TLS (SparkTls::Options) and YARN
// (HandedOffApps::Options). common/option_flags.h says how they bind.
#include "common/option_flags.h"
#include "server/spark/apps/handed_off_apps.h"
#include "server/spark/auth/spark_auth.h"
#include "server/spark/auth/spark_tls.h"
#include "server/spark/executors/spark_executors.h"
#include "server/spark/push/push_merger.h"
#include "server/spark/spark_front_door.h"
#include "server/spark/spark_service.h"

FERRY_OPTION_FLAG(ferry::SparkFrontDoor::Options, spark_address, address,
                  "host:port of the Spark front door: Spark's shuffle protocol (Spark's default "
                  "port is 7337) on the data plane's threads. Empty: off.");
FERRY_OPTION_FLAG(ferry::ExecutorRegistry::Options, spark_dir_roots, dir_roots,
                  "Comma-separated directories that Spark executors' local dirs must lie "
                  "beneath (required with --spark-address, but on YARN, where --spark-yarn-dir "
                  "adds the NodeManager's local dirs; a root may be a symlink, one that is "
                  "missing is skipped with a warning, and symlinks below them are not "
                  "followed).");
FERRY_OPTION_FLAG(ferry::ExecutorRegistry::Options, state_dir, state_dir,
                  "Directory where Spark executors' registrations (and, with --spark-push-merge, "
                  "the finalized merges) are kept across restarts. Empty: in memory only.");
FERRY_OPTION_FLAG(ferry::ExecutorRegistry::Options, max_spark_executors, max_executors,
                  "Spark executors registered at once.");
FERRY_OPTION_FLAG(ferry::ExecutorRegistry::Options, max_spark_registry_bytes, max_bytes,
                  "Bytes of all Spark executors' registrations together (as kept in the state "
                  "file).");

FERRY_OPTION_FLAG(ferry::SparkShuffleService::Options, max_spark_streams_per_connection,
                  max_streams_per_connection, "Spark streams one connection may hold open.");
FERRY_OPTION_FLAG(ferry::SparkShuffleService::Options, max_spark_open_chunks, max_open_chunks,
                  "Chunks of all open Spark streams together.");
FERRY_OPTION_FLAG(ferry::SparkShuffleService::Options, max_spark_open_chunks_per_client,
                  max_open_chunks_per_client,
                  "Chunks of the open Spark streams of one client address.");
FERRY_OPTION_FLAG(ferry::SparkShuffleService::Options, spark_rdd_blocks, serve_rdd_blocks,
                  "Serve Spark executors' cached RDD blocks (OpenBlocks of rdd_<rdd>_<split>) "
                  "from their local dirs, also after the executor is gone, for applications "
                  "with spark.shuffle.service.fetch.rdd.enabled.");

FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_merge, enabled,
                  "Merge the blocks Spark's map tasks push (push-based shuffle, "
                  "spark.shuffle.push.enabled) into files per reduce partition beside the "
                  "executors' merge dirs. False: pushes are refused and Spark fetches the "
                  "blocks unmerged.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_min_chunk_bytes, min_chunk_bytes,
                  "A merged partition's chunk closes once it holds this many bytes (Spark's "
                  "spark.shuffle.push.server.minChunkSizeInMergedShuffleFile).");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_open_partitions, max_open_partitions,
                  "Merged partitions being written at once (three open files each); a push "
                  "for another is refused.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_open_partitions_per_app,
                  max_open_partitions_per_app,
                  "Merged partitions one application may be writing at once, of "
                  "--spark-push-max-open-partitions; a push of it for another is refused.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_app_partitions, max_app_partitions,
                  "Merged partitions (being written or finalized, three files each) and "
                  "shuffles one application may hold on this node; pushes for more are "
                  "refused.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_app_bytes, max_app_bytes,
                  "Merged bytes one application may hold on this node; pushes past them are "
                  "refused.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_min_free_disk, min_free_disk,
                  "Bytes a merge dir's file system keeps free: a pushed block that would leave "
                  "less is refused (a waiting block answered as a collision), and read "
                  "unmerged.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_timeout, push_timeout,
                  "How long a pushed block may take to arrive once it holds its partition, and "
                  "how long a push waits for its partition.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_deferred_memory, max_deferred_memory,
                  "Bytes of pushed blocks held in memory, in all, while they wait for their "
                  "partition (another push is appending to it); past them a block waits on "
                  "disk.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_deferred_memory_per_client,
                  max_deferred_memory_per_client, "The same, for the pushes of one client host.");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_deferred_disk, max_deferred_disk,
                  "Bytes of pushed blocks waiting on disk (an unnamed file beside their "
                  "partition), in all; past them a block is answered as a collision (Spark's "
                  "pusher then leaves it to be fetched unmerged).");
FERRY_OPTION_FLAG(ferry::PushMerger::Options, spark_push_max_deferred_disk_per_client,
                  max_deferred_disk_per_client, "The same, for the pushes of one client host.");

FERRY_OPTION_FLAG(ferry::SparkSecrets::Options, spark_auth_secret_file, secret_file,
                  "spark.authenticate on the Spark front door: a file holding the secret every "
                  "application authenticates with (the cluster's spark.authenticate.secret). "
                  "Spark clients must then authenticate (SASL DIGEST-MD5, or Spark's AuthEngine "
                  "with spark.network.crypto.enabled) before anything else.");
FERRY_OPTION_FLAG(ferry::SparkSecrets::Options, spark_auth_secrets_dir, secrets_dir,
                  "spark.authenticate with a secret per application: a directory with a file "
                  "per application id holding its secret, read at each handshake (an "
                  "application without one uses --spark-auth-secret-file, if set).");
FERRY_OPTION_FLAG(ferry::SparkSecrets::Options, spark_auth_yarn, yarn,
                  "spark.authenticate on YARN: each application authenticates with the secret "
                  "its NodeManager handed to Ferry's spark_shuffle aux service (--spark-yarn-dir), "
                  "as Spark's own YARN service does with the NodeManager's spark.authenticate; an "
                  "application without one uses --spark-auth-secrets-dir or "
                  "--spark-auth-secret-file, if set.");
FERRY_OPTION_FLAG(ferry::SparkSecrets::Options, spark_auth_apps, apps,
                  "spark.authenticate with the secret a node agent handed over for each "
                  "application (--spark-apps-dir; on Kubernetes, the secret Spark puts in its "
                  "executors' pods); an application without one uses --spark-auth-secrets-dir "
                  "or --spark-auth-secret-file, if set.");
FERRY_OPTION_FLAG(ferry::SparkSecrets::Options, spark_auth_engine_v1, auth_engine_v1,
                  "Serve clients of Spark's AuthEngine version 1 (spark.network.crypto."
                  "authEngineVersion=1, Spark's default), whose session key is the X25519 "
                  "secret itself; false: only version 2. Either is told from the client's first "
                  "frame.");

FERRY_OPTION_FLAG(ferry::SparkTls::Options, spark_tls_cert, cert_file,
                  "TLS on the Spark front door (Spark 4's spark.ssl.rpc.enabled): a PEM file of "
                  "the certificate and its chain, the cluster's spark.ssl.rpc.certChain. With "
                  "--spark-tls-key.");
FERRY_OPTION_FLAG(ferry::SparkTls::Options, spark_tls_key, key_file,
                  "The PEM private key of --spark-tls-cert (the cluster's "
                  "spark.ssl.rpc.privateKey).");

FERRY_OPTION_FLAG(ferry::HandedOffApps::Options, spark_yarn_dir, yarn_dir,
                  "On YARN: the directory Ferry's spark_shuffle NodeManager aux service hands "
                  "applications' starts, secrets and ends to (its ferry.yarn.dir; owned by the "
                  "NodeManager's user, writable by no one else). An ended application's "
                  "registrations are forgotten at the next sweep; the NodeManager's local dirs "
                  "are roots, and an application registers only dirs inside its own "
                  "usercache/<user>/appcache/<application id>.");
FERRY_OPTION_FLAG(ferry::HandedOffApps::Options, spark_apps_dir, apps_dir,
                  "Off YARN (Kubernetes): the directory a node agent (ferry-k8s-agent) hands "
                  "applications' starts, secrets and ends to, in --spark-yarn-dir's layout "
                  "(owned by the agent's user, writable by no one else). An ended "
                  "application's registrations are forgotten and its executors' local dirs "
                  "deleted at the next sweep.");
