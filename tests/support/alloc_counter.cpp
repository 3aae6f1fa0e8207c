#include "alloc_counter.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

#ifndef KEVLAR_ALLOC_COUNTER_NO_INTERPOSE
extern "C" void* __libc_memalign(std::size_t alignment, std::size_t size);  // glibc
#endif

namespace {

struct ThreadCounters {
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::uint64_t fail_countdown = 0;
  bool fail_armed = false;
};

thread_local ThreadCounters tl_counters;
std::atomic<std::uint64_t> g_count{0};
std::atomic<std::uint64_t> g_bytes{0};

/// Records one allocation; returns false if this allocation must fail.
bool record(std::size_t size) noexcept {
  ThreadCounters& c = tl_counters;
  if (c.fail_armed) {
    if (c.fail_countdown == 0) {
      c.fail_armed = false;
      return false;
    }
    --c.fail_countdown;
  }
  ++c.count;
  c.bytes += size;
  g_count.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(size, std::memory_order_relaxed);
  return true;
}

void* allocate(std::size_t size) {
  if (!record(size)) throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

void* allocate_aligned(std::size_t size, std::align_val_t align) {
  if (!record(size)) throw std::bad_alloc();
#ifdef KEVLAR_ALLOC_COUNTER_NO_INTERPOSE
  // Under sanitizers the runtime owns malloc and friends: use its aligned_alloc.
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
#else
  if (void* p = __libc_memalign(static_cast<std::size_t>(align), size == 0 ? 1 : size)) return p;
#endif
  throw std::bad_alloc();
}

}  // namespace

namespace kevlar::testing {

AllocStats thread_allocations() noexcept {
  return {tl_counters.count, tl_counters.bytes};
}

AllocStats process_allocations() noexcept {
  return {g_count.load(std::memory_order_relaxed), g_bytes.load(std::memory_order_relaxed)};
}

void fail_allocation_after(std::uint64_t n) noexcept {
  tl_counters.fail_countdown = n;
  tl_counters.fail_armed = true;
}

void disarm_allocation_failure() noexcept {
  tl_counters.fail_armed = false;
}

bool counts_aligned_alloc() noexcept {
#ifdef KEVLAR_ALLOC_COUNTER_NO_INTERPOSE
  return false;
#else
  return true;
#endif
}

bool allocation_failure_armed() noexcept {
  return tl_counters.fail_armed;
}

}  // namespace kevlar::testing

// NOLINTBEGIN(misc-new-delete-overloads)
void* operator new(std::size_t size) {
  return allocate(size);
}
void* operator new[](std::size_t size) {
  return allocate(size);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t size, std::align_val_t al) {
  return allocate_aligned(size, al);
}
void* operator new[](std::size_t size, std::align_val_t al) {
  return allocate_aligned(size, al);
}
void* operator new(std::size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(size, al);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return allocate_aligned(size, al);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
// NOLINTEND(misc-new-delete-overloads)

#ifndef KEVLAR_ALLOC_COUNTER_NO_INTERPOSE
// Asio's recycling allocator may bypass operator new and call aligned_alloc directly. (Under
// sanitizers the runtime intercepts aligned_alloc itself, and those counts are not needed there.)
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) {
  if (!record(size)) return nullptr;
  return __libc_memalign(alignment, size);
}
#endif
