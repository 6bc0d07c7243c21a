#include "common/io/fiber_stack.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/io/sanitizer_switch.h"

namespace ferry {

absl::StatusOr<FiberStack> FiberStack::Allocate(size_t usable_bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t usable = (usable_bytes + page - 1) / page * page;
  const size_t mapped = usable + page;
  // MAP_NORESERVE + MAP_STACK: pages are only backed once touched, so a large stack
  // costs address space, not memory, until a fiber really uses it.
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mmap fiber stack of ", mapped, " bytes"));
  }
  if (::mprotect(base, page, PROT_NONE) != 0) {
    const int err = errno;
    ::munmap(base, mapped);
    return absl::ErrnoToStatus(err, "mprotect fiber stack guard page");
  }
  return FiberStack(base, mapped, page);
}

FiberStack::FiberStack(FiberStack&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      guard_bytes_(std::exchange(other.guard_bytes_, 0)) {}

FiberStack& FiberStack::operator=(FiberStack&& other) noexcept {
  if (this != &other) {
    Release();
    base_ = std::exchange(other.base_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    guard_bytes_ = std::exchange(other.guard_bytes_, 0);
  }
  return *this;
}

FiberStack::~FiberStack() { Release(); }

void FiberStack::Release() {
  if (base_ == nullptr) return;
  internal::AsanUnpoison(bottom(), usable_bytes());
  ::munmap(base_, mapped_bytes_);
  base_ = nullptr;
}

absl::StatusOr<FiberStack> StackPool::Take() {
  if (!free_.empty()) {
    FiberStack stack = std::move(free_.back());
    free_.pop_back();
    internal::AsanUnpoison(stack.bottom(), stack.usable_bytes());
    return stack;
  }
  return FiberStack::Allocate(stack_bytes_);
}

void StackPool::Give(FiberStack stack) {
  if (free_.size() < max_cached_) free_.push_back(std::move(stack));
}

}  // namespace ferry
