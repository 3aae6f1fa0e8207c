#include <kevlar/detail/block_cache.hpp>

#include <array>
#include <cstdint>

namespace kevlar::detail {
namespace {

constexpr std::size_t granule = 64;
constexpr std::size_t classes = 16;  // blocks up to 1 KiB
constexpr std::size_t slots = 8;

struct ThreadCache {
  std::array<std::array<void*, slots>, classes> blocks{};
  std::array<std::uint8_t, classes> count{};
  ~ThreadCache() {
    for (std::size_t c = 0; c < classes; ++c) {
      for (std::size_t i = 0; i < count[c]; ++i) ::operator delete(blocks[c][i]);
    }
  }
};

thread_local ThreadCache tl_cache;

}  // namespace

void* cache_allocate(std::size_t size) {
  const std::size_t c = (size + granule - 1) / granule;
  if (c != 0 && c <= classes) {
    ThreadCache& t = tl_cache;
    if (t.count[c - 1] != 0) return t.blocks[c - 1][--t.count[c - 1]];
    return ::operator new(c* granule);
  }
  return ::operator new(size);
}

void cache_deallocate(void* p, std::size_t size) noexcept {
  const std::size_t c = (size + granule - 1) / granule;
  if (c != 0 && c <= classes) {
    ThreadCache& t = tl_cache;
    if (t.count[c - 1] < slots) {
      t.blocks[c - 1][t.count[c - 1]++] = p;
      return;
    }
  }
  ::operator delete(p);
}

}  // namespace kevlar::detail
