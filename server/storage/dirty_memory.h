// Whether a small write to the page cache may be done on a serving thread.
//
// A buffered write sleeps (balance_dirty_pages) once the machine's dirty pages pass
// halfway between the background writeback threshold and the dirty limit; below the
// background threshold it only copies into the page cache. This ext4 (and others) has no
// non-blocking buffered write, so io_uring hands every such write to an io-wq worker: two
// thread switches per write, most of a small pushed block's cost. A write is done inline
// while the dirty and writeback pages are below half the background threshold
// (vm.dirty_background_bytes, or vm.dirty_background_ratio of the available memory): far
// from any throttling. Read from /proc (tens of microseconds): sample it off the serving
// threads. A cgroup's own dirty limit (cgroup v2 writeback) is not read.
#ifndef FERRY_SERVER_STORAGE_DIRTY_MEMORY_H_
#define FERRY_SERVER_STORAGE_DIRTY_MEMORY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry {

// From /proc/meminfo's text and the two vm settings (0 when unset, as the kernel has them).
absl::StatusOr<bool> DirtyMemoryLow(absl::string_view meminfo, uint64_t background_bytes,
                                    uint64_t background_ratio);

// The same, read from this machine's /proc.
absl::StatusOr<bool> DirtyMemoryLow();

}  // namespace ferry

#endif  // FERRY_SERVER_STORAGE_DIRTY_MEMORY_H_
