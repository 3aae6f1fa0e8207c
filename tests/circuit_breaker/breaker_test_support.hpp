// Helpers for the circuit breaker tests: a sans-I/O driver and a transition recorder. (Calls that
// stay pending until the test completes them: tests/support/pending_ops.hpp.)
#pragma once

#include <boom.hpp>
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/shield.hpp>

#include <core/async_ops.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kevlar::test {

/// The failure the breaker tests throw.

/// Starts an asynchronous execution of `shield` whose call completes with `ec` (and 1) on `io`,
/// counting its calls in `*calls` if given; its completion's error lands in `got`.
inline void start_call(const Shield& shield, boost::asio::io_context& io,
                       boost::system::error_code ec, std::optional<boost::system::error_code>& got,
                       int* calls = nullptr) {
  shield.execute_async(
      [&io, ec, calls](auto token) {
        if (calls != nullptr) ++*calls;
        return async_answer(io.get_executor(), ec, 1, std::move(token));
      },
      boost::asio::bind_executor(io, [&got](boost::system::error_code e, int) { got = e; }));
}

/// Runs what is ready on `io`, and what that makes ready, a few rounds deep (no blocking).
inline void poll_rounds(boost::asio::io_context& io) {
  for (int i = 0; i < 10; ++i) {
    io.restart();
    io.poll();
  }
}

/// Drives a CircuitBreakerCore through whole calls at a time the test moves by hand.
struct Driver {
  explicit Driver(const CircuitBreakerOptions& o) : core(o) {}

  /// A call that succeeds; false if it was rejected.
  bool succeed() {
    const auto a = core.admit(now);
    if (!a.admitted()) return false;
    core.record_success(now, a);
    return true;
  }
  /// A call that fails; false if it was rejected.
  bool fail() {
    const auto a = core.admit(now);
    if (!a.admitted()) return false;
    core.record_failure(now, a);
    return true;
  }
  void advance(Clock::duration d) { now += d; }

  CircuitBreakerCore core;
  Clock::time_point now{std::chrono::hours(1)};
};

/// Records state changes; checks they are never delivered concurrently.
class Transitions {
 public:
  std::function<void(const CircuitStateChange&)> observer() {
    return [this](const CircuitStateChange& c) { add(c); };
  }
  void add(const CircuitStateChange& c) {
    const int now_in = ++inside_;
    int seen = max_inside_.load();
    while (now_in > seen && !max_inside_.compare_exchange_weak(seen, now_in)) {
    }
    {
      std::lock_guard lock(m_);
      changes_.push_back(c);
    }
    --inside_;
  }
  std::vector<CircuitStateChange> changes() const {
    std::lock_guard lock(m_);
    return changes_;
  }
  std::vector<std::pair<CircuitState, CircuitState>> pairs() const {
    std::vector<std::pair<CircuitState, CircuitState>> out;
    for (const auto& c : changes()) out.emplace_back(c.from, c.to);
    return out;
  }
  /// Most observers ever running at once.
  int max_concurrency() const { return max_inside_.load(); }

 private:
  mutable std::mutex m_;
  std::vector<CircuitStateChange> changes_;
  std::atomic<int> inside_{0};
  std::atomic<int> max_inside_{0};
};

}  // namespace kevlar::test
