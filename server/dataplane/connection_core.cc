#include "server/dataplane/connection_core.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/io/ops.h"
#include "common/pread_full.h"
#include "common/status_macros.h"
#include "server/ops/peer_log.h"

namespace ferry {

namespace {

absl::string_view DoorName(FrontDoor door) { return door == FrontDoor::kFerry ? "ferry" : "spark"; }

}  // namespace

ConnectionCore::ConnectionCore(UniqueFd socket, FrontDoor door, const ConnectionOptions& options,
                               ConnectionControl& control)
    : socket_(std::move(socket)),
      door_(door),
      options_(options),
      control_(control),
      io_(SocketIoFor(options.engine)),
      sender_(socket_.get(), options, *control.pipes, *control.disks),
      // A connection another server handed over has framed requests before.
      framed_any_(control.resumed.has_value()) {}

bool ConnectionCore::Start() { return io_.Prepare(socket_.get()) >= 0; }

const std::string& ConnectionCore::peer_host() {
  if (peer_host_.empty()) peer_host_ = PeerHost(socket_.get());
  return peer_host_;
}

bool ConnectionCore::Resize(size_t bytes) {
  // Only a buffer past its base size is charged (to the peer's share, so its address is
  // read only then).
  const uint64_t grown = bytes > kBaseBufferBytes ? bytes - kBaseBufferBytes : 0;
  if (grown != grown_.units() &&
      !control_.request_buffers->Resize(&grown_, peer_host(), grown).ok()) {
    return false;
  }
  if (bytes == 0) {
    buffer_.reset();
    capacity_ = begin_ = end_ = 0;
    return true;
  }
  // Not value-initialized: the peer's bytes fill it.
  std::unique_ptr<char[]> resized(new char[bytes]);
  const size_t held = end_ - begin_;
  if (held > 0) std::memcpy(resized.get(), buffer_.get() + begin_, held);
  buffer_ = std::move(resized);
  capacity_ = bytes;
  begin_ = 0;
  end_ = held;
  return true;
}

ssize_t ConnectionCore::Receive(char* buf, size_t len) {
  // Answers held go out before the connection waits on its peer, not before each read:
  // while the peer's next requests are here already they gather more. A direct
  // MSG_DONTWAIT recv works on either engine's socket.
  if (!held_.empty() || Draining()) {
    ssize_t n;
    do {
      n = ::recv(socket_.get(), buf, len, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0) return n;
    const int error = n < 0 ? errno : 0;
    PushHeld();
    // Draining: serve what the peer has sent already, without waiting for more; a
    // request still on its way finds the connection closed at a frame boundary, which
    // clients retry.
    if (n == 0 || error != EAGAIN || Draining()) return n == 0 ? 0 : -error;
  }
  // One deadline for a whole frame, from when the wait for it began. A new connection
  // gets a shorter one: a peer that connects and says nothing holds a connection slot.
  if (frame_deadline_ == absl::InfiniteFuture()) {
    frame_deadline_ = absl::Now() + (framed_any_ ? options_.idle_timeout
                                                 : std::min(options_.idle_timeout,
                                                            options_.first_request_timeout));
  }
  return io_.Recv(socket_.get(), buf, len, frame_deadline_);
}

size_t ConnectionCore::SecuredBytes(const SecurityLayer& layer) {
  return kWireChunkBytes + 2 * SegmentSender::kFallbackBufferBytes + layer.MemoryBytes();
}

bool ConnectionCore::Secure(std::unique_ptr<SecurityLayer> layer) {
  absl::StatusOr<ClientBudget::Lease> lease =
      control_.request_buffers->Acquire(peer_host(), SecuredBytes(*layer));
  if (!lease.ok()) {
    LogFailure(lease.status());
    return false;
  }
  secured_ = *std::move(lease);
  layer_ = std::move(layer);
  sender_.Secure(layer_.get());
  wire_.reset(new char[kWireChunkBytes]);
  // What arrived after the frame that negotiated the layer is sealed: it is opened, and
  // served from plain_ like everything after it.
  const absl::string_view rest(buffer_.get() + begin_, end_ - begin_);
  end_ = begin_;
  if (!rest.empty()) OpenThroughLayer(rest);
  return true;
}

bool ConnectionCore::OpenThroughLayer(absl::string_view wire) {
  const absl::Status opened = layer_->Open(wire, &plain_);
  // The layer's own answer (a handshake's next message, or its alert) goes out either
  // way.
  own_output_.clear();
  layer_->TakeOwnOutput(&own_output_);
  if (!own_output_.empty() &&
      io_.SendAll(socket_.get(), own_output_.data(), own_output_.size(), 0,
                  absl::Now() + options_.io_timeout) != static_cast<ssize_t>(own_output_.size())) {
    layer_failed_ = true;
    return false;
  }
  if (opened.ok()) return true;
  if (!absl::IsCancelled(opened)) LogFailure(opened);
  layer_failed_ = true;  // nothing after bytes that did not open is read
  return false;
}

ssize_t ConnectionCore::ReceivePlain(char* buf, size_t len) {
  if (layer_ == nullptr) return Receive(buf, len);
  if (layer_failed_) return -EPROTO;
  while (plain_taken_ == plain_.size()) {
    plain_.clear();
    plain_taken_ = 0;
    const ssize_t n = Receive(wire_.get(), kWireChunkBytes);
    if (n <= 0) return n;
    if (!OpenThroughLayer(absl::string_view(wire_.get(), static_cast<size_t>(n)))) {
      return -EPROTO;
    }
  }
  const size_t n = std::min(len, plain_.size() - plain_taken_);
  std::memcpy(buf, plain_.data() + plain_taken_, n);
  plain_taken_ += n;
  return static_cast<ssize_t>(n);
}

bool ConnectionCore::NextFrame(const Framing& framing, absl::string_view* frame) {
  for (;;) {
    size_t need = framing.header_bytes;
    const size_t held = end_ - begin_;
    if (held >= framing.header_bytes) {
      absl::StatusOr<size_t> length =
          framing.frame_bytes(absl::string_view(buffer_.get() + begin_, framing.header_bytes));
      if (length.ok() && (*length < framing.header_bytes || *length > framing.max_frame_bytes)) {
        length = absl::InvalidArgumentError(absl::StrCat("a frame of ", *length, " bytes (at most ",
                                                         framing.max_frame_bytes, " taken)"));
      }
      if (!length.ok()) {
        LogFailure(length.status());
        return false;
      }
      need = *length;
      if (held >= need) {
        *frame = absl::string_view(buffer_.get() + begin_, need);
        begin_ += need;
        framed_any_ = true;
        frame_deadline_ = absl::InfiniteFuture();
        return true;
      }
    }
    // Room for more of the frame: start over when all is consumed (shrinking back after
    // a large frame), compact, or grow (doubling, up to the frame's length).
    if (held == 0) {
      if (capacity_ > kBaseBufferBytes && !filled_) Resize(0);
      begin_ = end_ = 0;
    }
    if (capacity_ == 0) Resize(kBaseBufferBytes);
    if (end_ == capacity_ && begin_ > 0) {
      std::memmove(buffer_.get(), buffer_.get() + begin_, held);
      begin_ = 0;
      end_ = held;
    } else if (end_ == capacity_ && !Resize(std::min(need, 2 * capacity_))) {
      LogFailure(absl::ResourceExhaustedError(absl::StrCat(
          "server busy: the requests being received fill the server's request buffers; "
          "closing a connection whose ",
          need, "-byte frame does not fit")));
      return false;
    }
    // A peer whose last read filled the buffer has more on its way (pipelined requests,
    // small uploads): its reads grow to kReadAheadBytes, within the request-buffer
    // budget, and the buffer shrinks back once a read leaves room.
    if (filled_ && capacity_ < kReadAheadBytes) {
      (void)Resize(std::min(2 * capacity_, kReadAheadBytes));
    }
    // Nothing left to serve (answers held go out before the wait: Receive).
    control_.serving = false;
    sender_.EndResponse();
    if (held == 0 && HandingOver() && ReleaseForHandOver()) return false;
    const size_t room = capacity_ - end_;
    const ssize_t n = ReceivePlain(buffer_.get() + end_, room);
    // A server handing over wakes its idle connections by cancelling their wait.
    if (n == -ECANCELED && HandingOver() && !FiberScheduler::Current()->stopping()) continue;
    if (n <= 0) return false;  // closed, reset, idle, draining, stopping or unsealable
    filled_ = static_cast<size_t>(n) == room;
    control_.serving = true;
    end_ += static_cast<size_t>(n);
  }
}

bool ConnectionCore::ReleaseForHandOver() {
  std::optional<std::string> state = hand_over_state_ ? hand_over_state_() : std::nullopt;
  if (!state.has_value()) return false;
  PushHeld();
  if (layer_ != nullptr || state->size() > HandedConnection::kMaxStateBytes) {
    return true;  // closes, as in a drain
  }
  control_.released_state = *std::move(state);
  control_.released = std::move(socket_);
  return true;
}

bool ConnectionCore::ReceiveBody(uint64_t bytes, absl::Time deadline,
                                 absl::FunctionRef<absl::Status(absl::string_view)> sink,
                                 absl::Status* sink_status) {
  *sink_status = absl::OkStatus();
  const auto take = [&](const char* data, size_t n) {
    if (sink_status->ok()) *sink_status = sink(absl::string_view(data, n));
    bytes -= n;
  };
  // What arrived with the frame first.
  const size_t held = static_cast<size_t>(std::min<uint64_t>(bytes, end_ - begin_));
  if (held > 0) {
    take(buffer_.get() + begin_, held);
    begin_ += held;
  }
  if (bytes == 0) return true;
  // The rest straight from the peer, into the emptied buffer.
  begin_ = end_ = 0;
  // Larger reads for a larger body, within the request-buffer budget (the next frame
  // shrinks the buffer back); the base buffer when the budget has no room.
  const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes, kBodyReadBytes));
  if (capacity_ < want && !Resize(want) && capacity_ == 0 && !Resize(kBaseBufferBytes)) {
    return false;
  }
  framed_any_ = true;
  frame_deadline_ = deadline;  // one deadline for the whole body, as for a frame
  while (bytes > 0) {
    // A rest that fills less than the buffer is read with whatever follows it: a peer
    // that pipelines small uploads (Spark's pusher) then has its next requests read with
    // this one's end, not a read each.
    const size_t ask =
        bytes < capacity_ ? capacity_ : static_cast<size_t>(std::min<uint64_t>(bytes, capacity_));
    const ssize_t n = ReceivePlain(buffer_.get(), ask);
    if (n <= 0) return false;
    filled_ = static_cast<size_t>(n) == ask;
    const size_t body = static_cast<size_t>(std::min<uint64_t>(bytes, static_cast<uint64_t>(n)));
    take(buffer_.get(), body);
    if (static_cast<size_t>(n) > body) {
      begin_ = body;  // the next frame's first bytes
      end_ = static_cast<size_t>(n);
    }
  }
  frame_deadline_ = absl::InfiniteFuture();
  return true;
}

bool ConnectionCore::ReceiveBodyToFile(uint64_t bytes, absl::Time deadline, int fd, int64_t offset,
                                       bool write_inline, absl::Status* sink_status) {
  const auto write = [&](absl::string_view piece) -> absl::Status {
    // Inline, a small piece is copied into the page cache on this thread (no io-wq
    // worker's two switches); else the fiber waits for io_uring.
    const ssize_t n =
        write_inline && piece.size() <= kSmallBodyBytes
            ? PwriteFull(fd, piece.data(), piece.size(), static_cast<uint64_t>(offset))
            : WriteAll(fd, piece.data(), piece.size(), offset, deadline);
    if (n != static_cast<ssize_t>(piece.size())) {
      return absl::ErrnoToStatus(n < 0 ? static_cast<int>(-n) : EIO, "write the body");
    }
    offset += n;
    return absl::OkStatus();
  };
  absl::StatusOr<PipePool::Lease> pipe = absl::UnavailableError("no pipe pool");
  // A small rest is read and written (and read with what follows it, see ReceiveBody):
  // for it a pipe's two splices cost more than a read and a write.
  if (layer_ == nullptr && options_.mode == DataPlaneMode::kSplice && control_.pipes != nullptr &&
      bytes > end_ - begin_ + kSmallBodyBytes) {
    pipe = control_.pipes->Take(deadline);
  }
  if (!pipe.ok()) return ReceiveBody(bytes, deadline, write, sink_status);
  PushHeld();  // the splice below waits on the socket itself
  *sink_status = absl::OkStatus();
  // What arrived with the frame first.
  const size_t held = end_ - begin_;
  if (held > 0) {
    *sink_status = write(absl::string_view(buffer_.get() + begin_, held));
    begin_ += held;
    bytes -= held;
  }
  framed_any_ = true;
  while (bytes > 0 && sink_status->ok()) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes, (*pipe)->capacity_bytes()));
    const ssize_t in = ::splice(socket_.get(), nullptr, (*pipe)->write_fd(), nullptr, want,
                                SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (in < 0 && errno == EINTR) continue;
    if (in < 0 && errno == EAGAIN) {
      if (Poll(socket_.get(), POLLIN, deadline) <= 0) {
        pipe->Close();
        return false;  // the peer stalled past the deadline, or the server stops
      }
      continue;
    }
    if (in <= 0) {
      pipe->Close();
      return false;  // closed or reset mid-body
    }
    const ssize_t out = SpliceAll((*pipe)->read_fd(), -1, fd, offset, static_cast<size_t>(in),
                                  SPLICE_F_MOVE, deadline);
    if (out != in) {
      // What stayed in the pipe is dropped with it; the rest of the body is read and
      // dropped below.
      *sink_status = absl::ErrnoToStatus(out < 0 ? static_cast<int>(-out) : EIO,
                                         "splice the body into its file");
      pipe->Close();
      bytes -= static_cast<uint64_t>(in);
      absl::Status ignored;
      return ReceiveBody(
          bytes, deadline, [](absl::string_view) { return absl::OkStatus(); }, &ignored);
    }
    offset += in;
    bytes -= static_cast<uint64_t>(in);
  }
  pipe->Return();
  if (bytes > 0) {
    absl::Status ignored;
    return ReceiveBody(
        bytes, deadline, [](absl::string_view) { return absl::OkStatus(); }, &ignored);
  }
  return true;
}

absl::Status ConnectionCore::CopyFile(int in_fd, int64_t in_offset, int out_fd, int64_t out_offset,
                                      uint64_t bytes, absl::Time deadline) {
  const auto failed = [](ssize_t n, const char* what) {
    return absl::ErrnoToStatus(n < 0 ? static_cast<int>(-n) : EIO, what);
  };
  absl::StatusOr<PipePool::Lease> pipe = absl::UnavailableError("no pipe pool");
  if (options_.mode == DataPlaneMode::kSplice && control_.pipes != nullptr) {
    pipe = control_.pipes->Take(deadline);
  }
  if (!pipe.ok()) {
    constexpr size_t kPiece = size_t{64} << 10;
    const std::unique_ptr<char[]> buffer(new char[kPiece]);
    while (bytes > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes, kPiece));
      const ssize_t in = ReadFull(in_fd, buffer.get(), want, in_offset, deadline);
      if (in != static_cast<ssize_t>(want)) return failed(in, "read");
      const ssize_t out = WriteAll(out_fd, buffer.get(), want, out_offset, deadline);
      if (out != in) return failed(out, "write");
      in_offset += in;
      out_offset += out;
      bytes -= want;
    }
    return absl::OkStatus();
  }
  while (bytes > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(bytes, (*pipe)->capacity_bytes()));
    const ssize_t in =
        SpliceAll(in_fd, in_offset, (*pipe)->write_fd(), -1, want, SPLICE_F_MOVE, deadline);
    if (in != static_cast<ssize_t>(want)) {
      pipe->Close();  // what is in it goes with it
      return failed(in, "splice from the file");
    }
    const ssize_t out =
        SpliceAll((*pipe)->read_fd(), -1, out_fd, out_offset, want, SPLICE_F_MOVE, deadline);
    if (out != in) {
      pipe->Close();
      return failed(out, "splice into the file");
    }
    in_offset += in;
    out_offset += out;
    bytes -= want;
  }
  pipe->Return();
  return absl::OkStatus();
}

void ConnectionCore::BeginRequest() {
  request_start_ = absl::Now();
  first_byte_.reset();
}

void ConnectionCore::EndRequest(const absl::Status& status) {
  if (!status.ok()) LogFailure(status);
  const absl::Time done = absl::Now();
  control_.metrics->Request(door_, status.code(), first_byte_.value_or(done) - request_start_,
                            done - request_start_);
}

void ConnectionCore::LogFailure(const absl::Status& status) {
  LogPeerFailure(socket_.get(), DoorName(door_), status);
}

bool ConnectionCore::SendBytes(absl::string_view bytes, bool hold) {
  if (held_.empty() && !hold) {
    return sender_.Send(bytes.data(), bytes.size(), /*more=*/false) ==
           static_cast<ssize_t>(bytes.size());
  }
  held_.append(bytes.data(), bytes.size());
  if (hold && held_.size() < kMaxHeldBytes) return true;
  std::string out;
  out.swap(held_);
  return sender_.Send(out.data(), out.size(), /*more=*/false) == static_cast<ssize_t>(out.size());
}

void ConnectionCore::PushHeld() {
  if (held_.empty()) return;
  // A send that fails fails the connection's next I/O too.
  (void)SendBytes("", /*hold=*/false);
}

absl::Status ConnectionCore::SendBlock(absl::string_view header, const StreamBlock& block,
                                       uint64_t offset, absl::FunctionRef<std::string()> name,
                                       bool* in_frame) {
  *in_frame = true;
  PushHeld();  // answers held go first
  // A file that shrank since the block was resolved is caught here, before the header
  // promises bytes the file no longer has.
  FERRY_RETURN_IF_ERROR(CheckSegmentHeld(block, name));
  const uint64_t length = block.length - offset;
  FERRY_RETURN_IF_ERROR(
      sender_.SendSegment(header, block.file, block.offset + offset, length, name, [&] {
        *in_frame = false;
        if (!first_byte_.has_value()) {
          first_byte_ = absl::Now();
        }
      }));
  control_.metrics->Sent(door_, length, 1);
  sender_.TakeTurns(1);
  return absl::OkStatus();
}

}  // namespace ferry
