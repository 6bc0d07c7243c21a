#include "server/connection.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/frame_header.h"
#include "common/io/ops.h"
#include "common/io/ready_ops.h"
#include "common/io/scheduler.h"
#include "common/pipe.h"
#include "common/pread_full.h"

namespace ferry {

namespace {

// Responses of at least this many bytes are sent with Nagle's algorithm on.
constexpr uint64_t kBulkResponseBytes = uint64_t{64} << 10;
// A connection whose peer keeps up never finds its socket full, so it would never wait
// and never let the other connections on its thread run: it yields after this many
// bytes or blocks (a turn of the scheduler costs about a microsecond, against the
// ~1 ms these bytes take to send).
constexpr uint64_t kFairShareBytes = uint64_t{4} << 20;
constexpr uint32_t kFairShareBlocks = 64;

// What went wrong while serving, and whether the peer can still be told.
struct Failure {
  absl::Status status;
  uint32_t block_index = 0;
  // False once a header promised bytes that did not all follow, or the socket failed:
  // the stream is out of frame and the only honest answer is closing it.
  bool can_send_error = true;
};

class Connection {
 public:
  Connection(UniqueFd socket, const TicketRegistry& tickets, const ConnectionOptions& options,
             ConnectionControl* control)
      : socket_(std::move(socket)), tickets_(tickets), options_(options), control_(control) {}

  void Serve();

 private:
  // The socket operations, through the configured engine.
  ssize_t ReadRequest(char (&frame)[kRequestBytes]);
  bool Draining() const {
    return control_ != nullptr && control_->draining != nullptr &&
           control_->draining->load(std::memory_order_relaxed);
  }
  ssize_t SendBytes(const void* data, size_t len, int flags);
  ssize_t SendPipe(size_t len, bool more);

  std::optional<Failure> ServeRequest(const FetchRequest& request);
  std::optional<Failure> SendBlock(const StreamBlock& block, uint32_t index, uint64_t offset);
  // Sends `length` bytes of `block` starting at file offset `pos`.
  absl::Status SpliceBody(const StreamBlock& block, uint64_t pos, uint64_t length);
  // File -> pipe, at most `len` bytes: the number moved or -errno.
  ssize_t FillPipe(int file, uint64_t pos, size_t len);
  absl::Status PipeReady();
  absl::Status CopyBody(const StreamBlock& block, uint64_t pos, uint64_t length);
  // Reads `len` bytes of `file` at `pos` (fewer only at its end): the count or -errno.
  ssize_t ReadFile(int file, char* buf, size_t len, uint64_t pos);
  absl::Status PeerError(ssize_t res, absl::string_view what) const;
  // Counts bytes and blocks sent; past a fair share, lets the thread's other fibers run.
  void TakeTurns(uint64_t bytes, uint32_t blocks);
  // Nagle's algorithm on for a bulk response, off (TCP_NODELAY) once it is sent.
  void SetNoDelay(bool on);
  absl::Time IoDeadline() const { return absl::Now() + options_.io_timeout; }
  // How errors name a block of the stream being served.
  std::string Name(const StreamBlock& block) const { return BlockName(*stream_, block); }

  UniqueFd socket_;
  const TicketRegistry& tickets_;
  const ConnectionOptions& options_;
  ConnectionControl* control_;
  // Whether a whole request has arrived yet.
  bool served_any_ = false;
  // The stream of the request being served.
  const Stream* stream_ = nullptr;
  // Whether TCP_NODELAY is set on the socket now. Accepted sockets start without it.
  bool nodelay_ = false;
  uint64_t bytes_since_yield_ = 0;
  uint32_t blocks_since_yield_ = 0;
  std::optional<Pipe> pipe_;           // splice mode, created on first use
  std::unique_ptr<char[]> buffer_;     // copy mode, created on first use
};

absl::Status Connection::PeerError(ssize_t res, absl::string_view what) const {
  if (res == -ETIMEDOUT) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": peer stalled past ",
                                                    absl::FormatDuration(options_.io_timeout)));
  }
  return absl::ErrnoToStatus(static_cast<int>(-res), what);
}

ssize_t Connection::ReadRequest(char (&frame)[kRequestBytes]) {
  if (Draining()) {
    // Serve what the peer has already sent, without waiting for more: a request still
    // on its way finds the connection closed at a frame boundary, which a client
    // retries elsewhere. The direct MSG_DONTWAIT recv works on either engine's socket.
    return RecvFullReady(socket_.get(), frame, kRequestBytes, absl::Now());
  }
  // A new connection gets a shorter wait: a peer that connects and says nothing holds
  // a connection slot.
  const absl::Time deadline =
      absl::Now() + (served_any_ ? options_.idle_timeout
                                 : std::min(options_.idle_timeout, options_.first_request_timeout));
  if (options_.engine == IoEngine::kInline) {
    return RecvFullReady(socket_.get(), frame, kRequestBytes, deadline);
  }
  return ReadFull(socket_.get(), frame, kRequestBytes, -1, deadline);
}

ssize_t Connection::SendBytes(const void* data, size_t len, int flags) {
  if (options_.engine == IoEngine::kInline) {
    return SendAllReady(socket_.get(), data, len, flags, IoDeadline());
  }
  return SendAll(socket_.get(), data, len, MSG_NOSIGNAL | flags, IoDeadline());
}

ssize_t Connection::SendPipe(size_t len, bool more) {
  const unsigned flags = SPLICE_F_MOVE | (more ? SPLICE_F_MORE : 0);
  if (options_.engine == IoEngine::kInline) {
    return SpliceAllToSocketReady(pipe_->read_fd(), socket_.get(), len, flags, IoDeadline());
  }
  return SpliceAll(pipe_->read_fd(), -1, socket_.get(), -1, len, flags, IoDeadline());
}

void Connection::Serve() {
  if (options_.engine == IoEngine::kInline && SetNonBlocking(socket_.get(), true) < 0) return;
  // Requests are bounded in number only by the peer's patience: each one must arrive
  // within the idle timeout, and a stopping scheduler cancels the wait.
  for (;;) {
    char frame[kRequestBytes];
    const ssize_t n = ReadRequest(frame);
    if (n == 0) return;  // the peer closed between requests: a clean end
    std::optional<Failure> failure;
    if (n < 0) return;   // idle timeout, reset, or stopping: nobody to tell
    if (control_ != nullptr) control_->serving = true;
    served_any_ = true;
    if (n != static_cast<ssize_t>(sizeof(frame))) {
      failure = Failure{absl::InvalidArgumentError(absl::StrCat(
          "connection closed after ", n, " bytes of a ", kRequestBytes, "-byte request"))};
      failure->can_send_error = false;
    } else if (absl::StatusOr<FetchRequest> request =
                   DecodeFetchRequest(absl::string_view(frame, sizeof(frame)));
               !request.ok()) {
      failure = Failure{request.status()};
    } else {
      failure = ServeRequest(*request);
    }
    if (control_ != nullptr) control_->serving = false;
    if (!failure.has_value()) continue;
    if (failure->can_send_error) {
      const std::string error = EncodeErrorFrame(failure->status, failure->block_index);
      (void)SendBytes(error.data(), error.size(), 0);
    }
    return;
  }
}

std::optional<Failure> Connection::ServeRequest(const FetchRequest& request) {
  absl::StatusOr<std::shared_ptr<const Stream>> stream =
      tickets_.Find(request.ticket, absl::Now());
  if (!stream.ok()) return Failure{stream.status(), request.first_block};
  stream_ = stream->get();
  const std::vector<StreamBlock>& blocks = (*stream)->blocks;
  const uint64_t end = uint64_t{request.first_block} + request.block_count;
  if (end > blocks.size()) {
    return Failure{absl::OutOfRangeError(absl::StrCat(
                       "blocks [", request.first_block, ", ", end, ") requested; the stream has ",
                       blocks.size())),
                   request.first_block};
  }
  if (request.first_block_offset > blocks[request.first_block].length) {
    return Failure{absl::OutOfRangeError(absl::StrCat(
                       "offset ", request.first_block_offset, " is past the end of block ",
                       request.first_block, " (", Name(blocks[request.first_block]), ", ",
                       blocks[request.first_block].length, " bytes)")),
                   request.first_block};
  }
  // A response of more than a segment or so goes out with Nagle's algorithm on: TCP then
  // sends only full segments while earlier ones are unacknowledged, and each splice into
  // the socket does not push a segment of its own. With TCP_NODELAY instead, the bare
  // kernel's splice loses a third of its throughput on 4 connections and needs 1.4x the
  // CPU per GB (benchmarks/results/splice_vs_copy.md). When the response is all sent,
  // TCP_NODELAY goes back on, which pushes its tail at once: the client never waits on a
  // delayed ACK for it.
  uint64_t bytes = blocks[request.first_block].length - request.first_block_offset;
  for (uint32_t i = request.first_block + 1; i < end && bytes < kBulkResponseBytes; ++i) {
    bytes += blocks[i].length;
  }
  if (bytes >= kBulkResponseBytes) SetNoDelay(false);
  for (uint32_t i = request.first_block; i < end; ++i) {
    const uint64_t offset = i == request.first_block ? request.first_block_offset : 0;
    if (std::optional<Failure> f = SendBlock(blocks[i], i, offset)) return f;
    TakeTurns(0, 1);
  }
  SetNoDelay(true);
  return std::nullopt;
}

void Connection::TakeTurns(uint64_t bytes, uint32_t blocks) {
  bytes_since_yield_ += bytes;
  blocks_since_yield_ += blocks;
  if (bytes_since_yield_ < kFairShareBytes && blocks_since_yield_ < kFairShareBlocks) return;
  bytes_since_yield_ = 0;
  blocks_since_yield_ = 0;
  FiberScheduler::Current()->Yield();
}

void Connection::SetNoDelay(bool on) {
  if (nodelay_ == on) return;
  const int value = on ? 1 : 0;
  if (::setsockopt(socket_.get(), IPPROTO_TCP, TCP_NODELAY, &value, sizeof(value)) == 0) {
    nodelay_ = on;
  }
}

std::optional<Failure> Connection::SendBlock(const StreamBlock& block, uint32_t index,
                                             uint64_t offset) {
  // A file that shrank since the stream was opened is caught here, before the header
  // promises bytes the file no longer has.
  struct stat st;
  if (::fstat(block.file->fd.get(), &st) != 0) {
    return Failure{absl::ErrnoToStatus(errno, absl::StrCat("stat ", block.file->path, " for ",
                                                           Name(block))),
                   index};
  }
  if (static_cast<uint64_t>(st.st_size) < block.offset + block.length) {
    return Failure{absl::DataLossError(absl::StrCat(
                       Name(block), ": data file ", block.file->path, " is now ", st.st_size,
                       " bytes but the block ends at byte ", block.offset + block.length)),
                   index};
  }

  const uint64_t length = block.length - offset;
  ResponseHeader header;
  header.kind = FrameKind::kBlock;
  header.block_index = index;
  header.offset = offset;
  header.length = length;
  if (block.has_checksum) {
    header.flags = kFlagHasChecksum;
    header.checksum = block.checksum;
    header.checksum_algorithm = static_cast<uint8_t>(block.checksum_algorithm);
  }
  char bytes[kResponseHeaderBytes];
  EncodeResponseHeader(header, bytes);
  // MSG_MORE lets the header share a segment with the payload that follows; a block
  // with no payload is pushed at once.
  const ssize_t sent = SendBytes(bytes, sizeof(bytes), length > 0 ? MSG_MORE : 0);
  if (sent < 0) {
    return Failure{PeerError(sent, absl::StrCat("send header of ", Name(block))), index, false};
  }
  if (length == 0) return std::nullopt;
  const uint64_t pos = block.offset + offset;
  absl::Status status = options_.mode == DataPlaneMode::kSplice ? SpliceBody(block, pos, length)
                                                                 : CopyBody(block, pos, length);
  if (!status.ok()) return Failure{std::move(status), index, false};
  return std::nullopt;
}

absl::Status Connection::PipeReady() {
  if (pipe_.has_value()) return absl::OkStatus();
  absl::StatusOr<Pipe> pipe = Pipe::Create(options_.pipe_bytes);
  if (!pipe.ok()) return pipe.status();
  pipe_ = *std::move(pipe);
  return absl::OkStatus();
}

ssize_t Connection::FillPipe(int file, uint64_t pos, size_t len) {
  for (;;) {
    // The pipe is empty here, so a non-blocking splice never waits on it; reading the
    // file may still wait for the disk when the pages are not cached.
    loff_t offset = static_cast<loff_t>(pos);
    const ssize_t n = ::splice(file, &offset, pipe_->write_fd(), nullptr, len,
                               SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

absl::Status Connection::SpliceBody(const StreamBlock& block, uint64_t pos, uint64_t length) {
  if (absl::Status s = PipeReady(); !s.ok()) return s;
  const int file = block.file->fd.get();
  const size_t capacity = pipe_->capacity_bytes();
  while (length > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length, capacity));
    const bool last = chunk == length;
    ssize_t in_res;
    size_t moved = 0;
    if (options_.engine == IoEngine::kInline) {
      in_res = FillPipe(file, pos, chunk);
    } else {
      // Both legs in one submission: file -> pipe, linked to pipe -> socket. If the
      // first leg comes up short the kernel cancels the second, and what the pipe holds
      // is moved below.
      IoOp in;
      IoOp out;
      FiberScheduler::Current()->ReserveSqes(3);
      PrepSplice(in, file, static_cast<int64_t>(pos), pipe_->write_fd(), -1, chunk,
                 SPLICE_F_MOVE, IOSQE_IO_LINK);
      PrepSplice(out, pipe_->read_fd(), -1, socket_.get(), -1, chunk,
                 SPLICE_F_MOVE | (last ? 0 : SPLICE_F_MORE), 0, IoDeadline());
      in_res = in.Wait();
      const int out_res = out.Wait();
      if (out_res < 0 && out_res != -ECANCELED && in_res > 0) {
        pipe_.reset();
        return PeerError(out_res, absl::StrCat("splice ", Name(block), " to the peer"));
      }
      moved = out_res > 0 ? static_cast<size_t>(out_res) : 0;
    }
    if (in_res < 0) {
      pipe_.reset();
      return absl::ErrnoToStatus(static_cast<int>(-in_res),
                                 absl::StrCat("splice ", block.file->path, " for ", Name(block),
                                              " into the pipe"));
    }
    if (in_res == 0) {
      pipe_.reset();
      return absl::DataLossError(absl::StrCat(Name(block), ": ", block.file->path,
                                              " ended early (truncated while being served)"));
    }
    const size_t in_pipe = static_cast<size_t>(in_res) - moved;
    if (in_pipe > 0) {
      const bool more = !last || static_cast<uint64_t>(in_res) < length;
      const ssize_t drained = SendPipe(in_pipe, more);
      if (drained != static_cast<ssize_t>(in_pipe)) {
        pipe_.reset();
        return PeerError(drained < 0 ? drained : -EPIPE,
                         absl::StrCat("splice ", Name(block), " to the peer"));
      }
    }
    pos += static_cast<uint64_t>(in_res);
    TakeTurns(static_cast<uint64_t>(in_res), 0);
    length -= static_cast<uint64_t>(in_res);
  }
  return absl::OkStatus();
}

ssize_t Connection::ReadFile(int file, char* buf, size_t len, uint64_t pos) {
  if (options_.engine == IoEngine::kUring) {
    return ReadFull(file, buf, len, static_cast<int64_t>(pos));
  }
  return PreadFull(file, buf, len, pos);
}

absl::Status Connection::CopyBody(const StreamBlock& block, uint64_t pos, uint64_t length) {
  if (buffer_ == nullptr) buffer_ = std::make_unique<char[]>(options_.copy_buffer_bytes);
  const int file = block.file->fd.get();
  while (length > 0) {
    const size_t chunk =
        static_cast<size_t>(std::min<uint64_t>(length, options_.copy_buffer_bytes));
    const ssize_t n = ReadFile(file, buffer_.get(), chunk, pos);
    if (n < 0) {
      return absl::ErrnoToStatus(static_cast<int>(-n),
                                 absl::StrCat("read ", block.file->path, " for ", Name(block)));
    }
    if (static_cast<size_t>(n) != chunk) {
      return absl::DataLossError(absl::StrCat(Name(block), ": ", block.file->path,
                                              " ended early (truncated while being served)"));
    }
    const bool last = chunk == length;
    const ssize_t sent = SendBytes(buffer_.get(), chunk, last ? 0 : MSG_MORE);
    if (sent < 0) return PeerError(sent, absl::StrCat("send ", Name(block), " to the peer"));
    pos += chunk;
    TakeTurns(chunk, 0);
    length -= chunk;
  }
  return absl::OkStatus();
}

}  // namespace

void ServeConnection(UniqueFd socket, const TicketRegistry& tickets,
                     const ConnectionOptions& options, ConnectionControl* control) {
  Connection(std::move(socket), tickets, options, control).Serve();
}

}  // namespace ferry
