// SegmentSender: puts bytes from memory and segments of files on one data-plane socket,
// whatever protocol frames them (each front door encodes its own headers and sends them
// through here, then the segment):
//   * splice mode: file -> pipe -> socket, a chunk of up to the pipe's capacity per
//     pass; no payload byte of such a segment enters user space. With the uring engine
//     the two IORING_OP_SPLICE legs are linked in one submission; with the inline
//     engine both legs are direct non-blocking splices and a full socket waits on an
//     io_uring poll. The pipe comes from the thread's PipePool for the segment (given
//     back between chunks when another sender waits for one); a pipe an error left
//     holding bytes is closed, never reused. Each chunk is sized by the room the socket
//     has now (SO_MEMINFO), and a socket with little room is waited for with no pipe
//     held, so a pipe's bytes go on at once: peers that do not read hold no pipes. A
//     chunk the socket still has not taken after kSocketStall (the kernel took less than
//     it said) costs its pipe, closed, and is spliced again from the file once the
//     socket has room. A segment that finds no pipe free within kPipeWait is copied
//     through a small buffer instead: pipes held by peers never stall the others.
//   * copy mode: read the segment into the sender's buffer, then send it.
//   * in splice mode, a segment of at most kSmallSegmentBytes is copied too, through a
//     small buffer: for it the pipe's two splices cost more than a read and a send
//     (benchmarks/results/small-segments.md).
//   * on a connection with a security layer (Secure), every send is sealed first and
//     segments are copied whatever the mode: the payload must pass through user space.
// Only what the page cache holds is read on the connection's thread: a chunk that is
// not cached (server/dataplane/page_cache.h) is read by the workers of its disk (DiskReader), into
// the pipe or the buffer, while the thread serves its other connections; the pipe ->
// socket leg, or the send, is the thread's again.
// A response of 64 KiB or more goes out with Nagle's algorithm on, and EndResponse()
// pushes its tail by setting TCP_NODELAY (docs/protocol.md). A sender whose peer keeps
// up yields its thread once it has run for kTurn or sent 64 blocks, so the thread's
// other connections get their turns, small requests behind bulk streams included.
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
#include "server/dataplane/pipe_pool.h"
#include "server/dataplane/security_layer.h"
#include "server/storage/disk_reader.h"
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
  // Each sending connection's copy-mode buffer.
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

class SegmentSender {
 public:
  // `socket`, `options`, `pipes` (the thread's) and `disks` must outlive the sender; the
  // socket must have been readied for the engine (SocketIo::Prepare).
  SegmentSender(int socket, const ConnectionOptions& options, PipePool& pipes, DiskReader& disks)
      : socket_(socket),
        options_(options),
        io_(SocketIoFor(options.engine)),
        pipes_(pipes),
        disks_(disks) {}
  ~SegmentSender();
  SegmentSender(const SegmentSender&) = delete;
  // Responses of at least this many bytes are sent with Nagle's algorithm on.
  static constexpr uint64_t kBulkResponseBytes = uint64_t{64} << 10;
  // Segments up to this size are copied even in splice mode.
  static constexpr uint64_t kSmallSegmentBytes = uint64_t{16} << 10;
  // How long a sender runs before it lets the thread's other connections run. A turn of
  // the scheduler costs about a microsecond; a request that arrives on another
  // connection waits up to a turn per bulk sender of the thread.
  static constexpr absl::Duration kTurn = absl::Microseconds(200);
  static constexpr uint32_t kTurnBlocks = 64;
  // How long a segment waits for a pipe before it is copied instead, and through what.
  static constexpr absl::Duration kPipeWait = absl::Milliseconds(2);
  static constexpr size_t kFallbackBufferBytes = size_t{64} << 10;
  // The least room in the socket a spliced chunk waits for (a pipe holds what the
  // socket takes now; less is not worth the two splices).
  static constexpr size_t kMinSpliceRoom = size_t{64} << 10;
  // How long a chunk the socket said it had room for may take to go on before its pipe
  // is closed (the bytes are spliced again from the file when the socket has room).
  static constexpr absl::Duration kSocketStall = absl::Milliseconds(20);
  SegmentSender& operator=(const SegmentSender&) = delete;

  // From now on every byte goes out sealed by `layer` (which must outlive the sender),
  // and segments are read and sealed through a 64 KiB buffer instead of spliced.
  void Secure(SecurityLayer* layer) { layer_ = layer; }

  // Sends all of `data`; `more` when a segment follows (MSG_MORE: they share a TCP
  // segment). The bytes sent, or -errno (-ETIMEDOUT past the deadline; -EPROTO when
  // the security layer cannot seal them).
  ssize_t Send(const void* data, size_t len, bool more);

  // Sends `header` (a protocol's frame header) and then bytes [pos, pos + length) of
  // `file`. The header goes out once the segment's first chunk is in hand (in the pipe or
  // the buffer), so a file the disk cannot read fails before the peer was promised its
  // bytes; `header_sent` is called when it went, and a failure after that leaves the
  // peer's stream out of frame. `name` names the segment in errors and is called only on
  // one.
  absl::Status SendSegment(absl::string_view header, const std::shared_ptr<const DataFile>& file,
                           uint64_t pos, uint64_t length, absl::FunctionRef<std::string()> name,
                           absl::FunctionRef<void()> header_sent);

  // Around each response: Nagle's algorithm on while a response of `bytes` >= 64 KiB is
  // sent, and TCP_NODELAY again (pushing the tail at once) when it is done.
  void StartResponse(uint64_t bytes);
  void EndResponse();

  // Counts the blocks sent; once the turn (kTurn or kTurnBlocks) is used up, lets the
  // thread's other fibers run.
  void TakeTurns(uint32_t blocks);

  // The error for a failed send: DEADLINE_EXCEEDED for a peer that stopped reading.
  absl::Status PeerError(ssize_t res, absl::string_view what) const;

 private:
  // A segment's header, until it is sent.
  struct Header {
    absl::string_view bytes;
    absl::FunctionRef<void()> on_sent;
    bool sent = false;
  };
  // Sends `header` unless it went already; `more` when payload follows it.
  absl::Status SendHeader(Header& header, bool more, absl::FunctionRef<std::string()> name);
  // After a splice step of `data` (`length` bytes of the segment left, more after the
  // chunk when `more_after`): the bytes the socket took, draining what the pipe holds
  // until `out_deadline`; a pipe the socket stalled on is closed and *stalled set. An
  // error names the file or the peer.
  absl::StatusOr<size_t> Moved(const SocketIo::SpliceStep& step, const DataFile& data,
                               bool more_after, uint64_t length, absl::Time out_deadline,
                               absl::Time progress_deadline, absl::FunctionRef<std::string()> name,
                               bool* stalled);
  absl::Status SpliceFile(Header& header, const std::shared_ptr<const DataFile>& file, uint64_t pos,
                          uint64_t length, absl::FunctionRef<std::string()> name);
  // Through `buffer` of `buffer_bytes`.
  absl::Status CopyFile(Header& header, const std::shared_ptr<const DataFile>& file, uint64_t pos,
                        uint64_t length, absl::FunctionRef<std::string()> name,
                        std::shared_ptr<char[]>& buffer, size_t buffer_bytes);
  // What of the segment at `pos` (`rest` bytes left) the disk is to read ahead of this
  // chunk: all of the rest up to the reader's window when the last window is used up.
  uint64_t ReadAhead(uint64_t pos, uint64_t rest);
  void SetNoDelay(bool on);
  // About how many more bytes the socket's send buffer takes now (SIZE_MAX: unknown).
  size_t SocketRoom() const;
  absl::Time IoDeadline() const { return absl::Now() + options_.io_timeout; }

  const int socket_;
  const ConnectionOptions& options_;
  const SocketIo& io_;
  PipePool& pipes_;
  DiskReader& disks_;
  // Whether TCP_NODELAY is set on the socket now. Accepted sockets start without it.
  bool nodelay_ = false;
  absl::Time turn_start_ = absl::Now();
  uint32_t blocks_since_yield_ = 0;
  // Where the disk was last asked to read ahead to, in the segment being sent.
  uint64_t read_ahead_to_ = 0;
  PipePool::Lease pipe_;  // splice mode, while a segment is sent
  // Shared with the disk's workers, whose read may outlive a wait that ended early.
  std::shared_ptr<char[]> buffer_;        // copy mode, created on first use
  std::shared_ptr<char[]> small_buffer_;  // splice mode's small segments, on first use
  // Splice mode without a pipe, and sealed segments; on first use.
  std::shared_ptr<char[]> fallback_buffer_;
  SecurityLayer* layer_ = nullptr;
  std::string sealed_;  // what Send puts on the wire for a secured connection
};

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_SEGMENT_SENDER_H_
