// FiberStack: one mmap'd fiber stack with a PROT_NONE guard page below it, and
// StackPool, a bounded free list of them so spawning a fiber costs no syscall.
//
// A stack overflow runs into the guard page and faults (SIGSEGV) instead of silently
// corrupting the memory below. Stacks grow down, so the guard sits at the lowest
// address and `top()` is where a new context starts.
//
// Not thread-safe: each FiberScheduler owns its pool.
#ifndef FERRY_COMMON_IO_FIBER_STACK_H_
#define FERRY_COMMON_IO_FIBER_STACK_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"

namespace ferry {

class FiberStack {
 public:
  // Maps `usable_bytes` (rounded up to whole pages) plus one guard page.
  static absl::StatusOr<FiberStack> Allocate(size_t usable_bytes);

  FiberStack() = default;
  FiberStack(FiberStack&& other) noexcept;
  FiberStack& operator=(FiberStack&& other) noexcept;
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  ~FiberStack();

  // Lowest usable address (just above the guard page) and the usable size.
  void* bottom() const { return static_cast<char*>(base_) + guard_bytes_; }
  size_t usable_bytes() const { return mapped_bytes_ - guard_bytes_; }
  void* top() const { return static_cast<char*>(base_) + mapped_bytes_; }
  // The guard page's range [guard_begin, guard_begin + guard_bytes).
  const void* guard_begin() const { return base_; }
  size_t guard_bytes() const { return guard_bytes_; }
  bool valid() const { return base_ != nullptr; }

 private:
  FiberStack(void* base, size_t mapped_bytes, size_t guard_bytes)
      : base_(base), mapped_bytes_(mapped_bytes), guard_bytes_(guard_bytes) {}
  void Release();

  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  size_t guard_bytes_ = 0;
};

class StackPool {
 public:
  StackPool(size_t stack_bytes, size_t max_cached)
      : stack_bytes_(stack_bytes), max_cached_(max_cached) {}

  // A cached stack, or a newly mapped one.
  absl::StatusOr<FiberStack> Take();
  // Keeps `stack` for reuse, or unmaps it when the cache is full.
  void Give(FiberStack stack);

  size_t stack_bytes() const { return stack_bytes_; }

 private:
  size_t stack_bytes_;
  size_t max_cached_;
  std::vector<FiberStack> free_;
};

}  // namespace ferry

#endif  // FERRY_COMMON_IO_FIBER_STACK_H_
