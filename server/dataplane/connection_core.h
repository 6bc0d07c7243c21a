// ConnectionCore: what every data-plane connection does whatever its protocol, on the
// connection's fiber. It owns the socket and its SegmentSender, and holds:
//   * framing: the request bytes received, in a buffer that starts small and grows with
//     the bytes that arrive (never to a length a peer has only announced) up to the
//     protocol's largest frame, against the server's budget for grown buffers;
//   * the deadlines: a new connection's first whole frame must arrive within
//     first_request_timeout, every later one within idle_timeout of when the wait for it
//     began (a peer trickling a byte at a time gains nothing); every send has
//     io_timeout;
//   * drain: once the server drains, only frames already received are served;
//   * the `serving` flag the server's drain reads: false exactly while the connection
//     waits for its peer;
//   * per request: the metrics (count by status, time to first byte and to the end) and
//     the peer log line of a failure;
//   * per block: the check that its file still holds it, then its header and its bytes.
// A protocol handler (ferry_protocol.h, spark/spark_protocol.h) only parses requests and
// frames answers.
#ifndef FERRY_SERVER_DATAPLANE_CONNECTION_CORE_H_
#define FERRY_SERVER_DATAPLANE_CONNECTION_CORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "server/dataplane/security_layer.h"
#include "server/dataplane/segment_sender.h"
#include "server/ops/client_budget.h"
#include "server/ops/hand_over.h"
#include "server/ops/metrics.h"
#include "server/storage/segment.h"

namespace ferry {

// What the server thread running a connection sees of it and can tell it. Touched only
// on that thread (fibers switch only at I/O waits), so it needs no lock.
struct ConnectionControl {
  // The connection's socket.
  int fd = -1;
  // False while the connection waits for its peer: an idle connection may be shut down
  // by a draining server.
  bool serving = false;
  // Once true, the connection serves only the frames already received, then closes
  // (the server is draining).
  const std::atomic<bool>* draining = nullptr;
  // Once true, the server hands its connections to another (DataServer::
  // HandOverConnections): at its next wait for its peer with no request bytes half read,
  // the connection releases itself (below) when its protocol can say where it is.
  const std::atomic<bool>* handing_over = nullptr;
  // For a connection another server handed over: what its protocol said there
  // (ConnectionCore::HandOverState). nullopt for one accepted here.
  std::optional<std::string> resumed{};
  // Set by a connection that released itself: its socket and its protocol's state, for
  // the server it goes to.
  UniqueFd released{};
  std::string released_state{};
  // The serving thread's counters.
  ThreadMetrics* metrics = nullptr;
  // Request bytes that connections' buffers hold past kBaseBufferBytes, server-wide.
  ClientBudget* request_buffers = nullptr;
  // The serving thread's splice pipes, and the readers of every disk.
  PipePool* pipes = nullptr;
  DiskReader* disks = nullptr;
};

class ConnectionCore {
 public:
  // What every connection's buffer holds at least: pipelined requests of either
  // protocol are tens of bytes, so one read takes many.
  static constexpr size_t kBaseBufferBytes = size_t{4} << 10;
  // The most a read takes while the peer keeps the buffer full (pipelined requests).
  static constexpr size_t kReadAheadBytes = size_t{64} << 10;
  // The most of an upload's body read at a time.
  static constexpr size_t kBodyReadBytes = size_t{256} << 10;
  // ReceiveBodyToFile reads and writes a body's rest of at most this many bytes instead
  // of splicing it.
  static constexpr uint64_t kSmallBodyBytes = uint64_t{16} << 10;

  // `options` and `control` (all of its pointers set) must outlive the core.
  ConnectionCore(UniqueFd socket, FrontDoor door, const ConnectionOptions& options,
                 ConnectionControl& control);
  ConnectionCore(const ConnectionCore&) = delete;
  ConnectionCore& operator=(const ConnectionCore&) = delete;

  // Readies the socket for the io engine; false when it cannot be served.
  bool Start();

  // What a protocol says of its connection when the server hands it over: the state
  // (at most HandedConnection::kMaxStateBytes) its counterpart in the other server goes on from
  // (ConnectionControl::resumed there), or nullopt while it cannot go yet (a stream
  // open, a handshake under way): it is asked again before the next wait. A connection
  // sealed by a security layer (whose keys stay here) closes instead, as in a drain.
  using HandOverState = absl::AnyInvocable<std::optional<std::string>() const>;
  void OnHandOver(HandOverState state) { hand_over_state_ = std::move(state); }

  // How a protocol delimits its frames: given the first `header_bytes` of one, its
  // whole length (header included, at most `max_frame_bytes`), or an error for a frame
  // that cannot be one (the connection closes).
  struct Framing {
    size_t header_bytes;
    size_t max_frame_bytes;
    absl::FunctionRef<absl::StatusOr<size_t>(absl::string_view header)> frame_bytes;
  };
  // The next whole frame, header included, into *frame (valid until the next call);
  // false when the connection is to close: the peer closed, reset or stalled, the
  // server drains or stops, the frame is bad (logged) or does not fit the budget
  // (logged), or the connection released itself for a hand-over (its socket is then
  // control's, not the core's). A peer that closes mid-frame leaves
  // partial_frame_bytes() > 0.
  bool NextFrame(const Framing& framing, absl::string_view* frame);
  size_t partial_frame_bytes() const { return end_ - begin_; }
  // The `bytes` that follow the frame just taken outside it (an upload's body), handed
  // to `sink` in pieces as they arrive (plaintext, through the security layer when there
  // is one), the last by `deadline`. A sink that fails gets nothing more: the rest is
  // read and dropped, and its first error is in *sink_status. False when the connection
  // is to close (the peer closed, reset or stalled past the deadline, the server stops)
  // before every byte came. A rest smaller than the buffer is read with what the peer
  // sent after it, which stays in the buffer for NextFrame.
  bool ReceiveBody(uint64_t bytes, absl::Time deadline,
                   absl::FunctionRef<absl::Status(absl::string_view)> sink,
                   absl::Status* sink_status);
  // The same into the file `fd` at `offset`, zero copy where it can be: what arrived
  // with the frame is written, a rest of more than kSmallBodyBytes goes socket -> pipe ->
  // file by splice (a pipe of the thread's pool; the file leg on io_uring, so the thread
  // never waits on a disk).
  // Through a security layer, in copy mode, or with no pipe to be had, the bytes are
  // read and written: with `write_inline` (the machine's dirty pages are low:
  // server/storage/dirty_memory.h), a piece of at most kSmallBodyBytes by pwrite on this
  // thread, else on io_uring. A write error is in *sink_status (the rest is read and
  // dropped).
  bool ReceiveBodyToFile(uint64_t bytes, absl::Time deadline, int fd, int64_t offset,
                         bool write_inline, absl::Status* sink_status);
  // Moves `bytes` of the file `in_fd` at `in_offset` into the file `out_fd` at
  // `out_offset`: file -> pipe -> file by splice on io_uring (a pipe of the thread's
  // pool), or, in copy mode or where no pipe is to be had, read and written. An error
  // names neither file: the caller does.
  absl::Status CopyFile(int in_fd, int64_t in_offset, int out_fd, int64_t out_offset,
                        uint64_t bytes, absl::Time deadline);

  // Around each request: its metrics, and the peer log line when `status` is not OK.
  void BeginRequest();
  void EndRequest(const absl::Status& status);
  // A failure that ends no request (a frame out of frame): the peer log only.
  void LogFailure(const absl::Status& status);

  // Sends one block's `header` and then bytes [offset, block.length) of it. A failure
  // before the header went out (the block's file no longer holds it, or its first chunk
  // could not be read) leaves the stream in frame: *in_frame stays true and the protocol
  // may say so; past that it is false.
  absl::Status SendBlock(absl::string_view header, const StreamBlock& block, uint64_t offset,
                         absl::FunctionRef<std::string()> name, bool* in_frame);
  // Sends bytes of the protocol's own (an error, an RPC reply); false when they did not
  // all go out. `hold` for answers to requests a peer pipelines (pushes): the bytes wait
  // here (up to kMaxHeldBytes) so that the answers to several requests go out in one
  // send, one TCP segment and one wakeup of the peer, at PushHeld(), any other send, or
  // when a read finds nothing more from the peer (before the connection waits on it).
  bool SendBytes(absl::string_view bytes, bool hold = false);
  // Sends what SendBytes held; a protocol calls it before whatever may wait (a lock, a
  // worker), so that no answer waits on another request, and before it closes.
  void PushHeld();

  // From now on every byte either way passes through `layer`: the protocol negotiated
  // it in the frame just handled, and has answered that frame (or the connection starts
  // with it, as TLS does). Bytes the peer sent after that frame are the layer's already.
  // What a secured connection holds (SecuredBytes) is charged to the request-buffer
  // budget first: false (logged) when it does not fit, and the connection is to close.
  [[nodiscard]] bool Secure(std::unique_ptr<SecurityLayer> layer);
  // What a connection secured by `layer` holds beyond an unsecured one: the wire bytes
  // read at a time, the sender's buffer for blocks and the sealed bytes of a chunk, and
  // the layer's own.
  static size_t SecuredBytes(const SecurityLayer& layer);

  SegmentSender& sender() { return sender_; }
  int fd() const { return socket_.get(); }
  // The peer's address without its port: the key of its shares of per-client budgets.
  const std::string& peer_host();

 private:
  bool Draining() const { return control_.draining->load(std::memory_order_relaxed); }
  bool HandingOver() const {
    return control_.handing_over != nullptr &&
           control_.handing_over->load(std::memory_order_relaxed);
  }
  // At a wait with no request bytes held, while the server hands over: true when the
  // connection released itself into control_ (or closes, sealed), false to wait on.
  bool ReleaseForHandOver();
  // Makes the buffer hold `bytes` (0 frees it). False past the budget.
  bool Resize(size_t bytes);
  ssize_t Receive(char* buf, size_t len);
  // Receive's plaintext: through the security layer, when there is one.
  ssize_t ReceivePlain(char* buf, size_t len);
  // Hands `wire` to the layer and sends what it has to say itself; false when the
  // connection is to end (logged).
  bool OpenThroughLayer(absl::string_view wire);

  UniqueFd socket_;
  const FrontDoor door_;
  const ConnectionOptions& options_;
  ConnectionControl& control_;
  const SocketIo& io_;
  SegmentSender sender_;
  // Whether a whole frame has arrived yet, and when the frame being read must be whole.
  bool framed_any_ = false;
  absl::Time frame_deadline_ = absl::InfiniteFuture();
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
  size_t begin_ = 0;     // first unconsumed byte
  size_t end_ = 0;       // one past the last received byte
  bool filled_ = false;  // the last read took all the room it was given
  // The buffer's share of the request-buffer budget, past kBaseBufferBytes.
  ClientBudget::Lease grown_;
  // A secured connection's share (SecuredBytes).
  ClientBudget::Lease secured_;
  std::string peer_host_;  // read when first needed
  HandOverState hand_over_state_;
  // A secured connection's layer, the wire bytes it takes at a time, and the plaintext
  // opened but not yet framed (from plain_taken_ on).
  std::unique_ptr<SecurityLayer> layer_;
  static constexpr size_t kWireChunkBytes = size_t{64} << 10;
  std::unique_ptr<char[]> wire_;
  std::string plain_;
  size_t plain_taken_ = 0;
  bool layer_failed_ = false;  // bytes that did not open: nothing after them is read
  std::string own_output_;     // the layer's own bytes to send
  // Answers SendBytes held back, to go out together.
  static constexpr size_t kMaxHeldBytes = size_t{16} << 10;
  std::string held_;
  // When the request being served began, and when its first byte went out.
  absl::Time request_start_;
  std::optional<absl::Time> first_byte_;
};

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_CONNECTION_CORE_H_
