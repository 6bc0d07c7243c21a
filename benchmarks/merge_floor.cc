// merge_floor: the least any merger of Spark's pushes asks of the file system, the floor
// under the service CPU of benchmarks/spark_jobs' small job. Given a merged shuffle's
// data files, one plain thread makes each partition's three files again beside them
// and appends the same bytes as the pushes brought them: map by map, each map's piece
// of every partition in partition order (as a map's pusher sends its blocks), a pwrite
// each; then each partition's index entry and bitmap (its finalize). No socket, no
// bookkeeping, no answers: only what the kernel charges for the files and the bytes.
//
//   merge_floor --maps=N [--prefix=floor-] DATA_FILE...
//
// DATA_FILE: shuffleMerged_<app>_<shuffle>_<merge>_<reduce>.data; its length is cut in
// --maps pieces (the last takes the rest). The new files are <dir>/<prefix><name>.{data,
// index,meta}, made with O_EXCL and left in place (deleting them here would charge the
// next creates in these directories, see benchlib.settle_file_system). Prints one JSON
// line: {"files": F, "bytes": B, "writes": W, "cpu_s": S}, S the user and system CPU
// seconds from the first create to the last write.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/flag_names.h"
#include "common/pread_full.h"
#include "common/unique_fd.h"

ABSL_FLAG(int32_t, maps, 0, "Map tasks that pushed into each partition: the pieces of its bytes.");
ABSL_FLAG(std::string, prefix, "floor-", "Put before each new file's name.");

namespace ferry {
namespace {

double CpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Partition {
  UniqueFd data, index, meta;
  uint64_t bytes = 0;
  uint64_t written = 0;
};

int Main(const std::vector<std::string>& files) {
  const int32_t maps = absl::GetFlag(FLAGS_maps);
  const std::string prefix = absl::GetFlag(FLAGS_prefix);
  if (maps <= 0 || files.empty() || prefix.empty() || absl::StrContains(prefix, '/')) {
    std::fprintf(stderr,
                 "usage: merge_floor --maps=N [--prefix=P] DATA_FILE... (N > 0; P a name's "
                 "start)\n");
    return 2;
  }
  std::vector<Partition> partitions(files.size());
  uint64_t largest = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    struct stat st {};
    if (!absl::EndsWith(files[i], ".data") || ::stat(files[i].c_str(), &st) != 0 ||
        !S_ISREG(st.st_mode)) {
      std::fprintf(stderr, "merge_floor: %s is no merged data file\n", files[i].c_str());
      return 1;
    }
    partitions[i].bytes = static_cast<uint64_t>(st.st_size);
    largest = std::max(largest, partitions[i].bytes / static_cast<uint64_t>(maps) +
                                    partitions[i].bytes % static_cast<uint64_t>(maps));
  }
  const std::vector<char> piece(std::max<uint64_t>(largest, 64), 'f');
  uint64_t writes = 0;
  const auto write = [&](const UniqueFd& fd, uint64_t length, uint64_t offset, const char* what) {
    ++writes;
    if (PwriteFull(fd.get(), piece.data(), length, offset) == static_cast<ssize_t>(length)) {
      return true;
    }
    std::perror(what);
    return false;
  };

  const double start = CpuSeconds();
  for (size_t i = 0; i < files.size(); ++i) {
    const absl::string_view path = files[i];
    const size_t slash = path.rfind('/');
    const std::string base =
        absl::StrCat(path.substr(0, slash + 1), prefix,
                     path.substr(slash + 1, path.size() - slash - 1 - std::string(".data").size()));
    UniqueFd* fds[] = {&partitions[i].data, &partitions[i].index, &partitions[i].meta};
    const char* suffixes[] = {".data", ".index", ".meta"};
    for (int f = 0; f < 3; ++f) {
      const std::string name = absl::StrCat(base, suffixes[f]);
      *fds[f] = UniqueFd(::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
      if (!fds[f]->valid()) {
        std::perror(name.c_str());
        return 1;
      }
    }
  }
  for (int32_t m = 0; m < maps; ++m) {
    for (Partition& p : partitions) {
      const uint64_t share = p.bytes / static_cast<uint64_t>(maps);
      const uint64_t length = m + 1 == maps ? p.bytes - p.written : share;
      if (length > 0 && !write(p.data, length, p.written, "append")) return 1;
      p.written += length;
    }
  }
  // The finalize: two index offsets and a small bitmap a partition.
  for (const Partition& p : partitions) {
    if (!write(p.index, 16, 0, "index") || !write(p.meta, 64, 0, "meta")) return 1;
  }
  const double cpu = CpuSeconds() - start;
  uint64_t bytes = 0;
  for (const Partition& p : partitions) bytes += p.bytes;
  std::printf("{\"files\": %zu, \"bytes\": %llu, \"writes\": %llu, \"cpu_s\": %.4f}\n",
              3 * partitions.size(), static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(writes), cpu);
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  std::vector<std::string> args = ferry::ParseFlags(argc, argv);
  return ferry::Main(std::vector<std::string>(args.begin() + 1, args.end()));
}
