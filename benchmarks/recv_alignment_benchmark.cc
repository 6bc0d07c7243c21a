// recv_alignment_benchmark: what a receiver pays per GB for the same spliced stream,
// by where its buffer sits against the pages the bytes come from.
//
// A sender thread splices a cached file (page-aligned, as Ferry's and nginx's blocks of
// whole MiBs are) file -> 1 MiB pipe -> loopback socket; the reader receives into
// `buffer + shift` with reads of a whole number of pages, so every byte lands `shift`
// bytes past its offset in its page cache page. Prints, per shift, the reader thread's
// CPU seconds per GB (CLOCK_THREAD_CPUTIME_ID: the kernel's copy to user space is most
// of it) and GB/s, as the median of --rounds interleaved rounds.
//
//   bazel build --config=opt //benchmarks:recv_alignment_benchmark
//   bazel-bin/benchmarks/recv_alignment_benchmark --rounds=5 [--shifts=0,8,...]
//
// results/receiver.md has what it found and why it matters.
#include <fcntl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/check.h"
#include "common/flag_names.h"
#include "common/pipe.h"
#include "common/unique_fd.h"
#include "tests/testing/loopback.h"

ABSL_FLAG(int, rounds, 5, "Interleaved rounds; each shift is measured once per round.");
ABSL_FLAG(std::string, shifts, "0,8,16,24,32,40,48,56,64,128,1024,2048,4032,4056,4088",
          "Bytes between a byte's offset in its page and its offset in the reader's buffer.");
ABSL_FLAG(int64_t, file_mib, 256, "Size of the cached file each round streams.");
ABSL_FLAG(std::string, dir, "/tmp", "Where the file is written.");

namespace ferry {
namespace {

double ThreadCpuSeconds() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Result {
  double reader_cpu_s_per_gb;
  double gbps;
};

// Streams the whole file once over a fresh loopback connection; the reader receives at
// `shift` bytes into a page-aligned buffer.
Result StreamOnce(int file, uint64_t bytes, size_t shift) {
  uint16_t port = 0;
  UniqueFd listener = testing::ListenLoopback(&port, 1);
  UniqueFd sock = testing::ConnectLoopback(port);
  std::thread sender([&] {
    UniqueFd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    FERRY_CHECK(peer.valid());
    auto pipe = Pipe::Create(size_t{1} << 20);
    FERRY_CHECK(pipe.ok());
    for (uint64_t off = 0; off < bytes;) {
      loff_t pos = static_cast<loff_t>(off);
      const ssize_t in =
          ::splice(file, &pos, pipe->write_fd(), nullptr, size_t{1} << 20, SPLICE_F_MOVE);
      FERRY_CHECK(in > 0);
      for (ssize_t left = in; left > 0;) {
        const ssize_t out = ::splice(pipe->read_fd(), nullptr, peer.get(), nullptr,
                                     static_cast<size_t>(left), SPLICE_F_MOVE | SPLICE_F_MORE);
        FERRY_CHECK(out > 0);
        left -= out;
      }
      off += static_cast<uint64_t>(in);
    }
  });
  constexpr size_t kRead = size_t{1} << 20;
  void* raw = nullptr;
  FERRY_CHECK(::posix_memalign(&raw, 4096, kRead + 4096) == 0);
  char* buffer = static_cast<char*>(raw);
  const double cpu0 = ThreadCpuSeconds();
  const absl::Time start = absl::Now();
  uint64_t got = 0;
  while (got < bytes) {
    // Whole pages at a time: every read starts at a page boundary of the stream, so
    // the shift holds for every byte.
    const uint64_t want = std::min<uint64_t>(kRead, bytes - got);
    ssize_t n = ::recv(sock.get(), buffer + shift, want, 0);
    if (n < 0 && errno == EINTR) continue;
    FERRY_CHECK(n > 0);
    // A short read leaves the stream mid-page: read on to the next page boundary.
    while (n % 4096 != 0 && got + static_cast<uint64_t>(n) < bytes) {
      const ssize_t m = ::recv(sock.get(), buffer + shift + n, 4096 - n % 4096, MSG_WAITALL);
      FERRY_CHECK(m > 0);
      n += m;
    }
    got += static_cast<uint64_t>(n);
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = ThreadCpuSeconds() - cpu0;
  sender.join();
  std::free(raw);
  const double gb = static_cast<double>(bytes) / 1e9;
  return {cpu / gb, gb / seconds};
}

int Main() {
  std::vector<size_t> shifts;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_shifts), ',')) {
    size_t v = 0;
    FERRY_CHECK(absl::SimpleAtoi(s, &v) && v < 4096);
    shifts.push_back(v);
  }
  const uint64_t bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_file_mib)) << 20;
  const std::string path = absl::GetFlag(FLAGS_dir) + "/recv_alignment_benchmark.data";
  {
    UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    FERRY_CHECK(out.valid());
    std::vector<char> chunk(size_t{1} << 20);
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 131 + 7);
    for (uint64_t done = 0; done < bytes; done += chunk.size()) {
      FERRY_CHECK(::write(out.get(), chunk.data(), chunk.size()) ==
                  static_cast<ssize_t>(chunk.size()));
    }
  }
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  FERRY_CHECK(file.valid());
  (void)StreamOnce(file.get(), bytes, 0);  // warm the page cache and the path
  std::map<size_t, std::vector<Result>> results;
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < shifts.size(); ++k) {
      const size_t shift = shifts[(k + static_cast<size_t>(r)) % shifts.size()];
      results[shift].push_back(StreamOnce(file.get(), bytes, shift));
    }
  }
  ::unlink(path.c_str());
  std::printf("| shift (bytes) | reader CPU s/GB | GB/s |\n|---|---|---|\n");
  for (size_t shift : shifts) {
    std::vector<Result>& v = results[shift];
    auto median = [&](auto field) {
      std::vector<double> x;
      for (const Result& e : v) x.push_back(e.*field);
      std::sort(x.begin(), x.end());
      return x[x.size() / 2];
    };
    std::printf("| %zu | %.3f | %.2f |\n", shift, median(&Result::reader_cpu_s_per_gb),
                median(&Result::gbps));
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  ferry::ParseFlags(argc, argv);
  return ferry::Main();
}
