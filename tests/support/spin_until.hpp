// Stress tests wait for the calls other threads complete: with a deadline, so that a lost call
// fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <thread>

namespace kevlar::test {

/// Yields until `done()` is true or `limit` has passed; returns `done()`.
template <class Done>
bool spin_until(Done done, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  return done();
}

}  // namespace kevlar::test
