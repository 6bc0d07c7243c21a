// SegmentSender: puts bytes from memory and segments of files on one data-plane socket,
// whatever protocol frames them (each front door encodes its own headers and sends them
// through here, then the segment):
//   * splice mode: file -> pipe -> socket, a chunk of up to the pipe's capacity per
//     pass; no payload byte of such a segment enters user space. With the uring engine
//     the two IORING_OP_SPLICE legs are linked in one submission; with the inline
//     engine both legs are direct non-blocking splices and a full socket waits on an
//     io_uring poll.
//     The pipe belongs to the sender while a response is being sent: EndResponse()
//     closes it (empty), so a connection waiting for its next request holds none. Pipes
//     count against the service user's pipe budget (fs.pipe-user-pages-soft, 64 MiB
//     without CAP_SYS_RESOURCE), and connections that sit idle would otherwise keep a
//     1 MiB pipe each out of it. A pipe left holding bytes by an error dies with the
//     sender and is never reused.
//   * copy mode: read the segment into the sender's buffer, then send it.
//   * in splice mode, a segment of at most kSmallSegmentBytes is copied too, through a
//     small buffer: for it the pipe's two splices cost more than a read and a send
//     (benchmarks/results/small-segments-2026-12-01.md).
// A response of 64 KiB or more goes out with Nagle's algorithm on, and EndResponse()
// pushes its tail by setting TCP_NODELAY (docs/protocol.md). A sender whose peer keeps
// up yields its thread after every 4 MiB or 64 blocks, so the thread's other
// connections get their turns.
//
// Used from one fiber; every send has the io_timeout deadline.
#ifndef FERRY_SERVER_DATAPLANE_SEGMENT_SENDER_H_
#define FERRY_SERVER_DATAPLANE_SEGMENT_SENDER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/pipe.h"
#include "server/dataplane/io_engine.h"
#include "server/storage/segment.h"

namespace ferry {

// splice: file -> pipe -> socket, zero copy; copy: read, then send (the baseline).
enum class DataPlaneMode { kSplice, kCopy };
// "splice" or "copy", as the --mode flag takes them.
bool AbslParseFlag(absl::string_view text, DataPlaneMode* mode, std::string* error);
std::string AbslUnparseFlag(DataPlaneMode mode);

struct ConnectionOptions {
  DataPlaneMode mode = DataPlaneMode::kSplice;
  IoEngine engine = IoEngine::kInline;
  // Each sending connection's splice pipe, and copy mode's buffer.
  size_t pipe_bytes = size_t{1} << 20;
  size_t copy_buffer_bytes = size_t{1} << 20;
  // How long a new connection may take to send its first whole request.
  absl::Duration first_request_timeout = absl::Seconds(10);
  // How long a connection may sit without sending a request after that.
  absl::Duration idle_timeout = absl::Seconds(120);
  // Deadline for each send or splice to the peer.
  absl::Duration io_timeout = absl::Seconds(30);

  // INVALID_ARGUMENT naming the flag of a field out of range.
  absl::Status Validate() const;
};

// Pipes created smaller than ConnectionOptions::pipe_bytes (the user's pipe budget was
// spent), since the process started.
uint64_t UndersizedPipes();

class SegmentSender {
 public:
  // `socket` and `options` must outlive the sender; the socket must have been readied
  // for the engine (SocketIo::Prepare).
  SegmentSender(int socket, const ConnectionOptions& options)
      : socket_(socket), options_(options), io_(SocketIoFor(options.engine)) {}
  SegmentSender(const SegmentSender&) = delete;
  // Responses of at least this many bytes are sent with Nagle's algorithm on.
  static constexpr uint64_t kBulkResponseBytes = uint64_t{64} << 10;
  // Segments up to this size are copied even in splice mode.
  static constexpr uint64_t kSmallSegmentBytes = uint64_t{16} << 10;
  SegmentSender& operator=(const SegmentSender&) = delete;

  // Sends all of `data`; `more` when a segment follows (MSG_MORE: they share a TCP
  // segment). The bytes sent, or -errno (-ETIMEDOUT past the deadline).
  ssize_t Send(const void* data, size_t len, bool more);

  // Sends bytes [pos, pos + length) of `file`. `name` names the segment in errors and is
  // called only on one. A failure leaves the peer's stream out of frame.
  absl::Status SendFile(const DataFile& file, uint64_t pos, uint64_t length,
                        absl::FunctionRef<std::string()> name);

  // Around each response: Nagle's algorithm on while a response of `bytes` >= 64 KiB is
  // sent, TCP_NODELAY again (pushing the tail at once) when it is done, and the pipe
  // given back.
  void StartResponse(uint64_t bytes);
  void EndResponse();

  // Counts what was sent; past a fair share, lets the thread's other fibers run.
  void TakeTurns(uint64_t bytes, uint32_t blocks);

  // The error for a failed send: DEADLINE_EXCEEDED for a peer that stopped reading.
  absl::Status PeerError(ssize_t res, absl::string_view what) const;

 private:
  absl::Status SpliceFile(const DataFile& file, uint64_t pos, uint64_t length,
                          absl::FunctionRef<std::string()> name);
  // Through `buffer` of `buffer_bytes`.
  absl::Status CopyFile(const DataFile& file, uint64_t pos, uint64_t length,
                        absl::FunctionRef<std::string()> name, char* buffer,
                        size_t buffer_bytes);
  absl::Status PipeReady();
  void SetNoDelay(bool on);
  absl::Time IoDeadline() const { return absl::Now() + options_.io_timeout; }

  const int socket_;
  const ConnectionOptions& options_;
  const SocketIo& io_;
  // Whether TCP_NODELAY is set on the socket now. Accepted sockets start without it.
  bool nodelay_ = false;
  uint64_t bytes_since_yield_ = 0;
  uint32_t blocks_since_yield_ = 0;
  std::optional<Pipe> pipe_;        // splice mode, while a response needs one
  std::unique_ptr<char[]> buffer_;  // copy mode, created on first use
  std::unique_ptr<char[]> small_buffer_;  // splice mode's small segments, on first use
};

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_SEGMENT_SENDER_H_
