// DiskReader: the reads of file ranges the page cache does not hold, done by workers of
// the disk the file is on, never by a data-plane thread.
//
// A data-plane thread serves hundreds of connections; one of them waiting for the disk
// on it would stall all of them for the disk's latency. So the sender serves what the
// page cache holds itself (server/dataplane/page_cache.h) and hands each miss here: the file ->
// pipe leg of a spliced segment (the payload still never enters user space) or the read
// of a copied one. Its fiber waits on the job's completion like on any other I/O, and
// the thread serves its other connections meanwhile.
//
// Every disk (st_dev) gets its own bounded queue and workers, created when it first
// misses, so a slow, busy or failing disk delays only the blocks on it. Workers take
// queued reads by file and offset (BlockingPool's sweep), so concurrent reads of one
// file reach the disk in order and the kernel's read-ahead, shared by every stream of
// that file's one open description, merges them into large reads. On a disk whose own
// read-ahead window is smaller than readahead_bytes, the first miss of a segment also
// asks the kernel to read ahead the rest of it (POSIX_FADV_WILLNEED, up to
// readahead_bytes), so the disk is busy with the next chunk while this one is sent.
//
// A disk whose reads fail `unhealthy_after` times in a row is marked unhealthy (logged,
// in Stats() and so in the metrics and the health answer); its next successful read
// marks it healthy again. Its blocks are still tried: only the reads fail, each with an
// error naming the file and the disk.
//
// Thread-safe.
#ifndef FERRY_SERVER_STORAGE_DISK_READER_H_
#define FERRY_SERVER_STORAGE_DISK_READER_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/io/blocking_pool.h"
#include "server/ops/metrics.h"
#include "server/ops/stats.h"
#include "server/storage/segment.h"

namespace ferry {

// The error of a failed read of a shuffle file, `what` naming it: UNAVAILABLE for what a
// failing or vanished disk answers (EIO, ENXIO, ENODEV, ESTALE, ENOTCONN), since another
// attempt or another replica may succeed; otherwise as the errno says.
absl::Status FileReadError(int error, absl::string_view what);

// Each disk's metric families (docs/operations.md), read from `disks` (Stats()).
#define FERRY_DISK_STATS(COUNTER, COUNTER_BY, GAUGE, READ, READ_BY)                              \
  READ_BY("ferry_disk_queued_reads",                                                             \
          "Reads of uncached file ranges waiting for the disk's workers.", kGauge, "disk",       \
          ByDisk(disks, [](const DiskStats& d) { return d.queued; }))                            \
  READ_BY("ferry_disk_reads_total", "Reads of uncached file ranges done by the disk's workers.", \
          kCounter, "disk", ByDisk(disks, [](const DiskStats& d) { return d.reads; }))           \
  READ_BY("ferry_disk_read_bytes_total", "Bytes the disk's workers read.", kCounter, "disk",     \
          ByDisk(disks, [](const DiskStats& d) { return d.bytes; }))                             \
  READ_BY("ferry_disk_read_errors_total", "Reads of the disk that failed.", kCounter, "disk",    \
          ByDisk(disks, [](const DiskStats& d) { return d.errors; }))                            \
  READ_BY("ferry_disk_healthy", "0 while the disk's reads keep failing, 1 otherwise.", kGauge,   \
          "disk", ByDisk(disks, [](const DiskStats& d) { return d.healthy ? 1 : 0; }))

class DiskReader {
 public:
  struct Options {
    // Workers per disk: the reads one disk has in flight at most, beside its read-ahead.
    size_t workers_per_disk = 8;
    // Reads waiting for one disk's workers; past that a read fails RESOURCE_EXHAUSTED.
    size_t max_queued_per_disk = 4096;
    // How far past a segment's first miss the kernel is asked to read ahead
    // (POSIX_FADV_WILLNEED), on a disk whose own read-ahead window (read_ahead_kb) is
    // smaller; 0: never.
    uint64_t readahead_bytes = uint64_t{8} << 20;
    // Consecutive failed reads that mark a disk unhealthy.
    uint32_t unhealthy_after = 3;
    // Disks with queues of their own; files on any further ones share one more queue.
    size_t max_disks = 256;

    // INVALID_ARGUMENT naming the flag of a field out of range.
    absl::Status Validate() const;
  };

  explicit DiskReader(const Options& options);
  DiskReader(const DiskReader&) = delete;
  DiskReader& operator=(const DiskReader&) = delete;
  ~DiskReader();

  // Moves up to `len` bytes of `file` at `pos` into an empty pipe whose write end is
  // `pipe_write_fd`, on a worker of the file's disk. The job holds the file and a
  // duplicate of that end, so a caller whose wait ended early may let go of both; the
  // pipe may then be written still and must not be reused. `readahead` bytes past `pos` (0: none)
  // are read ahead first. The bytes moved (0 at the end of the file), or an error naming the file
  // and the disk: the read's errno, RESOURCE_EXHAUSTED when the disk's queue is full,
  // DEADLINE_EXCEEDED past `deadline`, CANCELLED when the server stops. Call from a fiber.
  absl::StatusOr<size_t> SpliceToPipe(std::shared_ptr<const DataFile> file, uint64_t pos,
                                      size_t len, int pipe_write_fd, uint64_t readahead,
                                      absl::Time deadline);
  // Reads `len` bytes of `file` at `pos` into `buffer` (which the job shares, so it
  // outlives a wait that ended early): the bytes read, fewer only at the end of the
  // file; errors as SpliceToPipe's.
  absl::StatusOr<size_t> Read(std::shared_ptr<const DataFile> file, uint64_t pos,
                              std::shared_ptr<char[]> buffer, size_t len, uint64_t readahead,
                              absl::Time deadline);

  uint64_t readahead_bytes() const { return options_.readahead_bytes; }

  struct DiskStats {
    std::string name;  // the block device ("vda"), or major:minor when it has none
    uint64_t queued = 0;
    uint64_t reads = 0;  // reads done (each a job: one chunk of a segment)
    uint64_t bytes = 0;
    uint64_t errors = 0;
    bool healthy = true;
    std::string last_error;  // the file and errno of the last failed read; "" if none
  };
  // Every disk that has missed so far.
  std::vector<DiskStats> Stats() const;
  // Its metric families (docs/operations.md): each disk's queue, reads and health.
  void AppendMetrics(std::vector<MetricFamilySamples>* out) const;

 private:
  struct Disk;
  Disk& DiskOf(const DataFile& file);
  template <typename ReadFn>
  absl::StatusOr<size_t> Submit(std::shared_ptr<const DataFile> file, uint64_t pos, size_t len,
                                uint64_t readahead, absl::Time deadline, const char* what,
                                ReadFn read);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Disk>> disks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_DISK_READER_H_
