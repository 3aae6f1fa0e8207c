// A program that uses kevlar the way a downstream project does: through the umbrella header and
// the kevlar::kevlar target only. Built by tests/package against the installed package
// (find_package) and against the source tree (add_subdirectory).
//
// KEVLAR_EXPECTED_RECYCLING_CACHE_SIZE (from run_consumer.cmake) is the
// KEVLAR_ASIO_RECYCLING_CACHE_SIZE kevlar was built with, 0 for empty: kevlar::kevlar must have
// put the same value on this file's command line, or nothing at all for 0, since every
// translation unit has to agree on it.
#if defined(KEVLAR_EXPECTED_RECYCLING_CACHE_SIZE)
#if KEVLAR_EXPECTED_RECYCLING_CACHE_SIZE == 0
#if defined(BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE)
#error "kevlar was built with Asio's default recycling cache size, yet kevlar::kevlar defines one"
#endif
#elif !defined(BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE)
#error "kevlar was built with a recycling cache size, yet kevlar::kevlar did not pass it on"
#else
static_assert(BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE == KEVLAR_EXPECTED_RECYCLING_CACHE_SIZE,
              "kevlar::kevlar did not give this consumer kevlar's recycling cache size");
#endif
#endif

#include <kevlar/kevlar.hpp>

#include <cstdio>
#include <string>

int main() {
  // The empty shield executes calls directly; strategies are added with use().
  const kevlar::Shield shield = kevlar::Shield{};

  const int value = shield.execute([] { return 42; });
  if (value != 42) {
    std::fprintf(stderr, "consumer: execute returned %d, expected 42\n", value);
    return 1;
  }

  const std::string description = shield.describe();
  if (description.empty()) {
    std::fprintf(stderr, "consumer: describe() returned an empty string\n");
    return 1;
  }

  std::printf("kevlar consumer: execute -> %d, describe -> %s\n", value, description.c_str());
  return 0;
}
