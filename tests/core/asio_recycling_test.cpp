// KEVLAR_ASIO_RECYCLING_CACHE_SIZE reaches every translation unit that links kevlar::kevlar, and
// Asio's recycling cache then holds that many blocks per purpose.
//
// tests/CMakeLists.txt passes KEVLAR_TEST_ASIO_RECYCLING_CACHE_SIZE: the option's value, or 0
// when the option is empty (Asio's default). The checks before the first #include see only the
// command line, which is where kevlar::kevlar's interface definition lands.
#if !defined(KEVLAR_TEST_ASIO_RECYCLING_CACHE_SIZE)
#error "tests/CMakeLists.txt must define KEVLAR_TEST_ASIO_RECYCLING_CACHE_SIZE for this file"
#elif KEVLAR_TEST_ASIO_RECYCLING_CACHE_SIZE == 0
#if defined(BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE)
#error "KEVLAR_ASIO_RECYCLING_CACHE_SIZE is empty, yet a cache size is on the command line"
#endif
#elif !defined(BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE)
#error "KEVLAR_ASIO_RECYCLING_CACHE_SIZE is set, yet kevlar::kevlar did not define the cache size"
#else
static_assert(BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE == KEVLAR_TEST_ASIO_RECYCLING_CACHE_SIZE,
              "kevlar::kevlar's interface definition of the cache size did not reach this file");
#endif

#include <alloc_counter.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/detail/recycling_allocator.hpp>
#include <boost/asio/detail/thread_info_base.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <set>

namespace kevlar {
namespace {

namespace asio = boost::asio;

constexpr int expected_cache_size =
    KEVLAR_TEST_ASIO_RECYCLING_CACHE_SIZE == 0 ? 2 : KEVLAR_TEST_ASIO_RECYCLING_CACHE_SIZE;

// Asio read the same value: its per-purpose slot counts are what the option set.
static_assert(asio::detail::thread_info_base::awaitable_frame_tag::cache_size ==
              expected_cache_size);
static_assert(asio::detail::thread_info_base::executor_function_tag::cache_size ==
              expected_cache_size);

// On a thread running an io_context, freeing one block more than the cache holds keeps exactly
// `cache size` of them: that many allocations of the same size then get those blocks back, and
// the one after them is allocated anew.
TEST(AsioRecycling, ThreadCacheHoldsTheConfiguredBlocksPerPurpose) {
  using Frames =
      asio::detail::recycling_allocator<std::byte,
                                        asio::detail::thread_info_base::awaitable_frame_tag>;
  constexpr std::size_t block = 256;  // an awaitable frame's size; at most 1020 bytes are cached
  constexpr int n = expected_cache_size;
  asio::io_context ioc;
  std::set<std::byte*> freed;
  std::set<std::byte*> reused;
  std::uint64_t reuse_allocs = 99;
  std::uint64_t extra_allocs = 99;
  asio::post(ioc, [&] {
    Frames frames;
    std::array<std::byte*, n + 1> blocks{};
    for (std::byte*& b : blocks) b = frames.allocate(block);
    // The first n go into the cache's n slots; the last one finds them full and is freed.
    for (int i = 0; i < n; ++i) freed.insert(blocks[i]);
    for (std::byte* b : blocks) frames.deallocate(b, block);
    {
      const testing::AllocScope scope;
      for (int i = 0; i < n; ++i) blocks[i] = frames.allocate(block);
      reuse_allocs = scope.count();
    }
    for (int i = 0; i < n; ++i) reused.insert(blocks[i]);
    {
      const testing::AllocScope scope;
      blocks[n] = frames.allocate(block);
      extra_allocs = scope.count();
    }
    for (std::byte* b : blocks) frames.deallocate(b, block);
  });
  ioc.run();
  EXPECT_EQ(reused, freed);
  // The counts need the counter to see aligned_alloc, which Asio's recycling allocator calls.
  if (testing::counts_aligned_alloc()) {
    EXPECT_EQ(reuse_allocs, 0U);
    EXPECT_EQ(extra_allocs, 1U);
  }
}

}  // namespace
}  // namespace kevlar
