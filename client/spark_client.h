// SparkShuffleClient: fetches shuffle blocks from any Spark external shuffle service,
// Spark's own or ferry_server's Spark front door, over Spark's protocol
// (docs/protocol.md), into the same sinks as Ferry's own client (block_sink.h; the
// FilesSink splices socket -> pipe -> file). C++ engines can then read shuffle data of
// existing Spark clusters.
//
// What Spark's reducer does (OneForOneBlockFetcher): per request, a FetchShuffleBlocks
// RPC (batch ids for ranges of partitions) answered with a stream handle, then every
// chunk of the stream asked for at once, answered in order by ChunkFetchSuccess frames,
// or (SparkFetchOptions::fetch_to_disk, Spark's path for large requests) by
// StreamRequests answered with StreamResponses. Requests are spread over the
// connections; each connection runs on a fiber of a scheduler on the calling thread.
// With SparkFetchOptions::auth_secret, each connection authenticates first, as Spark's
// SaslClientBootstrap does (with or without SASL encryption), or with Spark's
// AuthEngine and then AES-CTR on every byte, as its AuthClientBootstrap does (an
// encrypted connection's blocks are received and decrypted, not spliced).
//
// Spark's protocol carries no checksums with the blocks: nothing is verified on the
// way (a sink's BlockVerifier is inactive).
#ifndef FERRY_CLIENT_SPARK_CLIENT_H_
#define FERRY_CLIENT_SPARK_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/block_sink.h"
#include "common/secret.h"
#include "common/spark/bitmap.h"
#include "common/spark/layout.h"
#include "common/spark/wire.h"

namespace ferry {

struct SparkFetchOptions {
  // Connections to the service, each with its own share of the requests.
  int connections = 1;
  // Blocks per FetchShuffleBlocks request (Spark packs about 9.6 MiB into one).
  size_t blocks_per_request = 64;
  // Ask for each chunk with a StreamRequest, as Spark does for requests above
  // spark.network.maxRemoteBlockSizeFetchToMem (the only way to move a block over 2 GiB).
  bool fetch_to_disk = false;
  // Deadline for each connect, send and receive.
  absl::Duration io_timeout = absl::Seconds(60);
  // spark.authenticate: the application's secret, with which every connection first
  // authenticates (SASL DIGEST-MD5, QOP auth) as the application it acts for. Empty:
  // no authentication.
  Secret auth_secret;
  // spark.authenticate.enableSaslEncryption (with auth_secret, SASL): ask for QOP
  // auth-conf and take nothing less; every byte after the handshake then travels in
  // SASL's sealed records (DIGEST-MD5's 3des), and blocks are received and opened, not
  // spliced.
  bool sasl_encryption = false;
  // spark.network.crypto.enabled (with auth_secret): authenticate with Spark's
  // AuthEngine of this version (spark.network.crypto.authEngineVersion, 1 or 2) and
  // encrypt every byte after it with AES-CTR; 0: SASL. A service that refuses the
  // AuthEngine fails the connection (no fallback to SASL, which would not encrypt).
  int auth_engine_version = 0;
  // Spark 4's spark.ssl.rpc.enabled: TLS from the first byte, trusting only the PEM
  // certificates in this file (the cluster's spark.ssl.rpc.certChain), the server's
  // certificate naming the address's host. Empty: no TLS.
  std::string tls_trust_file;
};

// A merged partition of push-based shuffle: shuffleChunk_<shuffle>_<merge>_<reduce>_*.
struct SparkMergedPartition {
  int32_t shuffle_id = 0;
  int32_t merge_id = 0;
  int32_t reduce_id = 0;
};

struct SparkFetchStats {
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  absl::Duration elapsed;
};

class SparkShuffleClient {
 public:
  // `address` is the service's "host:port" (IPv4 or localhost).
  // RegisterExecutor, as each executor sends it at start-up. The service's RpcFailure
  // text in the error otherwise.
  // `options` gives its deadline and secret.
  absl::Status RegisterExecutor(const std::string& address,
                                const spark::RegisterExecutor& registration,
                                const SparkFetchOptions& options = {});

  // Fetches `blocks` (single partitions, or ranges of one map output) of the executor
  // (app_id, exec_id); block i goes to `sink` as index i. A block the service cannot
  // serve fails the fetch with the service's text, naming the block.
  absl::StatusOr<SparkFetchStats> Fetch(const std::string& address, const std::string& app_id,
                                        const std::string& exec_id,
                                        const std::vector<spark::ShuffleBlockId>& blocks,
                                        BlockSink& sink, const SparkFetchOptions& options = {});

  // Push-based shuffle's reduce side, as Spark's reducer reads a merged partition
  // (PushBasedFetchHelper): first its chunk bitmaps (a MergedBlockMetaRequest), chunk
  // i's map indexes at i; then its `chunks` chunks (a FetchShuffleBlockChunks), chunk i
  // to `sink` as block i. A partition the service holds no finalized merge of is its
  // text as the error.
  absl::StatusOr<std::vector<spark::Bitmap>> FetchMergedMeta(const std::string& address,
                                                             const std::string& app_id,
                                                             const SparkMergedPartition& partition,
                                                             const SparkFetchOptions& options = {});
  absl::StatusOr<SparkFetchStats> FetchMergedChunks(const std::string& address,
                                                    const std::string& app_id,
                                                    const std::string& exec_id,
                                                    const SparkMergedPartition& partition,
                                                    int32_t chunks, BlockSink& sink,
                                                    const SparkFetchOptions& options = {});
  // Several merged partitions of one service in turn on one connection, as a reducer's
  // connections to a service are reused (Spark's TransportClientFactory): each one's
  // meta, then all its chunks. Chunk c of partitions[p] goes to `sink` as block
  // c + the chunks of partitions[0 .. p-1]; `bitmaps` (if not null) gets each
  // partition's meta.
  absl::StatusOr<SparkFetchStats> FetchMergedPartitions(
      const std::string& address, const std::string& app_id, const std::string& exec_id,
      const std::vector<SparkMergedPartition>& partitions, BlockSink& sink,
      std::vector<std::vector<spark::Bitmap>>* bitmaps = nullptr,
      const SparkFetchOptions& options = {});
};

}  // namespace ferry

#endif  // FERRY_CLIENT_SPARK_CLIENT_H_
