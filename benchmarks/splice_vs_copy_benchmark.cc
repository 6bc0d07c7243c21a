// Does splice beat read + send on this kernel, with no Ferry code in the way?
//
// One sender thread moves a cached file over a loopback TCP connection to a reader
// thread, in chunks: splice(file -> pipe) + splice(pipe -> socket), sendfile(2), or
// pread(file -> buffer) + send(buffer -> socket). Plain blocking syscalls, no fibers, no
// io_uring: the kernel's own floor under Ferry's two modes. Reports throughput and the
// sender thread's CPU seconds per GB (getrusage(RUSAGE_THREAD)).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "common/pipe.h"
#include "common/unique_fd.h"

namespace ferry {
namespace {

constexpr size_t kFileBytes = size_t{256} << 20;

double ThreadCpuSeconds() {
  rusage r;
  ::getrusage(RUSAGE_THREAD, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

// A 256 MiB file of pseudo-random bytes in $TMPDIR, read once so it is in the page cache.
const std::string& CachedFile() {
  static const std::string* path = [] {
    const char* dir = std::getenv("TMPDIR");
    auto* p = new std::string(std::string(dir != nullptr ? dir : "/tmp") +
                              "/ferry_splice_vs_copy.data");
    UniqueFd fd(::open(p->c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    FERRY_CHECK(fd.valid());
    std::string chunk(1 << 20, '\0');
    uint64_t x = 88172645463325252ull;
    for (size_t done = 0; done < kFileBytes; done += chunk.size()) {
      for (size_t i = 0; i < chunk.size(); i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::memcpy(chunk.data() + i, &x, 8);
      }
      FERRY_CHECK(::pwrite(fd.get(), chunk.data(), chunk.size(), static_cast<off_t>(done)) ==
                  static_cast<ssize_t>(chunk.size()));
    }
    return p;
  }();
  return *path;
}

struct Connection {
  UniqueFd sender;
  std::thread reader;
};

Connection Connect() {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  FERRY_CHECK(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
  FERRY_CHECK(::listen(listener.get(), 1) == 0);
  FERRY_CHECK(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  Connection c;
  c.reader = std::thread([addr] {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    FERRY_CHECK(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    std::vector<char> buf(1 << 20);
    for (;;) {
      const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
    }
  });
  c.sender.Reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  FERRY_CHECK(c.sender.valid());
  return c;
}

// Reports throughput and the sender's CPU per GB, then closes the connection.
void Finish(benchmark::State& state, double cpu0, Connection& c) {
  const double gb = static_cast<double>(state.iterations()) * kFileBytes / 1e9;
  state.counters["sender_cpu_s_per_GB"] = (ThreadCpuSeconds() - cpu0) / gb;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kFileBytes));
  c.sender.Reset();
  c.reader.join();
}

void SendAllPlain(int sock, const char* p, size_t n, int flags) {
  while (n > 0) {
    const ssize_t m = ::send(sock, p, n, MSG_NOSIGNAL | flags);
    if (m < 0 && errno == EINTR) continue;
    FERRY_CHECK(m > 0);
    p += m;
    n -= static_cast<size_t>(m);
  }
}

// Arg 0: chunk bytes (the pipe's capacity, or the copy buffer).
void BM_Splice(benchmark::State& state) {
  const size_t chunk = static_cast<size_t>(state.range(0));
  UniqueFd file(::open(CachedFile().c_str(), O_RDONLY | O_CLOEXEC));
  auto pipe = Pipe::Create(chunk);
  FERRY_CHECK(pipe.ok() && pipe->capacity_bytes() == chunk);
  Connection c = Connect();
  const double cpu0 = ThreadCpuSeconds();
  for (auto _ : state) {
    for (size_t off = 0; off < kFileBytes;) {
      loff_t pos = static_cast<loff_t>(off);
      const ssize_t in =
          ::splice(file.get(), &pos, pipe->write_fd(), nullptr, chunk, SPLICE_F_MOVE);
      FERRY_CHECK(in > 0);
      for (ssize_t left = in; left > 0;) {
        const ssize_t out = ::splice(pipe->read_fd(), nullptr, c.sender.get(), nullptr,
                                     static_cast<size_t>(left), SPLICE_F_MOVE | SPLICE_F_MORE);
        FERRY_CHECK(out > 0);
        left -= out;
      }
      off += static_cast<size_t>(in);
    }
  }
  Finish(state, cpu0, c);
}
BENCHMARK(BM_Splice)->Arg(64 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

// sendfile(2): what nginx's `sendfile on` does; the kernel splices through a hidden
// per-task pipe. Arg 0: bytes per call.
void BM_Sendfile(benchmark::State& state) {
  const size_t chunk = static_cast<size_t>(state.range(0));
  UniqueFd file(::open(CachedFile().c_str(), O_RDONLY | O_CLOEXEC));
  Connection c = Connect();
  const double cpu0 = ThreadCpuSeconds();
  for (auto _ : state) {
    for (size_t off = 0; off < kFileBytes;) {
      off_t pos = static_cast<off_t>(off);
      const ssize_t n = ::sendfile(c.sender.get(), file.get(), &pos, chunk);
      FERRY_CHECK(n > 0);
      off += static_cast<size_t>(n);
    }
  }
  Finish(state, cpu0, c);
}
BENCHMARK(BM_Sendfile)->Arg(64 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReadSend(benchmark::State& state) {
  const size_t chunk = static_cast<size_t>(state.range(0));
  UniqueFd file(::open(CachedFile().c_str(), O_RDONLY | O_CLOEXEC));
  std::vector<char> buf(chunk);
  Connection c = Connect();
  const double cpu0 = ThreadCpuSeconds();
  for (auto _ : state) {
    for (size_t off = 0; off < kFileBytes;) {
      const ssize_t n = ::pread(file.get(), buf.data(), chunk, static_cast<off_t>(off));
      FERRY_CHECK(n > 0);
      SendAllPlain(c.sender.get(), buf.data(), static_cast<size_t>(n), MSG_MORE);
      off += static_cast<size_t>(n);
    }
  }
  Finish(state, cpu0, c);
}
BENCHMARK(BM_ReadSend)->Arg(64 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ferry
