// Spark's shuffle protocol (the Spark front door, --spark-address) on one connection, on
// a fiber: the handler that parses Spark's frames and frames its answers; the connection
// core (server/dataplane/connection_core.h) does the rest.
// docs/protocol.md has the bytes and what Ferry answers to what.
//
// Pipelined requests arrive together and are served in order:
//   * RpcRequest: RegisterExecutor, FetchShuffleBlocks, OpenBlocks, RemoveBlocks,
//     GetLocalDirsForExecutors and DiagnoseCorruption through the SparkShuffleService;
//     anything else (push-based shuffle, uploads, Spark's AuthEngine) gets an
//     RpcFailure, and the connection goes on serving.
//   * ChunkFetchRequest: ChunkFetchSuccess, whose frame header goes out with its own send
//     (MSG_MORE) and whose body, the block, follows through the SegmentSender (spliced or
//     copied); or ChunkFetchFailure naming the block and the cause.
//   * StreamRequest ("<streamId>_<chunk>", Spark's fetch-to-disk path): StreamResponse and
//     the block after the frame, or StreamFailure.
// Streams belong to the connection that opened them, and their chunks must be asked for
// in order, each once, as Spark's OneForOneStreamManager requires; a stream is closed
// after its last chunk or with its connection.
//
// Bad input: a frame length outside (0, max_request_frame_bytes], a malformed frame,
// a frame only a server sends, or an UploadStream (whose body would follow unframed)
// closes the connection, which Spark's client retries. A peer cannot make the server
// hold more than a bounded number of streams and chunks (SparkShuffleService::Options),
// nor more request bytes than the frame bound (and all connections together than the
// data plane's request-buffer budget).
#ifndef FERRY_SERVER_SPARK_SPARK_PROTOCOL_H_
#define FERRY_SERVER_SPARK_SPARK_PROTOCOL_H_

#include <cstddef>
#include <cstdint>

#include "common/unique_fd.h"
#include "server/dataplane/connection_core.h"
#include "server/dataplane/segment_sender.h"
#include "server/spark/auth/spark_auth.h"
#include "server/spark/auth/spark_tls.h"
#include "server/spark/spark_service.h"

namespace ferry {

// The largest request frame a Spark connection takes: a FetchShuffleBlocks of a million
// blocks is about 4 MiB.
inline constexpr uint64_t kMaxSparkRequestFrameBytes = uint64_t{16} << 20;
// The largest pushed block taken (Spark pushes blocks up to
// spark.shuffle.push.maxBlockSizeToPush, 1 MiB by default).
inline constexpr uint64_t kMaxPushedBlockBytes = uint64_t{64} << 20;

// Serves `socket` until the peer closes, errs or stalls, the server drains, or the
// scheduler stops. Call from a fiber. `service`, `secrets`, `options` and `control`
// must outlive the call. With secrets.required(), the connection must authenticate
// first, as spark.authenticate does (SASL DIGEST-MD5, or Spark's AuthEngine and then
// AES-CTR on every byte): anything else before that is refused and closes it, and
// afterwards it may act only for the application it authenticated as. With `tls` (null: none), the
// connection is TLS from its first byte (spark.ssl.rpc.enabled).
void ServeSparkConnection(UniqueFd socket, SparkShuffleService& service, SparkSecrets& secrets,
                          SparkTls* tls, const ConnectionOptions& options,
                          ConnectionControl& control);

}  // namespace ferry

#endif  // FERRY_SERVER_SPARK_SPARK_PROTOCOL_H_
