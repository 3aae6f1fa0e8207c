// kevlar — internal: a per-thread cache of memory blocks for asynchronous executions.
#pragma once

#include <cstddef>
#include <new>

namespace kevlar::detail {

/// Allocates `size` bytes (alignment <= alignof(std::max_align_t)) from the calling thread's
/// cache of recently freed blocks, falling back to operator new. Blocks are kept per 64-byte size
/// class (up to 1 KiB), several per class: an execution has a handful of blocks alive at once (its
/// own, a queue wait, posted completions), more than Asio's default two-slot recycling cache holds,
/// which would otherwise send every queued handoff to malloc.
void* cache_allocate(std::size_t size);
/// Returns a block from cache_allocate (to this thread's cache if it has room). Never throws.
void cache_deallocate(void* p, std::size_t size) noexcept;

/// A standard allocator over cache_allocate: the default allocator of kevlar's asynchronous
/// executions and of the operations they start, when the caller's handler brings none.
template <class T>
class CachingAllocator {
 public:
  using value_type = T;
  CachingAllocator() noexcept = default;
  template <class U>
  CachingAllocator(const CachingAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t), "over-aligned type");
    return static_cast<T*>(cache_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { cache_deallocate(p, n * sizeof(T)); }
  template <class U>
  struct rebind {
    using other = CachingAllocator<U>;
  };
  template <class U>
  bool operator==(const CachingAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const CachingAllocator<U>&) const noexcept {
    return false;
  }
};

}  // namespace kevlar::detail
