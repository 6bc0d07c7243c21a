#include "server/dataplane/connection.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/frame_header.h"
#include "common/io/ops.h"
#include "common/io/ready_ops.h"
#include "server/ops/peer_log.h"

namespace ferry {

namespace {

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
      : socket_(std::move(socket)),
        tickets_(tickets),
        options_(options),
        control_(control),
        sender_(socket_.get(), options) {}

  void Serve();

 private:
  ssize_t ReadRequest(char (&frame)[kRequestBytes]);
  bool Draining() const {
    return control_ != nullptr && control_->draining != nullptr &&
           control_->draining->load(std::memory_order_relaxed);
  }
  std::optional<Failure> ServeRequest(const FetchRequest& request);
  std::optional<Failure> SendBlock(const StreamBlock& block, uint32_t index, uint64_t offset);
  // How errors name a block of the stream being served.
  std::string Name(const StreamBlock& block) const { return BlockName(*stream_, block); }

  UniqueFd socket_;
  const TicketRegistry& tickets_;
  const ConnectionOptions& options_;
  ConnectionControl* control_;
  SegmentSender sender_;
  // Whether a whole request has arrived yet.
  bool served_any_ = false;
  // The stream of the request being served.
  const Stream* stream_ = nullptr;
  // When the request being served was read, and when its first byte went out.
  absl::Time request_start_;
  std::optional<absl::Time> first_byte_;
};

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
    request_start_ = absl::Now();
    first_byte_.reset();
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
    if (control_ != nullptr && control_->metrics != nullptr) {
      const absl::Time done = absl::Now();
      control_->metrics->Request(
          FrontDoor::kFerry,
          failure.has_value() ? failure->status.code() : absl::StatusCode::kOk,
          first_byte_.value_or(done) - request_start_, done - request_start_);
    }
    if (!failure.has_value()) continue;
    LogPeerFailure(socket_.get(), "ferry", failure->status);
    if (failure->can_send_error) {
      const std::string error = EncodeErrorFrame(failure->status, failure->block_index);
      (void)sender_.Send(error.data(), error.size(), /*more=*/false);
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
  uint64_t bytes = blocks[request.first_block].length - request.first_block_offset;
  for (uint32_t i = request.first_block + 1;
       i < end && bytes < SegmentSender::kBulkResponseBytes; ++i) {
    bytes += blocks[i].length;
  }
  sender_.StartResponse(bytes);
  for (uint32_t i = request.first_block; i < end; ++i) {
    const uint64_t offset = i == request.first_block ? request.first_block_offset : 0;
    if (std::optional<Failure> f = SendBlock(blocks[i], i, offset)) return f;
    sender_.TakeTurns(0, 1);
  }
  sender_.EndResponse();
  return std::nullopt;
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
  const ssize_t sent = sender_.Send(bytes, sizeof(bytes), /*more=*/length > 0);
  if (sent < 0) {
    return Failure{sender_.PeerError(sent, absl::StrCat("send header of ", Name(block))), index,
                   false};
  }
  if (!first_byte_.has_value()) first_byte_ = absl::Now();
  absl::Status status = sender_.SendFile(*block.file, block.offset + offset, length,
                                         [&] { return Name(block); });
  if (!status.ok()) return Failure{std::move(status), index, false};
  if (control_ != nullptr && control_->metrics != nullptr) {
    control_->metrics->Sent(FrontDoor::kFerry, length, 1);
  }
  return std::nullopt;
}

}  // namespace

void ServeConnection(UniqueFd socket, const TicketRegistry& tickets,
                     const ConnectionOptions& options, ConnectionControl* control) {
  Connection(std::move(socket), tickets, options, control).Serve();
}

}  // namespace ferry
