// relay_demo: the fiber runtime's first job, run by scripts/demo until the fetch path
// lands. A sender thread streams a generated payload to a fiber relay, which moves it
// socket -> pipe -> socket with IORING_OP_SPLICE (no user-space copy); a receiver
// thread checks every byte. Prints what it moved and how fast.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/io/ops.h"
#include "common/io/scheduler.h"
#include "common/pipe.h"
#include "common/unique_fd.h"

ABSL_FLAG(int64_t, megabytes, 256, "Payload size in MiB.");
ABSL_FLAG(int64_t, pipe_size, 1 << 20, "Relay pipe capacity in bytes.");

namespace ferry {
namespace {

UniqueFd Listen(uint16_t* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(fd.get(), 4) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("listen on 127.0.0.1");
    std::exit(1);
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

UniqueFd Dial(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("connect to 127.0.0.1");
    std::exit(1);
  }
  return fd;
}

char PayloadByte(uint64_t i) { return static_cast<char>((i * 2654435761u) >> 13); }

int Main() {
  const uint64_t total = static_cast<uint64_t>(absl::GetFlag(FLAGS_megabytes)) << 20;
  uint16_t in_port = 0;
  uint16_t out_port = 0;
  UniqueFd in_listener = Listen(&in_port);
  UniqueFd out_listener = Listen(&out_port);

  std::thread sender([&] {
    UniqueFd fd = Dial(in_port);
    std::string chunk(1 << 20, '\0');
    for (uint64_t sent = 0; sent < total;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), total - sent));
      for (size_t i = 0; i < n; ++i) chunk[i] = PayloadByte(sent + i);
      for (size_t off = 0; off < n;) {
        const ssize_t w = ::send(fd.get(), chunk.data() + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        off += static_cast<size_t>(w);
      }
      sent += n;
    }
  });
  uint64_t received = 0;
  uint64_t mismatches = 0;
  std::thread receiver([&] {
    UniqueFd fd = Dial(out_port);
    std::string buf(1 << 20, '\0');
    for (;;) {
      const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[static_cast<size_t>(i)] != PayloadByte(received + static_cast<uint64_t>(i))) {
          ++mismatches;
        }
      }
      received += static_cast<uint64_t>(n);
    }
  });

  auto scheduler = FiberScheduler::Create();
  if (!scheduler.ok()) {
    std::fprintf(stderr, "relay_demo: %s\n", scheduler.status().ToString().c_str());
    return 1;
  }
  uint64_t relayed = 0;
  int error = 0;
  size_t pipe_bytes = 0;
  absl::Duration elapsed;
  (void)(*scheduler)->Spawn([&] {
    UniqueFd from(Accept(in_listener.get()));
    UniqueFd to(Accept(out_listener.get()));
    auto pipe = Pipe::Create(static_cast<size_t>(absl::GetFlag(FLAGS_pipe_size)));
    if (!from.valid() || !to.valid() || !pipe.ok()) {
      error = EIO;
      return;
    }
    pipe_bytes = pipe->capacity_bytes();
    const absl::Time start = absl::Now();
    for (;;) {
      const ssize_t in = Splice(from.get(), -1, pipe->write_fd(), -1, pipe->capacity_bytes());
      if (in <= 0) {
        error = in < 0 ? static_cast<int>(-in) : 0;
        break;
      }
      const ssize_t out = SpliceAll(pipe->read_fd(), -1, to.get(), -1, static_cast<size_t>(in));
      if (out != in) {
        error = out < 0 ? static_cast<int>(-out) : EIO;
        break;
      }
      relayed += static_cast<uint64_t>(in);
    }
    elapsed = absl::Now() - start;
  });
  (*scheduler)->Run();
  sender.join();
  receiver.join();

  const double seconds = absl::ToDoubleSeconds(elapsed);
  std::printf("relay_demo: moved %llu bytes socket -> pipe (%zu KiB) -> socket with "
              "IORING_OP_SPLICE in %.3f s (%.2f GB/s)\n",
              static_cast<unsigned long long>(relayed), pipe_bytes >> 10, seconds,
              seconds > 0 ? static_cast<double>(relayed) / seconds / 1e9 : 0.0);
  std::printf("relay_demo: receiver got %llu of %llu bytes, %llu mismatched\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(mismatches));
  if (error != 0 || received != total || mismatches != 0) {
    std::fprintf(stderr, "relay_demo: FAILED (error %d)\n", error);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ferry::Main();
}
