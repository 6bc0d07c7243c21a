// UniqueFd: sole owner of one file descriptor; closes it when destroyed.
//
// Move-only. There is no "maybe owns" state: a borrowed descriptor is a plain `int`.
// Every descriptor Ferry opens is opened with O_CLOEXEC / SOCK_CLOEXEC.
// Not thread-safe (as an int is not): one owner at a time.
#ifndef FERRY_COMMON_UNIQUE_FD_H_
#define FERRY_COMMON_UNIQUE_FD_H_

#include <type_traits>
#include <utility>

namespace ferry {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  // The descriptor, or -1. Ownership stays here.
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Gives up ownership and returns the descriptor (or -1).
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }

  // Closes the owned descriptor (if any) and takes `fd`.
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

static_assert(!std::is_copy_constructible_v<UniqueFd>);
static_assert(std::is_nothrow_move_constructible_v<UniqueFd>);
static_assert(std::is_nothrow_move_assignable_v<UniqueFd>);

}  // namespace ferry

#endif  // FERRY_COMMON_UNIQUE_FD_H_
