#include <kevlar/detail/block_cache.hpp>

namespace kevlar::detail {
namespace {

/// Frees the blocks the thread's cache holds when the thread exits. Registered (by its first
/// use) when the thread first keeps a block; after it ran, blocks freed by later thread-exit code
/// go straight to operator delete.
struct Cleanup {
  bool registered = false;
  ~Cleanup();
};

thread_local Cleanup tl_cleanup;
/// Set once the cleanup ran: a trivially destructible flag outlives it, and nothing may touch
/// tl_cleanup after its destruction.
constinit thread_local bool tl_exited = false;

Cleanup::~Cleanup() {
  BlockCacheSlots& t = tl_block_cache;
  t.keeping = false;
  tl_exited = true;
  for (std::size_t c = 0; c < BlockCacheSlots::classes; ++c) {
    while (t.count[c] != 0) ::operator delete(t.blocks[c][--t.count[c]]);
  }
}

}  // namespace

void* cache_allocate_slow(std::size_t size) {
  const std::size_t c = block_class(size);
  return ::operator new(c < BlockCacheSlots::classes ? (c + 1) * BlockCacheSlots::granule : size);
}

void cache_deallocate_slow(void* p, std::size_t size) noexcept {
  const std::size_t c = block_class(size);
  BlockCacheSlots& t = tl_block_cache;
  if (c < BlockCacheSlots::classes && !tl_exited && !t.keeping) {
    // The first block this thread keeps: register the cleanup (constructing a thread_local with a
    // destructor registers it for thread exit).
    tl_cleanup.registered = true;
    t.keeping = true;
  }
  if (c < BlockCacheSlots::classes && t.keeping && t.count[c] < BlockCacheSlots::slots) {
    t.blocks[c][t.count[c]++] = p;
    return;
  }
  ::operator delete(p);
}

}  // namespace kevlar::detail
