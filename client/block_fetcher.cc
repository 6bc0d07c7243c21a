#include "client/block_fetcher.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/block_verifier.h"
#include "common/block_id.h"
#include "common/frame_header.h"
#include "common/io/ops.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"

namespace ferry {

namespace {

absl::Status IoError(ssize_t res, absl::string_view what) {
  if (res == -ETIMEDOUT) return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
  if (res >= 0) return absl::UnavailableError(absl::StrCat(what, ": connection closed"));
  return absl::ErrnoToStatus(static_cast<int>(-res), what);
}

absl::StatusOr<UniqueFd> ConnectData(const StreamPlan& plan, absl::Time deadline) {
  absl::StatusOr<SocketAddress> addr = SocketAddress::Numeric(plan.data_host, plan.data_port);
  if (!addr.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane of ", plan.server, ": ", addr.status().message()));
  }
  UniqueFd fd(::socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket");
  const int res = Connect(fd.get(), addr->get(), addr->size(), deadline);
  if (res < 0) {
    return IoError(
        res, absl::StrCat("connect to the data plane of ", plan.server, " at ", addr->ToString()));
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

std::string DescribeBlock(const ferry::v1::BlockId& id, const std::string& server) {
  return absl::StrCat(
      "block ", BlockName({id.shuffle_id(), id.map_id(), id.start_reduce_id(), id.end_reduce_id()}),
      " from server ", server);
}

absl::Status FetchStream(const StreamPlan& plan, BlockSink& sink, const FetchStreamOptions& options,
                         StreamProgress* progress) {
  const auto& blocks = plan.handle.blocks();
  const size_t n = static_cast<size_t>(blocks.size());
  *progress = StreamProgress{};
  FERRY_ASSIGN_OR_RETURN(UniqueFd socket, ConnectData(plan, absl::Now() + options.io_timeout));
  const int fd = socket.get();

  FetchRequest request;
  std::memcpy(request.ticket.data(), plan.handle.ticket().data(), kTicketBytes);
  // Where each block starts: past the bytes the sink kept of a block an earlier
  // connection cut off (a request may skip into its first block only).
  std::vector<uint64_t> skip(n);
  for (size_t k = 0; k < n; ++k) {
    skip[k] = sink.Kept(plan.caller_index[k]);
    if (skip[k] > blocks[static_cast<int>(k)].length()) {
      return absl::DataLossError(
          absl::StrCat(DescribeBlock(blocks[static_cast<int>(k)].id(), plan.server), " has ",
                       blocks[static_cast<int>(k)].length(), " bytes, fewer than the ", skip[k],
                       " received from where it was asked before"));
    }
  }
  auto due = [&](size_t k) { return blocks[static_cast<int>(k)].length() - skip[k]; };
  size_t next_request = 0;
  uint64_t in_flight = 0;
  for (size_t next = 0; next < n; ++next) {
    // Top up the pipeline: ask for the next run of blocks while the budget allows
    // (always at least one block when nothing is in flight, however large, so progress
    // never stalls).
    const size_t first = next_request;
    while (next_request < n && next_request - first < UINT32_MAX &&
           (next_request == first || skip[next_request] == 0) &&
           (in_flight == 0 || in_flight + due(next_request) <= options.max_bytes_in_flight)) {
      in_flight += due(next_request);
      ++next_request;
    }
    if (next_request > first) {
      request.first_block = static_cast<uint32_t>(first);
      request.block_count = static_cast<uint32_t>(next_request - first);
      request.first_block_offset = skip[first];
      char frame[kRequestBytes];
      EncodeFetchRequest(request, frame);
      const ssize_t sent =
          SendAll(fd, frame, sizeof(frame), MSG_NOSIGNAL, absl::Now() + options.io_timeout);
      if (sent < 0) {
        return IoError(
            sent, absl::StrCat("request ",
                               DescribeBlock(blocks[static_cast<int>(first)].id(), plan.server)));
      }
    }

    const ferry::v1::BlockInfo& info = blocks[static_cast<int>(next)];
    const std::string name = DescribeBlock(info.id(), plan.server);
    const absl::Time deadline = absl::Now() + options.io_timeout;
    char bytes[kResponseHeaderBytes];
    const ssize_t got = ReadFull(fd, bytes, sizeof(bytes), -1, deadline);
    if (got != static_cast<ssize_t>(sizeof(bytes))) {
      return IoError(got < 0 ? got : 0, absl::StrCat(name, ": read header"));
    }
    absl::StatusOr<ResponseHeader> header =
        DecodeResponseHeader(absl::string_view(bytes, sizeof(bytes)));
    if (!header.ok()) {
      return absl::InternalError(
          absl::StrCat(name, ": protocol error: ", header.status().message()));
    }
    if (header->kind == FrameKind::kError) {
      std::string message(header->message_bytes, '\0');
      const ssize_t m = ReadFull(fd, message.data(), message.size(), -1, deadline);
      if (m != static_cast<ssize_t>(message.size())) message = "(message lost)";
      const std::string about =
          header->block_index < n
              ? DescribeBlock(blocks[static_cast<int>(header->block_index)].id(), plan.server)
              : absl::StrCat("server ", plan.server);
      return absl::Status(static_cast<absl::StatusCode>(header->status),
                          absl::StrCat(about, ": ", message));
    }
    if (header->block_index != next || header->offset != skip[next] ||
        header->length != due(next)) {
      return absl::InternalError(absl::StrCat(
          name, ": protocol error: header for block ", header->block_index, " at offset ",
          header->offset, " with ", header->length, " bytes; expected block ", next, " at offset ",
          skip[next], " with ", due(next)));
    }
    BlockVerifier verifier(info, name, options.verify_checksums);
    absl::Status received = sink.Receive(BlockSource{fd}, plan.caller_index[next], skip[next],
                                         header->length, verifier, name, deadline);
    if (!received.ok()) {
      if (const std::optional<ChecksumMismatch>& bad = verifier.mismatch()) {
        progress->corrupt_partition =
            BlockId{info.id().shuffle_id(), info.id().map_id(), bad->reduce_id, bad->reduce_id + 1};
        progress->corrupt_received_checksum = bad->received;
      }
      return received;
    }
    in_flight -= due(next);
    progress->whole_blocks = next + 1;
  }
  return absl::OkStatus();
}

}  // namespace ferry
