// Does splice beat read + send on this kernel, with no Ferry code in the way?
//
// Sender threads move a cached file over loopback TCP connections (one each) to reader
// threads, in chunks: splice(file -> pipe) + splice(pipe -> socket) (held back with
// SPLICE_F_MORE or with TCP_CORK per 16 MiB response), sendfile(2), or pread(file ->
// buffer) + send(buffer -> socket). Plain blocking syscalls, no fibers, no io_uring, no
// protocol: the kernel's own floor under Ferry's two modes, and the raw probe.
// Reports throughput and the first sender thread's CPU seconds per GB
// (getrusage(RUSAGE_THREAD)).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

double ProcessCpuSeconds() {
  rusage r;
  ::getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

struct CpuStart {
  double thread = ThreadCpuSeconds();
  double process = ProcessCpuSeconds();
};

// File `i` of up to 4: 256 MiB of pseudo-random bytes in $TMPDIR, written once per run
// so it is in the page cache. Each connection sends its own file: with one shared file,
// concurrent readers would copy the same pages and flatter the multi-connection runs
// with cache hits.
const std::string& CachedFile(int i = 0) {
  static std::string* paths[4] = {};
  FERRY_CHECK(i >= 0 && i < 4);
  if (paths[i] != nullptr) return *paths[i];
  const char* dir = std::getenv("TMPDIR");
  paths[i] = new std::string(std::string(dir != nullptr ? dir : "/tmp") + "/ferry_splice_vs_copy." +
                             std::to_string(i) + ".data");
  UniqueFd fd(::open(paths[i]->c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  FERRY_CHECK(fd.valid());
  std::string chunk(1 << 20, '\0');
  uint64_t x = 88172645463325252ull + static_cast<uint64_t>(i);
  for (size_t done = 0; done < kFileBytes; done += chunk.size()) {
    for (size_t k = 0; k < chunk.size(); k += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(chunk.data() + k, &x, 8);
    }
    FERRY_CHECK(::pwrite(fd.get(), chunk.data(), chunk.size(), static_cast<off_t>(done)) ==
                static_cast<ssize_t>(chunk.size()));
  }
  return *paths[i];
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

// Reports throughput (bytes across all connections, each of which moved the whole file)
// and the first sender thread's CPU per GB it moved, then closes the connections.
void Finish(benchmark::State& state, const CpuStart& cpu0, std::vector<Connection>& c) {
  const double gb = static_cast<double>(state.iterations()) * kFileBytes / 1e9;
  state.counters["sender_cpu_s_per_GB"] = (ThreadCpuSeconds() - cpu0.thread) / gb;
  // Senders, readers and the network stack's work done on their behalf, per GB moved
  // across all connections: the whole machine's cost of the transfer.
  state.counters["all_cpu_s_per_GB"] =
      (ProcessCpuSeconds() - cpu0.process) / (gb * static_cast<double>(c.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kFileBytes * c.size()));
  for (Connection& k : c) {
    k.sender.Reset();
    k.reader.join();
  }
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

// How a sender keeps TCP from pushing a segment per splice.
enum Hold : int64_t {
  kMore = 0,     // SPLICE_F_MORE on every splice to the socket; Nagle's algorithm on
  kCork = 1,     // TCP_CORK set for each 16 MiB "response", released at its end (the probe)
  kNoDelay = 2,  // SPLICE_F_MORE, but TCP_NODELAY on the socket all along
};

// Moves the whole file over `c` with splice through a pipe of `chunk` bytes.
void SpliceFile(int file, Connection& c, const Pipe& pipe, size_t chunk, Hold hold) {
  const bool cork = hold == kCork;
  constexpr size_t kResponseBytes = size_t{16} << 20;
  auto set_cork = [&](int on) {
    FERRY_CHECK(::setsockopt(c.sender.get(), IPPROTO_TCP, TCP_CORK, &on, sizeof(on)) == 0);
  };
  for (size_t off = 0; off < kFileBytes;) {
    if (cork && off % kResponseBytes == 0) set_cork(1);
    loff_t pos = static_cast<loff_t>(off);
    const ssize_t in = ::splice(file, &pos, pipe.write_fd(), nullptr, chunk, SPLICE_F_MOVE);
    FERRY_CHECK(in > 0);
    for (ssize_t left = in; left > 0;) {
      const ssize_t out =
          ::splice(pipe.read_fd(), nullptr, c.sender.get(), nullptr, static_cast<size_t>(left),
                   SPLICE_F_MOVE | (cork ? 0 : SPLICE_F_MORE));
      FERRY_CHECK(out > 0);
      left -= out;
    }
    off += static_cast<size_t>(in);
    if (cork && off % kResponseBytes == 0) set_cork(0);
  }
}

// Arg 0: chunk bytes (the pipe's capacity). Arg 1: Hold. Arg 2: connections, each with
// its own file, sender thread (the first is the benchmark's) and reader thread.
void BM_Splice(benchmark::State& state) {
  const size_t chunk = static_cast<size_t>(state.range(0));
  const Hold hold = static_cast<Hold>(state.range(1));
  const int conns = static_cast<int>(state.range(2));
  std::vector<UniqueFd> files;
  std::vector<Connection> c(static_cast<size_t>(conns));
  std::vector<Pipe> pipes;
  for (int i = 0; i < conns; ++i) {
    files.emplace_back(::open(CachedFile(i).c_str(), O_RDONLY | O_CLOEXEC));
    c[static_cast<size_t>(i)] = Connect();
    if (hold == kNoDelay) {
      const int one = 1;
      FERRY_CHECK(::setsockopt(c[static_cast<size_t>(i)].sender.get(), IPPROTO_TCP, TCP_NODELAY,
                               &one, sizeof(one)) == 0);
    }
    auto pipe = Pipe::Create(chunk);
    FERRY_CHECK(pipe.ok() && pipe->capacity_bytes() == chunk);
    pipes.push_back(*std::move(pipe));
  }
  const CpuStart cpu0;
  for (auto _ : state) {
    std::vector<std::thread> others;
    for (int i = 1; i < conns; ++i) {
      others.emplace_back([&, i] {
        const size_t k = static_cast<size_t>(i);
        SpliceFile(files[k].get(), c[k], pipes[k], chunk, hold);
      });
    }
    SpliceFile(files[0].get(), c[0], pipes[0], chunk, hold);
    for (std::thread& t : others) t.join();
  }
  Finish(state, cpu0, c);
}
BENCHMARK(BM_Splice)
    ->ArgsProduct({{16 << 10, 64 << 10, 256 << 10, 1 << 20}, {kMore, kCork, kNoDelay}, {1, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// sendfile(2): what nginx's `sendfile on` does; the kernel splices through a hidden
// per-task pipe. Arg 0: bytes per call.
void BM_Sendfile(benchmark::State& state) {
  const size_t chunk = static_cast<size_t>(state.range(0));
  UniqueFd file(::open(CachedFile().c_str(), O_RDONLY | O_CLOEXEC));
  std::vector<Connection> c(1);
  c[0] = Connect();
  const CpuStart cpu0;
  for (auto _ : state) {
    for (size_t off = 0; off < kFileBytes;) {
      off_t pos = static_cast<off_t>(off);
      const ssize_t n = ::sendfile(c[0].sender.get(), file.get(), &pos, chunk);
      FERRY_CHECK(n > 0);
      off += static_cast<size_t>(n);
    }
  }
  Finish(state, cpu0, c);
}
BENCHMARK(BM_Sendfile)->Arg(64 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

// Arg 0: buffer bytes. Arg 1: connections, as BM_Splice's arg 2.
void BM_ReadSend(benchmark::State& state) {
  const size_t chunk = static_cast<size_t>(state.range(0));
  const int conns = static_cast<int>(state.range(1));
  std::vector<UniqueFd> files;
  std::vector<Connection> c(static_cast<size_t>(conns));
  for (int i = 0; i < conns; ++i) {
    files.emplace_back(::open(CachedFile(i).c_str(), O_RDONLY | O_CLOEXEC));
    c[static_cast<size_t>(i)] = Connect();
  }
  auto send_file = [&](size_t i) {
    Connection& k = c[i];
    std::vector<char> buf(chunk);
    for (size_t off = 0; off < kFileBytes;) {
      const ssize_t n = ::pread(files[i].get(), buf.data(), chunk, static_cast<off_t>(off));
      FERRY_CHECK(n > 0);
      SendAllPlain(k.sender.get(), buf.data(), static_cast<size_t>(n), MSG_MORE);
      off += static_cast<size_t>(n);
    }
  };
  const CpuStart cpu0;
  for (auto _ : state) {
    std::vector<std::thread> others;
    for (int i = 1; i < conns; ++i) {
      others.emplace_back([&, i] { send_file(static_cast<size_t>(i)); });
    }
    send_file(0);
    for (std::thread& t : others) t.join();
  }
  Finish(state, cpu0, c);
}
BENCHMARK(BM_ReadSend)
    ->ArgsProduct({{64 << 10, 1 << 20}, {1, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace ferry
