// kevlar — internal: a per-thread cache of memory blocks for asynchronous executions.
#pragma once

#include <kevlar/detail/always_inline.hpp>

#include <cstddef>
#include <cstdint>
#include <new>

namespace kevlar::detail {

/// The calling thread's cache of recently freed blocks: per 64-byte size class (up to 1 KiB),
/// several per class. An execution has a handful of blocks alive at once (its own, a queue wait,
/// posted completions), more than Asio's default two-slot recycling cache holds, which would
/// otherwise send every queued handoff to malloc. Trivially destructible and constant-initialised,
/// so the inline fast paths below read it without a thread-local guard; the blocks it holds are
/// freed at thread exit by an object the slow path registers the first time the thread keeps one.
struct BlockCacheSlots {
  static constexpr std::size_t granule = 64;
  static constexpr std::size_t classes = 16;  // blocks up to 1 KiB
  static constexpr std::size_t slots = 8;
  void* blocks[classes][slots];  // NOLINT(*-avoid-c-arrays): plain data, constant-initialised
  std::uint8_t count[classes];   // NOLINT(*-avoid-c-arrays)
  bool keeping;                  ///< the thread-exit cleanup is registered and has not run
};

inline constinit thread_local BlockCacheSlots tl_block_cache{};

/// The size class of `size` minus one; classes or more for sizes the cache does not keep (0 too).
[[nodiscard]] constexpr std::size_t block_class(std::size_t size) noexcept {
  return (size + BlockCacheSlots::granule - 1) / BlockCacheSlots::granule - 1;
}

/// cache_allocate when the cache holds no block of the size: operator new.
[[nodiscard]] void* cache_allocate_slow(std::size_t size);
/// cache_deallocate when the block cannot be kept on the fast path (cleanup not yet registered,
/// class full, size not cached): registers the cleanup if needed, then keeps or frees the block.
void cache_deallocate_slow(void* p, std::size_t size) noexcept;

/// Allocates `size` bytes (alignment <= alignof(std::max_align_t)) from the calling thread's
/// cache, falling back to operator new.
[[nodiscard]] KEVLAR_DETAIL_ALWAYS_INLINE inline void* cache_allocate(std::size_t size) {
  const std::size_t c = block_class(size);
  if (c < BlockCacheSlots::classes) {
    BlockCacheSlots& t = tl_block_cache;
    if (t.count[c] != 0) return t.blocks[c][--t.count[c]];
  }
  return cache_allocate_slow(size);
}

/// Returns a block from cache_allocate (to this thread's cache if it has room). Never throws.
KEVLAR_DETAIL_ALWAYS_INLINE inline void cache_deallocate(void* p, std::size_t size) noexcept {
  const std::size_t c = block_class(size);
  if (c < BlockCacheSlots::classes) {
    BlockCacheSlots& t = tl_block_cache;
    if (t.keeping && t.count[c] < BlockCacheSlots::slots) {
      t.blocks[c][t.count[c]++] = p;
      return;
    }
  }
  cache_deallocate_slow(p, size);
}

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
