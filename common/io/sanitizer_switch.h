// Tells AddressSanitizer and ThreadSanitizer what they cannot see: fiber stack switches
// (without them ASan reports false stack-buffer errors after a switch and TSan loses
// track of which stack runs) and io_uring ring memory that liburing unmaps with a raw
// syscall. Every function compiles to nothing in a plain build.
#ifndef FERRY_COMMON_IO_SANITIZER_SWITCH_H_
#define FERRY_COMMON_IO_SANITIZER_SWITCH_H_

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define FERRY_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define FERRY_TSAN 1
#endif

namespace ferry::internal {

#ifdef FERRY_ASAN
inline void AsanStartSwitch(void** fake_stack_save, const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
}
inline void AsanFinishSwitch(void* fake_stack_save, const void** old_bottom, size_t* old_size) {
  __sanitizer_finish_switch_fiber(fake_stack_save, old_bottom, old_size);
}
// Clears the redzones a finished fiber's frames left on its stack, so memory reused for
// another fiber (or unmapped and mapped again for something else) starts clean.
inline void AsanUnpoison(const void* addr, size_t size) {
  __asan_unpoison_memory_region(addr, size);
}
#else
inline void AsanStartSwitch(void**, const void*, size_t) {}
inline void AsanFinishSwitch(void*, const void**, size_t*) {}
inline void AsanUnpoison(const void*, size_t) {}
#endif

#ifdef FERRY_TSAN
inline void* TsanCurrentFiber() { return __tsan_get_current_fiber(); }
inline void* TsanCreateFiber() { return __tsan_create_fiber(0); }
inline void TsanDestroyFiber(void* fiber) { __tsan_destroy_fiber(fiber); }
inline void TsanSwitchToFiber(void* fiber) { __tsan_switch_to_fiber(fiber, 0); }
inline void TsanRelease(void* addr) { __tsan_release(addr); }
inline void TsanAcquire(void* addr) { __tsan_acquire(addr); }
#else
inline void* TsanCurrentFiber() { return nullptr; }
inline void* TsanCreateFiber() { return nullptr; }
inline void TsanDestroyFiber(void*) {}
inline void TsanSwitchToFiber(void*) {}
inline void TsanRelease(void*) {}
inline void TsanAcquire(void*) {}
#endif

}  // namespace ferry::internal

#endif  // FERRY_COMMON_IO_SANITIZER_SWITCH_H_
