// Pipe: the two ends of one kernel pipe, owned, plus the capacity the kernel granted.
//
// splice(2) needs a pipe on one side, so every zero-copy move in Ferry travels
// file -> pipe -> socket (or socket -> pipe -> file). The pipe's capacity bounds how
// many bytes one splice pass can move, so it is sized on purpose with F_SETPIPE_SZ.
//
// Invariant kept by users: a pipe that may still hold bytes after an error is closed,
// never reused for another transfer. Move-only; not thread-safe.
#ifndef FERRY_COMMON_PIPE_H_
#define FERRY_COMMON_PIPE_H_

#include <cstddef>
#include <type_traits>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace ferry {

class Pipe {
 public:
  // Creates a pipe (O_CLOEXEC plus `extra_flags`, e.g. O_NONBLOCK) and asks for
  // `capacity_bytes`. When the kernel refuses that size (EPERM: above
  // /proc/sys/fs/pipe-max-size for an unprivileged process, or over the user's pipe
  // page budget), it falls back to the largest size pipe-max-size allows, then to the
  // default. The granted capacity (a power-of-two number of pages) is capacity_bytes().
  static absl::StatusOr<Pipe> Create(size_t capacity_bytes, int extra_flags = 0);

  // The largest capacity an unprivileged process may ask for
  // (/proc/sys/fs/pipe-max-size), or 1 MiB when it cannot be read.
  static size_t MaxCapacityBytes();

  Pipe(Pipe&&) noexcept = default;
  Pipe& operator=(Pipe&&) noexcept = default;

  int read_fd() const { return read_.get(); }
  int write_fd() const { return write_.get(); }
  size_t capacity_bytes() const { return capacity_bytes_; }

  // Bytes currently buffered in the pipe (FIONREAD), or -errno.
  [[nodiscard]] int BufferedBytes() const;

 private:
  Pipe(UniqueFd read, UniqueFd write, size_t capacity_bytes)
      : read_(std::move(read)), write_(std::move(write)), capacity_bytes_(capacity_bytes) {}

  UniqueFd read_;
  UniqueFd write_;
  size_t capacity_bytes_ = 0;
};

static_assert(!std::is_copy_constructible_v<Pipe>);
static_assert(std::is_nothrow_move_constructible_v<Pipe>);

}  // namespace ferry

#endif  // FERRY_COMMON_PIPE_H_
