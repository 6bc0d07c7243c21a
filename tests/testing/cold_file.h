// Files out of the page cache, for tests of what the server does when a read needs the
// disk.
#ifndef FERRY_TESTS_TESTING_COLD_FILE_H_
#define FERRY_TESTS_TESTING_COLD_FILE_H_

#include <sys/types.h>

#include "absl/status/status.h"

namespace ferry::testing {

// Drops [offset, offset + len) of the file open at `fd` from the page cache (len 0: to
// its end), syncing first, and checks that it is gone (with mincore(2), which unlike a
// read that misses starts no read-ahead).
// FAILED_PRECONDITION on a filesystem that keeps files in memory (tmpfs): the caller
// skips. Bounded: a few tries, since a page still being written back stays.
absl::Status Evict(int fd, off_t offset = 0, off_t len = 0);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_COLD_FILE_H_
