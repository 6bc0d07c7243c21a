// rr_floor: the least any server can do to answer Ferry's data-plane requests, as the
// floor under benchmarks/peers' 1 KiB request/response figures.
//
// One blocking thread per connection reads a 40-byte FETCH, and answers each block it
// asks for with one sendmsg of the 40-byte BLOCK header and the partition's bytes
// pread into a buffer: no fibers, no io_uring, no pipe, no ticket check (block i of
// any ticket is partition i of the one map output it serves). With --spin, a thread
// polls its socket with non-blocking recv for that long before it sleeps in recv: the
// ceiling of a server that never sleeps between requests.
//
//   rr_floor --dir=DATA/app-1 [--shuffle=0 --map=0] [--spin=0] [--port=0]
//
// Prints the port it listens on, then serves until killed. benchmarks/peers points
// clients at it through a ferry_server started with --advertise-data-address, so the
// same receive loop (peer_client --raw) reads Ferry, nginx and this floor.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flag_names.h"
#include "common/frame_header.h"
#include "common/pread_full.h"
#include "common/shuffle_files.h"
#include "common/unique_fd.h"

ABSL_FLAG(std::string, dir, "", "An app's directory of shuffle files.");
ABSL_FLAG(int32_t, shuffle, 0, "Shuffle id of the map output to serve.");
ABSL_FLAG(int64_t, map, 0, "Map id of the map output to serve.");
ABSL_FLAG(absl::Duration, spin, absl::ZeroDuration(),
          "How long to poll for the next request before sleeping in recv.");
ABSL_FLAG(int, port, 0, "Port on 127.0.0.1 to listen on (0: any free one).");

namespace ferry {
namespace {

// Reads exactly kRequestBytes; false on EOF or error.
bool ReadRequest(int fd, char (&frame)[kRequestBytes], absl::Duration spin) {
  size_t got = 0;
  const absl::Time until = absl::Now() + spin;
  while (got < sizeof(frame)) {
    ssize_t n = ::recv(fd, frame + got, sizeof(frame) - got, MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN) {
      if (absl::Now() < until) continue;
      n = ::recv(fd, frame + got, sizeof(frame) - got, 0);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

void Serve(UniqueFd socket, const MapOutputIndex& out, int data_fd, absl::Duration spin) {
  const int one = 1;
  ::setsockopt(socket.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<char> body;
  char frame[kRequestBytes];
  while (ReadRequest(socket.get(), frame, spin)) {
    absl::StatusOr<FetchRequest> request =
        DecodeFetchRequest(absl::string_view(frame, sizeof(frame)));
    if (!request.ok()) return;
    for (uint64_t i = request->first_block;
         i < uint64_t{request->first_block} + request->block_count; ++i) {
      if (i >= out.partitions()) return;
      ResponseHeader header;
      header.block_index = static_cast<uint32_t>(i);
      header.length = out.RangeLength(i, i + 1);
      if (!out.checksums().empty()) {
        header.flags = kFlagHasChecksum;
        header.checksum = out.checksums()[i];
        header.checksum_algorithm = static_cast<uint8_t>(out.checksum_algorithm());
      }
      char head[kResponseHeaderBytes];
      EncodeResponseHeader(header, head);
      body.resize(header.length);
      if (PreadFull(data_fd, body.data(), body.size(), out.RangeOffset(i)) !=
          static_cast<ssize_t>(body.size())) {
        return;
      }
      iovec iov[2] = {{head, sizeof(head)}, {body.data(), body.size()}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      const ssize_t want = static_cast<ssize_t>(sizeof(head) + body.size());
      if (::sendmsg(socket.get(), &msg, MSG_NOSIGNAL) != want) return;  // a floor: no partial sends
    }
  }
}

int Main() {
  absl::StatusOr<MapOutputIndex> out = MapOutputIndex::Load(
      absl::GetFlag(FLAGS_dir), absl::GetFlag(FLAGS_shuffle), absl::GetFlag(FLAGS_map));
  if (!out.ok()) {
    std::fprintf(stderr, "rr_floor: %s\n", out.status().ToString().c_str());
    return 1;
  }
  UniqueFd data(::open(out->data_path().c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(absl::GetFlag(FLAGS_port)));
  socklen_t len = sizeof(addr);
  if (!data.valid() || !listener.valid() ||
      ::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener.get(), 64) != 0 ||
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("rr_floor");
    return 1;
  }
  std::printf("%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  const absl::Duration spin = absl::GetFlag(FLAGS_spin);
  for (;;) {
    UniqueFd socket(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!socket.valid()) continue;
    std::thread([s = std::move(socket), &out, fd = data.get(), spin]() mutable {
      Serve(std::move(s), *out, fd, spin);
    }).detach();
  }
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  ferry::ParseFlags(argc, argv);
  return ferry::Main();
}
