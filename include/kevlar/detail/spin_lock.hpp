// kevlar — internal: the short lock of kevlar's queues (the semaphore's slow path, the deadline
// queue).
#pragma once

#include <atomic>
#include <thread>

namespace kevlar::detail {

/// Pauses a spinning thread briefly (a hint to the CPU; no syscall).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield");
#endif
}

/// A test-and-test-and-set lock with a short spin, then yielding. Locking costs one atomic
/// exchange and unlocking one plain release store, where a pthread mutex pays an atomic
/// read-modify-write for each, a call into the C library for each, and a futex call when
/// contended. A holder that is preempted (or that spends a while in a rare long section) makes
/// contenders yield, not burn a time slice.
///
/// Use it only for critical sections that are a handful of pointer and word updates on the common
/// path; a section that may block for long (a syscall on every entry) belongs under a mutex.
/// Not recursive. Satisfies BasicLockable, so std::lock_guard and std::unique_lock work with it.
class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < spin_limit) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int spin_limit = 64;
  std::atomic<bool> locked_{false};
};

}  // namespace kevlar::detail
