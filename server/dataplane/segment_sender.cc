#include "server/dataplane/segment_sender.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/io/scheduler.h"
#include "common/option_check.h"
#include "common/status_macros.h"

namespace ferry {

namespace {

// A connection whose peer keeps up never finds its socket full, so it would never wait
// and never let the other connections on its thread run: it yields after this many
// bytes or blocks (a turn of the scheduler costs about a microsecond, against the
// ~1 ms these bytes take to send).
constexpr uint64_t kFairShareBytes = uint64_t{4} << 20;
constexpr uint32_t kFairShareBlocks = 64;

std::atomic<uint64_t> undersized_pipes{0};

}  // namespace

uint64_t UndersizedPipes() { return undersized_pipes.load(std::memory_order_relaxed); }

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
  FERRY_RETURN_IF_ERROR(CheckRange("pipe-size", pipe_bytes, 4096, uint64_t{1} << 30));
  FERRY_RETURN_IF_ERROR(CheckRange("copy-buffer-size", copy_buffer_bytes, 4096, uint64_t{1} << 30));
  FERRY_RETURN_IF_ERROR(CheckPositive("first-request-timeout", first_request_timeout));
  FERRY_RETURN_IF_ERROR(CheckPositive("idle-timeout", idle_timeout));
  return CheckPositive("io-timeout", io_timeout);
}

absl::Status SegmentSender::PeerError(ssize_t res, absl::string_view what) const {
  if (res == -ETIMEDOUT) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": peer stalled past ",
                                                    absl::FormatDuration(options_.io_timeout)));
  }
  return absl::ErrnoToStatus(static_cast<int>(-res), what);
}

ssize_t SegmentSender::Send(const void* data, size_t len, bool more) {
  return io_.SendAll(socket_, data, len, more ? MSG_MORE : 0, IoDeadline());
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
  // Empty now: the pipe goes back to the user's budget. Creating the next one costs two
  // syscalls against the milliseconds a spliced response takes; a response of small
  // segments never needs one.
  pipe_.reset();
}

void SegmentSender::TakeTurns(uint64_t bytes, uint32_t blocks) {
  bytes_since_yield_ += bytes;
  blocks_since_yield_ += blocks;
  if (bytes_since_yield_ < kFairShareBytes && blocks_since_yield_ < kFairShareBlocks) return;
  bytes_since_yield_ = 0;
  blocks_since_yield_ = 0;
  FiberScheduler::Current()->Yield();
}

void SegmentSender::SetNoDelay(bool on) {
  if (nodelay_ == on) return;
  const int value = on ? 1 : 0;
  if (::setsockopt(socket_, IPPROTO_TCP, TCP_NODELAY, &value, sizeof(value)) == 0) {
    nodelay_ = on;
  }
}

absl::Status SegmentSender::SendFile(const DataFile& file, uint64_t pos, uint64_t length,
                                     absl::FunctionRef<std::string()> name) {
  if (length == 0) return absl::OkStatus();
  if (options_.mode == DataPlaneMode::kCopy) {
    if (buffer_ == nullptr) buffer_ = std::make_unique<char[]>(options_.copy_buffer_bytes);
    return CopyFile(file, pos, length, name, buffer_.get(), options_.copy_buffer_bytes);
  }
  if (length <= kSmallSegmentBytes) {
    if (small_buffer_ == nullptr) small_buffer_ = std::make_unique<char[]>(kSmallSegmentBytes);
    return CopyFile(file, pos, length, name, small_buffer_.get(), kSmallSegmentBytes);
  }
  return SpliceFile(file, pos, length, name);
}

absl::Status SegmentSender::PipeReady() {
  if (pipe_.has_value()) return absl::OkStatus();
  absl::StatusOr<Pipe> pipe = Pipe::Create(options_.pipe_bytes);
  if (!pipe.ok()) return pipe.status();
  if (pipe->capacity_bytes() < options_.pipe_bytes) {
    // The user's pipe budget (fs.pipe-user-pages-soft, 64 MiB for a user without
    // CAP_SYS_RESOURCE) is spent: this response splices through what the kernel gave.
    undersized_pipes.fetch_add(1, std::memory_order_relaxed);
    LOG_EVERY_N(WARNING, 1000)
        << "a pipe of " << pipe->capacity_bytes() << " bytes instead of " << options_.pipe_bytes
        << ": this user's pipe budget (fs.pipe-user-pages-soft) is spent; "
        << google::COUNTER << " such pipes so far";
  }
  pipe_ = *std::move(pipe);
  return absl::OkStatus();
}

absl::Status SegmentSender::SpliceFile(const DataFile& data, uint64_t pos, uint64_t length,
                                       absl::FunctionRef<std::string()> name) {
  FERRY_RETURN_IF_ERROR(PipeReady());
  const int file = data.fd.get();
  const size_t capacity = pipe_->capacity_bytes();
  while (length > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length, capacity));
    const bool last = chunk == length;
    const SocketIo::SpliceStep step =
        io_.Splice(file, pos, *pipe_, socket_, chunk, !last, IoDeadline());
    const ssize_t in_res = step.in;
    if (in_res < 0) {
      pipe_.reset();
      return absl::ErrnoToStatus(
          static_cast<int>(-in_res),
          absl::StrCat("splice ", data.path, " for ", name(), " into the pipe"));
    }
    if (step.out < 0) {
      pipe_.reset();
      return PeerError(step.out, absl::StrCat("splice ", name(), " to the peer"));
    }
    if (in_res == 0) {
      pipe_.reset();
      return absl::DataLossError(absl::StrCat(name(), ": ", data.path,
                                              " ended early (truncated while being served)"));
    }
    const size_t moved = static_cast<size_t>(step.out);
    const size_t in_pipe = static_cast<size_t>(in_res) - moved;
    if (in_pipe > 0) {
      const bool more = !last || static_cast<uint64_t>(in_res) < length;
      const ssize_t drained = io_.DrainPipe(*pipe_, socket_, in_pipe, more, IoDeadline());
      if (drained != static_cast<ssize_t>(in_pipe)) {
        pipe_.reset();
        return PeerError(drained < 0 ? drained : -EPIPE,
                         absl::StrCat("splice ", name(), " to the peer"));
      }
    }
    pos += static_cast<uint64_t>(in_res);
    TakeTurns(static_cast<uint64_t>(in_res), 0);
    length -= static_cast<uint64_t>(in_res);
  }
  return absl::OkStatus();
}

absl::Status SegmentSender::CopyFile(const DataFile& data, uint64_t pos, uint64_t length,
                                     absl::FunctionRef<std::string()> name, char* buffer,
                                     size_t buffer_bytes) {
  const int file = data.fd.get();
  while (length > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length, buffer_bytes));
    const ssize_t n = io_.ReadFile(file, buffer, chunk, pos);
    if (n < 0) {
      return absl::ErrnoToStatus(static_cast<int>(-n),
                                 absl::StrCat("read ", data.path, " for ", name()));
    }
    if (static_cast<size_t>(n) != chunk) {
      return absl::DataLossError(absl::StrCat(name(), ": ", data.path,
                                              " ended early (truncated while being served)"));
    }
    const bool last = chunk == length;
    const ssize_t sent = Send(buffer, chunk, !last);
    if (sent < 0) return PeerError(sent, absl::StrCat("send ", name(), " to the peer"));
    pos += chunk;
    TakeTurns(chunk, 0);
    length -= chunk;
  }
  return absl::OkStatus();
}

}  // namespace ferry
