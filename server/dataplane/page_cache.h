// What of a file the page cache holds, asked without waiting for the disk: the data
// plane serves what is cached on its own thread and hands the rest to the disk's
// workers (server/storage/disk_reader.h), so a miss never stalls the connections a
// thread serves.
//
// Both probes are preadv2(RWF_NOWAIT), which reads only cached pages and says EAGAIN
// where it would have to wait for I/O. benchmarks/results/residency-probe.md measures
// them against cachestat(2) and mincore(2): cachestat walks every page of the range
// (about 12 us a MiB here, half of what splicing that MiB costs), mincore needs a
// mapping per call (34 us), while a one-byte RWF_NOWAIT read of a page costs 1 us.
#ifndef FERRY_SERVER_DATAPLANE_PAGE_CACHE_H_
#define FERRY_SERVER_DATAPLANE_PAGE_CACHE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace ferry {

// Whether [pos, pos + len) of `fd` looks cached: its first and its last page are. The
// kernel reads files in sequential windows, so a range whose two ends are in memory
// almost always is whole; when it is not, the splice of it waits for the few pages
// missing, as every read did before this probe.
bool LooksCached(int fd, uint64_t pos, size_t len);

// Reads from `fd` at `pos` into `buf` what the page cache holds, up to `len` bytes,
// stopping at the first page it does not hold or at the end of the file.
struct CachedRead {
  // Bytes read, or -errno for an error other than a miss.
  ssize_t bytes = 0;
  // True when the read stopped at a page that is not cached (the rest needs the disk);
  // false when it read all of `len`, reached the end of the file, or failed.
  bool missed = false;
};
CachedRead PreadCached(int fd, char* buf, size_t len, uint64_t pos);

}  // namespace ferry

#endif  // FERRY_SERVER_DATAPLANE_PAGE_CACHE_H_
