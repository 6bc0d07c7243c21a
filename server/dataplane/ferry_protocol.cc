#include "server/dataplane/ferry_protocol.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/frame_header.h"

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

class FerryProtocol {
 public:
  FerryProtocol(ConnectionCore& core, const TicketRegistry& tickets)
      : core_(core), tickets_(tickets) {}

  void Serve();

 private:
  std::optional<Failure> ServeRequest(absl::string_view frame);
  std::optional<Failure> ServeBlocks(const FetchRequest& request);

  ConnectionCore& core_;
  const TicketRegistry& tickets_;
};

void FerryProtocol::Serve() {
  // Nothing of a connection is its own but the request being read: every one names its
  // ticket.
  core_.OnHandOver([] { return std::optional<std::string>(std::string()); });
  const auto fixed = [](absl::string_view) -> absl::StatusOr<size_t> { return kRequestBytes; };
  const ConnectionCore::Framing framing{kRequestBytes, kRequestBytes, fixed};
  // Requests are bounded in number only by the peer's patience: each one must arrive
  // within the idle timeout, and a stopping scheduler cancels the wait.
  for (;;) {
    absl::string_view frame;
    std::optional<Failure> failure;
    if (!core_.NextFrame(framing, &frame)) {
      if (core_.partial_frame_bytes() == 0) return;  // a clean end, or nobody to tell
      core_.BeginRequest();
      failure = Failure{absl::InvalidArgumentError(
          absl::StrCat("connection closed after ", core_.partial_frame_bytes(), " bytes of a ",
                       kRequestBytes, "-byte request"))};
      failure->can_send_error = false;
    } else {
      core_.BeginRequest();
      failure = ServeRequest(frame);
    }
    core_.EndRequest(failure.has_value() ? failure->status : absl::OkStatus());
    if (!failure.has_value()) continue;
    if (failure->can_send_error) {
      (void)core_.SendBytes(EncodeErrorFrame(failure->status, failure->block_index));
    }
    return;
  }
}

std::optional<Failure> FerryProtocol::ServeRequest(absl::string_view frame) {
  absl::StatusOr<FetchRequest> request = DecodeFetchRequest(frame);
  if (!request.ok()) return Failure{request.status()};
  std::optional<Failure> failure = ServeBlocks(*request);
  core_.sender().EndResponse();
  return failure;
}

std::optional<Failure> FerryProtocol::ServeBlocks(const FetchRequest& request) {
  absl::StatusOr<std::shared_ptr<const Stream>> found = tickets_.Find(request.ticket);
  if (!found.ok()) return Failure{found.status(), request.first_block};
  const Stream& stream = **found;
  const std::vector<StreamBlock>& blocks = stream.blocks;
  const uint64_t end = uint64_t{request.first_block} + request.block_count;
  if (end > blocks.size()) {
    return Failure{
        absl::OutOfRangeError(absl::StrCat("blocks [", request.first_block, ", ", end,
                                           ") requested; the stream has ", blocks.size())),
        request.first_block};
  }
  const StreamBlock& first = blocks[request.first_block];
  if (request.first_block_offset > first.length) {
    return Failure{
        absl::OutOfRangeError(absl::StrCat(
            "offset ", request.first_block_offset, " is past the end of block ",
            request.first_block, " (", BlockName(stream, first), ", ", first.length, " bytes)")),
        request.first_block};
  }
  uint64_t bytes = first.length - request.first_block_offset;
  for (uint32_t i = request.first_block + 1; i < end && bytes < SegmentSender::kBulkResponseBytes;
       ++i) {
    bytes += blocks[i].length;
  }
  core_.sender().StartResponse(bytes);
  for (uint32_t i = request.first_block; i < end; ++i) {
    const StreamBlock& block = blocks[i];
    const uint64_t offset = i == request.first_block ? request.first_block_offset : 0;
    ResponseHeader header;
    header.kind = FrameKind::kBlock;
    header.block_index = i;
    header.offset = offset;
    header.length = block.length - offset;
    if (block.has_checksum) {
      header.flags = kFlagHasChecksum;
      header.checksum = block.checksum;
      header.checksum_algorithm = static_cast<uint8_t>(block.checksum_algorithm);
    }
    char encoded[kResponseHeaderBytes];
    EncodeResponseHeader(header, encoded);
    bool in_frame = true;
    absl::Status sent = core_.SendBlock(
        absl::string_view(encoded, sizeof(encoded)), block, offset,
        [&] { return BlockName(stream, block); }, &in_frame);
    if (!sent.ok()) return Failure{std::move(sent), i, in_frame};
  }
  return std::nullopt;
}

}  // namespace

void ServeFerryConnection(UniqueFd socket, const TicketRegistry& tickets,
                          const ConnectionOptions& options, ConnectionControl& control) {
  ConnectionCore core(std::move(socket), FrontDoor::kFerry, options, control);
  if (!core.Start()) return;
  FerryProtocol(core, tickets).Serve();
}

}  // namespace ferry
