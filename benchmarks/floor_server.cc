// floor_server: the least any server can do to answer Ferry's data-plane requests, the
// floor under benchmarks/peers' figures. One blocking thread per connection, no fibers,
// no io_uring, no ticket check, no limits: it reads each 40-byte FETCH and answers every
// block it asks for with the 40-byte BLOCK header and the block's bytes, the body sent
// as --body says:
//   sendmsg   pread the block into a buffer, then one sendmsg of header and body, with
//             TCP_NODELAY: the request/response floor
//   splice    the header by send(MSG_MORE), then file -> pipe of --chunk-bytes ->
//             socket with SPLICE_F_MORE and Nagle's algorithm on: the bare kernel's
//             splice, Ferry's splice mode without Ferry
//   sendfile  the header by send(MSG_MORE), then sendfile of up to --chunk-bytes a call:
//             what nginx's `sendfile on` does
//   readsend  the header by send(MSG_MORE), then pread + send through a --chunk-bytes
//             buffer: Ferry's copy mode without Ferry
// The bulk bodies push each FETCH's tail by setting TCP_NODELAY once its last block is
// queued, and clear it before the next, as Ferry does. With --spin, a thread polls its
// socket with non-blocking recv for that long before it sleeps in recv: the floor of a
// server that never sleeps between requests.
//
// Block i of any ticket is block (i + 17k) mod N of the N blocks of --dir's shuffle
// --shuffle, in (map, partition) order, where k counts connections in the order they
// were accepted: concurrent connections read different blocks, as Ferry's clients do.
// So the data set must have blocks of one size (`ferry gen --distribution=fixed`).
//
//   floor_server --dir=DATA/app-0 [--shuffle=0] [--body=sendmsg] [--chunk-bytes=1048576]
//                [--spin=0] [--host=127.0.0.1] [--port=0]
//
// Prints the port it listens on, then serves until killed. benchmarks/peers points
// clients at it through a ferry_server started with --advertise-data-address, so the
// same receive loop (peer_client --raw) reads Ferry, nginx and this floor.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flag_names.h"
#include "common/frame_header.h"
#include "common/pipe.h"
#include "common/pread_full.h"
#include "common/shuffle_files.h"
#include "common/unique_fd.h"

ABSL_FLAG(std::string, dir, "", "An app's directory of shuffle files.");
ABSL_FLAG(int32_t, shuffle, 0, "Shuffle id whose map outputs are served.");
ABSL_FLAG(std::string, body, "sendmsg",
          "How a block's bytes are sent: sendmsg, splice, "
          "sendfile or readsend.");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20,
          "Pipe capacity (splice), bytes per call (sendfile) or buffer bytes (readsend).");
ABSL_FLAG(absl::Duration, spin, absl::ZeroDuration(),
          "How long to poll for the next request before sleeping in recv.");
ABSL_FLAG(std::string, host, "127.0.0.1", "IPv4 address to listen on.");
ABSL_FLAG(int, port, 0, "Port to listen on (0: any free one).");

namespace ferry {
namespace {

enum class Body { kSendmsg, kSplice, kSendfile, kReadSend };

struct Block {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t checksum = 0;
  uint8_t checksum_algorithm = 0;
  bool has_checksum = false;
};

struct Served {
  std::vector<UniqueFd> files;
  std::vector<Block> blocks;
};

// Every block of the shuffle's map outputs in `dir`, in (map, partition) order.
absl::StatusOr<Served> LoadBlocks(const std::string& dir, int32_t shuffle) {
  std::vector<int64_t> maps;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("cannot list ", dir));
  while (const dirent* e = ::readdir(d.get())) {
    int32_t s = 0;
    int64_t m = 0;
    const std::string name = e->d_name;
    if (name.ends_with(".index") && ParseIndexFileName(name, &s, &m) && s == shuffle) {
      maps.push_back(m);
    }
  }
  std::sort(maps.begin(), maps.end());
  Served served;
  for (int64_t m : maps) {
    absl::StatusOr<MapOutputIndex> out = MapOutputIndex::Load(dir, shuffle, m);
    if (!out.ok()) return out.status();
    UniqueFd fd(::open(out->data_path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return absl::NotFoundError(absl::StrCat("cannot open ", out->data_path()));
    for (size_t p = 0; p < out->partitions(); ++p) {
      Block b;
      b.fd = fd.get();
      b.offset = out->RangeOffset(p);
      b.length = out->RangeLength(p, p + 1);
      if (!out->checksums().empty()) {
        b.has_checksum = true;
        b.checksum = out->checksums()[p];
        b.checksum_algorithm = static_cast<uint8_t>(out->checksum_algorithm());
      }
      served.blocks.push_back(b);
    }
    served.files.push_back(std::move(fd));
  }
  if (served.blocks.empty()) {
    return absl::NotFoundError(absl::StrCat("no blocks of shuffle ", shuffle, " in ", dir));
  }
  return served;
}

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

bool SendAll(int socket, const char* p, size_t n, int flags) {
  while (n > 0) {
    const ssize_t m = ::send(socket, p, n, MSG_NOSIGNAL | flags);
    if (m < 0 && errno == EINTR) continue;
    if (m <= 0) return false;
    p += m;
    n -= static_cast<size_t>(m);
  }
  return true;
}

void SetNoDelay(int socket, int on) {
  ::setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

class Connection {
 public:
  Connection(UniqueFd socket, const Served& served, uint64_t number, Body body, size_t chunk)
      : socket_(std::move(socket)),
        served_(served),
        first_(number * 17),
        body_(body),
        chunk_(chunk) {}

  void Serve(absl::Duration spin) {
    if (body_ == Body::kSplice) {
      absl::StatusOr<Pipe> pipe = Pipe::Create(chunk_);
      if (!pipe.ok()) return;
      pipe_ = *std::move(pipe);
    }
    if (body_ == Body::kSendmsg) SetNoDelay(socket_.get(), 1);
    char frame[kRequestBytes];
    while (ReadRequest(socket_.get(), frame, spin)) {
      absl::StatusOr<FetchRequest> request =
          DecodeFetchRequest(absl::string_view(frame, sizeof(frame)));
      if (!request.ok()) return;
      for (uint64_t i = request->first_block;
           i < uint64_t{request->first_block} + request->block_count; ++i) {
        if (!SendBlock(static_cast<uint32_t>(i))) return;
      }
      if (body_ != Body::kSendmsg) {  // push the tail, then back to holding segments
        SetNoDelay(socket_.get(), 1);
        SetNoDelay(socket_.get(), 0);
      }
    }
  }

 private:
  bool SendBlock(uint32_t index) {
    const Block& b = served_.blocks[(first_ + index) % served_.blocks.size()];
    ResponseHeader header;
    header.block_index = index;
    header.length = b.length;
    if (b.has_checksum) {
      header.flags = kFlagHasChecksum;
      header.checksum = b.checksum;
      header.checksum_algorithm = b.checksum_algorithm;
    }
    char head[kResponseHeaderBytes];
    EncodeResponseHeader(header, head);
    if (body_ == Body::kSendmsg) {
      buffer_.resize(b.length);
      if (PreadFull(b.fd, buffer_.data(), b.length, b.offset) != static_cast<ssize_t>(b.length)) {
        return false;
      }
      iovec iov[2] = {{head, sizeof(head)}, {buffer_.data(), b.length}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      // A floor: a partial send ends the connection rather than being resumed.
      return ::sendmsg(socket_.get(), &msg, MSG_NOSIGNAL) ==
             static_cast<ssize_t>(sizeof(head) + b.length);
    }
    if (!SendAll(socket_.get(), head, sizeof(head), MSG_MORE)) return false;
    for (uint64_t done = 0; done < b.length;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk_, b.length - done));
      ssize_t n = -1;
      off_t pos = static_cast<off_t>(b.offset + done);
      switch (body_) {
        case Body::kSplice:
          n = SplicePipe(b.fd, pos, want);
          break;
        case Body::kSendfile:
          n = ::sendfile(socket_.get(), b.fd, &pos, want);
          break;
        case Body::kReadSend:
          buffer_.resize(chunk_);
          n = PreadFull(b.fd, buffer_.data(), want, static_cast<uint64_t>(pos));
          if (n > 0 && !SendAll(socket_.get(), buffer_.data(), static_cast<size_t>(n), MSG_MORE)) {
            return false;
          }
          break;
        case Body::kSendmsg:
          break;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<uint64_t>(n);
    }
    return true;
  }

  // File -> pipe, then all of it pipe -> socket: the bytes moved or -1.
  ssize_t SplicePipe(int file, off_t pos, size_t len) {
    loff_t at = pos;
    const ssize_t in = ::splice(file, &at, pipe_->write_fd(), nullptr, len, SPLICE_F_MOVE);
    if (in <= 0) return -1;
    for (ssize_t left = in; left > 0;) {
      const ssize_t out = ::splice(pipe_->read_fd(), nullptr, socket_.get(), nullptr,
                                   static_cast<size_t>(left), SPLICE_F_MOVE | SPLICE_F_MORE);
      if (out < 0 && errno == EINTR) continue;
      if (out <= 0) return -1;
      left -= out;
    }
    return in;
  }

  UniqueFd socket_;
  const Served& served_;
  const uint64_t first_;
  const Body body_;
  const size_t chunk_;
  std::optional<Pipe> pipe_;
  std::vector<char> buffer_;
};

int Main() {
  const std::string body_name = absl::GetFlag(FLAGS_body);
  Body body;
  if (body_name == "sendmsg") {
    body = Body::kSendmsg;
  } else if (body_name == "splice") {
    body = Body::kSplice;
  } else if (body_name == "sendfile") {
    body = Body::kSendfile;
  } else if (body_name == "readsend") {
    body = Body::kReadSend;
  } else {
    std::fprintf(stderr, "floor_server: --body must be sendmsg, splice, sendfile or readsend\n");
    return 1;
  }
  const int64_t chunk = absl::GetFlag(FLAGS_chunk_bytes);
  if (chunk <= 0 || chunk > (int64_t{1} << 30)) {
    std::fprintf(stderr, "floor_server: --chunk-bytes must be in [1, 2^30]\n");
    return 1;
  }
  absl::StatusOr<Served> served =
      LoadBlocks(absl::GetFlag(FLAGS_dir), absl::GetFlag(FLAGS_shuffle));
  if (!served.ok()) {
    std::fprintf(stderr, "floor_server: %s\n", served.status().ToString().c_str());
    return 1;
  }
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(absl::GetFlag(FLAGS_port)));
  socklen_t len = sizeof(addr);
  if (::inet_pton(AF_INET, absl::GetFlag(FLAGS_host).c_str(), &addr.sin_addr) != 1 ||
      !listener.valid() ||
      ::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener.get(), 64) != 0 ||
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("floor_server");
    return 1;
  }
  std::printf("%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  const absl::Duration spin = absl::GetFlag(FLAGS_spin);
  for (uint64_t number = 0;; ++number) {
    UniqueFd socket(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!socket.valid()) continue;
    std::thread([c = std::make_unique<Connection>(std::move(socket), *served, number, body,
                                                  static_cast<size_t>(chunk)),
                 spin] {
      c->Serve(spin);
    }).detach();
  }
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  ferry::ParseFlags(argc, argv);
  return ferry::Main();
}
