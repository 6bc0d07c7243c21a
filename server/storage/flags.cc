// The storage flags: the disk readers (DiskReader::Options) and the map-output cache
// (BlockStore::Options). common/option_flags.h says how they bind.
#include "common/option_flags.h"
#include "server/storage/block_store.h"
#include "server/storage/disk_reader.h"

FERRY_OPTION_FLAG(ferry::DiskReader::Options, disk_workers, workers_per_disk,
                  "Threads per disk that read what the page cache does not hold.");
FERRY_OPTION_FLAG(ferry::DiskReader::Options, disk_queue, max_queued_per_disk,
                  "Reads waiting for one disk's workers; more fail RESOURCE_EXHAUSTED.");
FERRY_OPTION_FLAG(ferry::DiskReader::Options, disk_readahead, readahead_bytes,
                  "Bytes of a segment the kernel is asked to read ahead at its first page-cache "
                  "miss (POSIX_FADV_WILLNEED), on disks whose own read_ahead_kb is smaller; 0: "
                  "only the kernel's own read-ahead.");
FERRY_OPTION_FLAG(ferry::DiskReader::Options, disk_unhealthy_after, unhealthy_after,
                  "Consecutive failed reads that mark a disk unhealthy (logged, in the "
                  "metrics and the health answer) until one of its reads succeeds.");
FERRY_OPTION_FLAG(ferry::DiskReader::Options, max_disks, max_disks,
                  "Disks with read queues of their own; files on any further ones share one "
                  "more queue.");

FERRY_OPTION_FLAG(ferry::BlockStore::Options, max_open_files, max_cached_map_outputs,
                  "Map outputs kept in the cache, each an index with its data file open. "
                  "Lowered at start when the open-file limit cannot hold them.");
