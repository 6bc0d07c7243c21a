#include "server/dataplane/segment_sender.h"

#include <fcntl.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/io/ops.h"
#include "common/io/scheduler.h"
#include "common/option_check.h"
#include "common/status_macros.h"
#include "server/dataplane/page_cache.h"

namespace ferry {

namespace {

// A leg into the socket that did not move all it was given for want of room: the socket
// was full (-EAGAIN) or stayed full until the deadline. What it moved is read off the
// pipe.
bool ShortOfRoom(ssize_t res) { return res == -EAGAIN || res == -ETIMEDOUT; }

}  // namespace

bool AbslParseFlag(absl::string_view text, DataPlaneMode* mode, std::string* error) {
  if (text == "splice") {
    *mode = DataPlaneMode::kSplice;
  } else if (text == "copy") {
    *mode = DataPlaneMode::kCopy;
  } else {
    *error = absl::StrCat("must be splice or copy, not '", text, "'");
    return false;
  }
  return true;
}

std::string AbslUnparseFlag(DataPlaneMode mode) {
  return mode == DataPlaneMode::kSplice ? "splice" : "copy";
}

absl::Status ConnectionOptions::Validate() const {
  FERRY_RETURN_IF_ERROR(CheckRange("copy-buffer-size", copy_buffer_bytes, 4096, uint64_t{1} << 30));
  FERRY_RETURN_IF_ERROR(CheckPositive("first-request-timeout", first_request_timeout));
  FERRY_RETURN_IF_ERROR(CheckPositive("idle-timeout", idle_timeout));
  return CheckPositive("io-timeout", io_timeout);
}

absl::Status SegmentSender::PeerError(ssize_t res, absl::string_view what) const {
  if (res == -ETIMEDOUT) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, ": peer stalled past ", absl::FormatDuration(options_.io_timeout)));
  }
  return absl::ErrnoToStatus(static_cast<int>(-res), what);
}

ssize_t SegmentSender::Send(const void* data, size_t len, bool more) {
  if (layer_ == nullptr) return io_.SendAll(socket_, data, len, more ? MSG_MORE : 0, IoDeadline());
  sealed_.clear();
  if (!layer_->Seal(absl::string_view(static_cast<const char*>(data), len), &sealed_).ok()) {
    return -EPROTO;
  }
  const ssize_t sent =
      io_.SendAll(socket_, sealed_.data(), sealed_.size(), more ? MSG_MORE : 0, IoDeadline());
  if (sent < 0) return sent;
  return sent == static_cast<ssize_t>(sealed_.size()) ? static_cast<ssize_t>(len) : -EPIPE;
}

void SegmentSender::StartResponse(uint64_t bytes) {
  // A response of more than a segment or so goes out with Nagle's algorithm on: TCP then
  // sends only full segments while earlier ones are unacknowledged, and each splice into
  // the socket does not push a segment of its own. With TCP_NODELAY instead, the bare
  // kernel's splice loses a third of its throughput on 4 connections and needs 1.4x the
  // CPU per GB (benchmarks/results/splice_vs_copy.md).
  if (bytes >= kBulkResponseBytes) SetNoDelay(false);
}

void SegmentSender::EndResponse() {
  // TCP_NODELAY pushes the response's tail at once: the client never waits on a delayed
  // ACK for it.
  SetNoDelay(true);
}

SegmentSender::~SegmentSender() = default;

void SegmentSender::TakeTurns(uint32_t blocks) {
  // A connection whose peer keeps up never finds its socket full, so it would never wait
  // and never let the other connections of its thread run. Time, not bytes, bounds its
  // turn: a chunk read from a cold disk takes longer than one sent from memory. The
  // scheduler runs the fibers whose I/O completed meanwhile before this one again.
  blocks_since_yield_ += blocks;
  const absl::Time now = absl::Now();
  if (now - turn_start_ < kTurn && blocks_since_yield_ < kTurnBlocks) return;
  FiberScheduler::Current()->Yield();
  blocks_since_yield_ = 0;
  turn_start_ = absl::Now();
}

void SegmentSender::SetNoDelay(bool on) {
  if (nodelay_ == on) return;
  const int value = on ? 1 : 0;
  if (::setsockopt(socket_, IPPROTO_TCP, TCP_NODELAY, &value, sizeof(value)) == 0) {
    nodelay_ = on;
  }
}

absl::Status SegmentSender::SendHeader(Header& header, bool more,
                                       absl::FunctionRef<std::string()> name) {
  if (header.sent) return absl::OkStatus();
  // MSG_MORE lets the header share a TCP segment with the payload that follows.
  const ssize_t sent = Send(header.bytes.data(), header.bytes.size(), more);
  if (sent != static_cast<ssize_t>(header.bytes.size())) {
    return PeerError(sent < 0 ? sent : -EPIPE, absl::StrCat("send header of ", name()));
  }
  header.sent = true;
  header.on_sent();
  return absl::OkStatus();
}

absl::Status SegmentSender::SendSegment(absl::string_view header_bytes,
                                        const std::shared_ptr<const DataFile>& file, uint64_t pos,
                                        uint64_t length, absl::FunctionRef<std::string()> name,
                                        absl::FunctionRef<void()> header_sent) {
  Header header{header_bytes, header_sent};
  // A block with no payload is pushed at once.
  if (length == 0) return SendHeader(header, /*more=*/false, name);
  if (layer_ != nullptr) {
    if (fallback_buffer_ == nullptr) {
      fallback_buffer_ = std::shared_ptr<char[]>(new char[kFallbackBufferBytes]);
    }
    return CopyFile(header, file, pos, length, name, fallback_buffer_, kFallbackBufferBytes);
  }
  if (options_.mode == DataPlaneMode::kCopy) {
    if (buffer_ == nullptr) {
      buffer_ = std::shared_ptr<char[]>(new char[options_.copy_buffer_bytes]);
    }
    return CopyFile(header, file, pos, length, name, buffer_, options_.copy_buffer_bytes);
  }
  if (length <= kSmallSegmentBytes) {
    if (small_buffer_ == nullptr) {
      small_buffer_ = std::shared_ptr<char[]>(new char[kSmallSegmentBytes]);
    }
    return CopyFile(header, file, pos, length, name, small_buffer_, kSmallSegmentBytes);
  }
  return SpliceFile(header, file, pos, length, name);
}

size_t SegmentSender::SocketRoom() const {
  // Both in the kernel's own accounting (what the queue holds counts each buffer's
  // overhead, so the payload the socket takes is at least this: TCP also lets one more
  // buffer's worth past the limit).
  uint32_t meminfo[SK_MEMINFO_VARS] = {};
  socklen_t len = sizeof(meminfo);
  if (::getsockopt(socket_, SOL_SOCKET, SO_MEMINFO, meminfo, &len) != 0 ||
      len < sizeof(uint32_t) * (SK_MEMINFO_WMEM_QUEUED + 1)) {
    return SIZE_MAX;  // not a socket that says: sized as the pipe is
  }
  const uint32_t limit = meminfo[SK_MEMINFO_SNDBUF];
  const uint32_t queued = meminfo[SK_MEMINFO_WMEM_QUEUED];
  return queued >= limit ? 0 : limit - queued;
}

uint64_t SegmentSender::ReadAhead(uint64_t pos, uint64_t rest) {
  if (pos < read_ahead_to_) return 0;
  read_ahead_to_ = pos + disks_.readahead_bytes();
  return rest;
}

absl::StatusOr<size_t> SegmentSender::Moved(const SocketIo::SpliceStep& step, const DataFile& data,
                                            bool more_after, uint64_t length,
                                            absl::Time out_deadline, absl::Time progress_deadline,
                                            absl::FunctionRef<std::string()> name, bool* stalled) {
  const ssize_t in_res = step.in;
  if (in_res < 0) {
    pipe_.Close();
    return FileReadError(static_cast<int>(-in_res),
                         absl::StrCat("splice ", data.path, " for ", name(), " into the pipe"));
  }
  if (step.out < 0 && !ShortOfRoom(step.out)) {
    pipe_.Close();
    return PeerError(step.out, absl::StrCat("splice ", name(), " to the peer"));
  }
  if (in_res == 0) {
    pipe_.Close();
    return absl::DataLossError(
        absl::StrCat(name(), ": ", data.path, " ended early (truncated while being served)"));
  }
  size_t moved = static_cast<size_t>(std::max<ssize_t>(step.out, 0));
  if (moved < static_cast<size_t>(in_res) && step.out != -ETIMEDOUT) {
    const size_t rest = static_cast<size_t>(in_res) - moved;
    const bool more = more_after || static_cast<uint64_t>(in_res) < length;
    const ssize_t drained = io_.DrainPipe(*pipe_, socket_, rest, more, out_deadline);
    if (drained < 0 && !ShortOfRoom(drained)) {
      pipe_.Close();
      return PeerError(drained, absl::StrCat("splice ", name(), " to the peer"));
    }
    if (drained == static_cast<ssize_t>(rest)) moved = static_cast<size_t>(in_res);
  }
  if (moved < static_cast<size_t>(in_res)) {
    // What the pipe still holds is what the socket did not take.
    const int left = pipe_->BufferedBytes();
    if (left < 0 || left > in_res) {
      pipe_.Close();
      return PeerError(left < 0 ? left : -EPROTO, absl::StrCat("splice ", name(), " to the peer"));
    }
    moved = static_cast<size_t>(in_res - left);
    if (left > 0) {
      pipe_.Close();
      pipes_.CountStall();
      *stalled = true;
      if (moved == 0 && absl::Now() >= progress_deadline) {
        return PeerError(-ETIMEDOUT, absl::StrCat("send ", name(), " to the peer"));
      }
    }
  }
  return moved;
}

absl::Status SegmentSender::SpliceFile(Header& header,
                                       const std::shared_ptr<const DataFile>& shared, uint64_t pos,
                                       uint64_t length, absl::FunctionRef<std::string()> name) {
  const DataFile& data = *shared;
  const int file = data.fd.get();
  read_ahead_to_ = 0;
  // A peer that takes no byte for io_timeout fails, however often its socket says it
  // has room.
  absl::Time progress_deadline = IoDeadline();
  bool stalled = false;
  while (length > 0) {
    // The pipe takes what the socket takes now, so that its bytes go on at once and it
    // is empty again: a peer that reads slowly (or not at all) holds no pipe while it
    // does not read, and one that reads keeps the zero-copy path. A socket with less
    // room than kMinSpliceRoom, or that just stalled a chunk, is waited for first, with
    // no pipe held.
    size_t room = SocketRoom();
    if (stalled || room < std::min<uint64_t>(length, kMinSpliceRoom)) {
      pipe_.Return();  // empty
      const int ready = Poll(socket_, POLLOUT, progress_deadline);
      if (ready < 0) return PeerError(ready, absl::StrCat("send ", name(), " to the peer"));
      room = std::max(SocketRoom(), kMinSpliceRoom);
      stalled = false;
    }
    if (!pipe_) {
      absl::StatusOr<PipePool::Lease> pipe =
          pipes_.Take(std::min(IoDeadline(), absl::Now() + kPipeWait));
      if (absl::IsDeadlineExceeded(pipe.status())) {
        // Every pipe of the thread stays in use (peers slow to read hold theirs): the rest
        // of the segment is copied, so that they never stall this one.
        pipes_.CountFallback();
        if (fallback_buffer_ == nullptr) {
          fallback_buffer_ = std::shared_ptr<char[]>(new char[kFallbackBufferBytes]);
        }
        return CopyFile(header, shared, pos, length, name, fallback_buffer_, kFallbackBufferBytes);
      }
      if (!pipe.ok()) {
        return absl::Status(pipe.status().code(),
                            absl::StrCat("a pipe for ", name(), ": ", pipe.status().message()));
      }
      pipe_ = *std::move(pipe);
    }
    const size_t chunk = static_cast<size_t>(
        std::min<uint64_t>({length, pipe_->capacity_bytes(), std::max(room, kMinSpliceRoom)}));
    const bool last = chunk == length;
    // A chunk the socket said it had room for goes on at once. One it has not taken by
    // kSocketStall never will soon (the kernel cut the socket's buffer under memory
    // pressure, or the socket does not count what it queues): its pipe is closed rather
    // than held while the peer does not read, and the rest is spliced again from the
    // file once the socket has room.
    const absl::Time out_deadline = room == SIZE_MAX
                                        ? progress_deadline
                                        : std::min(progress_deadline, absl::Now() + kSocketStall);
    SocketIo::SpliceStep step;
    if (LooksCached(file, pos, chunk)) {
      if (absl::Status sent = SendHeader(header, /*more=*/true, name); !sent.ok()) {
        pipe_.Return();  // still empty
        return sent;
      }
      step = io_.Splice(file, pos, *pipe_, socket_, chunk, !last, out_deadline);
    } else {
      const absl::StatusOr<size_t> in = disks_.SpliceToPipe(shared, pos, chunk, pipe_->write_fd(),
                                                            ReadAhead(pos, length), IoDeadline());
      if (!in.ok()) {
        pipe_.Close();
        return absl::Status(in.status().code(), absl::StrCat(name(), ": ", in.status().message()));
      }
      step.in = static_cast<ssize_t>(*in);
      if (step.in > 0) {
        if (absl::Status sent = SendHeader(header, /*more=*/true, name); !sent.ok()) {
          pipe_.Close();
          return sent;
        }
      }
    }
    FERRY_ASSIGN_OR_RETURN(const size_t moved,
                           Moved(step, data, /*more_after=*/!last, length, out_deadline,
                                 progress_deadline, name, &stalled));
    if (moved > 0) progress_deadline = IoDeadline();
    pos += moved;
    length -= moved;
    // Empty now: another sender of the thread may have it while this one waits its turn.
    if (pipes_.contended()) pipe_.Return();
    TakeTurns(0);
  }
  pipe_.Return();
  return absl::OkStatus();
}

absl::Status SegmentSender::CopyFile(Header& header, const std::shared_ptr<const DataFile>& shared,
                                     uint64_t pos, uint64_t length,
                                     absl::FunctionRef<std::string()> name,
                                     std::shared_ptr<char[]>& buffer_ptr, size_t buffer_bytes) {
  const DataFile& data = *shared;
  const int file = data.fd.get();
  char* const buffer = buffer_ptr.get();
  read_ahead_to_ = 0;
  while (length > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length, buffer_bytes));
    const CachedRead cached = PreadCached(file, buffer, chunk, pos);
    if (cached.bytes < 0) {
      return FileReadError(static_cast<int>(-cached.bytes),
                           absl::StrCat("read ", data.path, " for ", name()));
    }
    size_t n = static_cast<size_t>(cached.bytes);
    if (cached.missed) {
      // The rest of the chunk, from the disk; the worker writes into the buffer at `n`.
      const absl::StatusOr<size_t> rest =
          disks_.Read(shared, pos + n, std::shared_ptr<char[]>(buffer_ptr, buffer + n), chunk - n,
                      ReadAhead(pos + n, length - n), IoDeadline());
      if (!rest.ok()) {
        // The worker may still be writing into it: the next read gets a buffer of its own.
        buffer_ptr.reset();
        return absl::Status(rest.status().code(),
                            absl::StrCat(name(), ": ", rest.status().message()));
      }
      n += *rest;
    }
    if (n != chunk) {
      return absl::DataLossError(
          absl::StrCat(name(), ": ", data.path, " ended early (truncated while being served)"));
    }
    FERRY_RETURN_IF_ERROR(SendHeader(header, /*more=*/true, name));
    const bool last = chunk == length;
    const ssize_t sent = Send(buffer, chunk, !last);
    if (sent < 0) return PeerError(sent, absl::StrCat("send ", name(), " to the peer"));
    pos += chunk;
    TakeTurns(0);
    length -= chunk;
  }
  return absl::OkStatus();
}

}  // namespace ferry
