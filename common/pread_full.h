// PreadFull: pread(2) until `len` bytes are read or the file ends, retrying EINTR;
// PwriteFull: pwrite(2) until every byte is written.
#ifndef FERRY_COMMON_PREAD_FULL_H_
#define FERRY_COMMON_PREAD_FULL_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace ferry {

// Reads `len` bytes of `fd` at `offset` into `buf`: the count read (fewer than `len`
// only where the file ends) or -errno.
ssize_t PreadFull(int fd, char* buf, size_t len, uint64_t offset);

// Writes `len` bytes of `buf` to `fd` at `offset`: `len`, or -errno (-EIO for a write
// that took nothing).
ssize_t PwriteFull(int fd, const char* buf, size_t len, uint64_t offset);

}  // namespace ferry

#endif  // FERRY_COMMON_PREAD_FULL_H_
