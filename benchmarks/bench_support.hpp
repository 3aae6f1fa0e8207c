// Shared helpers for kevlar_benchmarks.
#pragma once

#include "second_thread.hpp"

#include <alloc_counter.hpp>
#include <kevlar/kevlar.hpp>

#include <benchmark/benchmark.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <utility>

namespace kevlar::bench {

/// Kevlar's benchmark breaker: ratio 0.1 over at least 100 calls in 30 s, break 5 s.
inline CircuitBreakerOptions ratio_breaker() {
  using namespace std::chrono_literals;
  CircuitBreakerOptions o;
  o.failure_ratio = 0.1;
  o.minimum_throughput = 100;
  o.sampling_window = 30s;
  o.break_duration = 5s;
  return o;
}

/// Retry(3) without delays.
inline RetryOptions three_retries() {
  RetryOptions o;
  o.max_retries = 3;
  o.backoff = Backoff::none();
  return o;
}

/// A rate that never rejects in a benchmark: 2^31-1 permits per second (one every nanosecond)
/// with a burst of as many (two seconds of calls).
inline RateLimitOptions never_rejecting_rate() {
  using namespace std::chrono_literals;
  RateLimitOptions o;
  o.permits = static_cast<int>(RateLimitLedger::max_count);
  o.window = 1s;
  return o;
}

/// Kevlar's composed scenario: Timeout(10 s) -> Retry(3, no delay) -> ratio breaker.
/// BM_Pipeline and BM_Observability measure it.
inline const Shield& timeout_retry_breaker() {
  static const Shield s = [] {
    using namespace std::chrono_literals;
    return Shield{}.timeout(10s).retry(three_retries()).circuit_breaker(ratio_breaker());
  }();
  return s;
}

/// Reports allocs_per_op and bytes_per_op for the allocations counted by `Source` (the calling
/// thread's, or every thread's) while the benchmark loop ran. Construct before the loop; call
/// report() after it.
template <kevlar::testing::AllocStats (*Source)() noexcept>
class BasicAllocReport {
 public:
  BasicAllocReport() noexcept : start_(Source()) {}
  void report(benchmark::State& state, std::int64_t ops_per_iteration = 1) const {
    const auto now = Source();
    const double ops = static_cast<double>(state.iterations() * ops_per_iteration);
    state.counters["allocs_per_op"] =
        ops > 0 ? static_cast<double>(now.count - start_.count) / ops : 0;
    state.counters["bytes_per_op"] =
        ops > 0 ? static_cast<double>(now.bytes - start_.bytes) / ops : 0;
  }

 private:
  kevlar::testing::AllocStats start_;
};

/// Allocations of the calling thread.
using AllocReport = BasicAllocReport<&kevlar::testing::thread_allocations>;
/// Allocations of every thread (benchmarks that use helper threads).
using ProcessAllocReport = BasicAllocReport<&kevlar::testing::process_allocations>;

/// The raw call every synchronous benchmark wraps: cheap, not inlined, not optimised away.
[[gnu::noinline]] inline int work(int x) {
  benchmark::DoNotOptimize(x);
  return x + 1;
}

/// The smallest real asynchronous operation: completes with (ec, x + 1) through a post to the
/// handler's associated executor (or `ex`), so the loop stays idle (no reactor).
template <class Token>
auto async_work(const boost::asio::any_io_executor& ex, boost::system::error_code ec, int x,
                Token&& token) {
  return boost::asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [ex](auto handler, boost::system::error_code e, int v) {
        auto hex = boost::asio::get_associated_executor(handler, ex);
        boost::asio::post(hex, boost::asio::append(std::move(handler), e, v + 1));
      },
      token, ec, x);
}

/// async_work that succeeds.
template <class Token>
auto async_work(const boost::asio::any_io_executor& ex, int x, Token&& token) {
  return async_work(ex, boost::system::error_code(), x, std::forward<Token>(token));
}

/// The baseline of the synchronous shapes: `x = work(x)` alone, allocations counted.
inline void run_raw_calls(benchmark::State& state, const char* label) {
  int x = 0;
  AllocReport allocs;
  for (auto _ : state) {
    x = work(x);
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel(label);
}

/// The synchronous overhead shape: `x = shield.execute([x] { return work(x); })` per iteration,
/// allocations counted. `label` names the regime and the baseline to compare with.
inline void run_sync_calls(benchmark::State& state, const kevlar::Shield& shield,
                           const char* label) {
  int x = 0;
  AllocReport allocs;
  for (auto _ : state) {
    x = shield.execute([x] { return work(x); });
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel(label);
}

/// The asynchronous overhead shape: one coroutine on an io_context with no I/O object co_awaits
/// `shield.execute_async(async_work)` per iteration, allocations counted. `after_loop(ioc)` runs in
/// the coroutine when the loop ends (a deadline timer kept on the loop, on a clock other than the
/// steady clock, can be released there).
///
/// `op(ex, x, token)` starts the operation of each attempt (async_work unless given).
template <class AfterLoop, class Op>
void run_async_calls(benchmark::State& state, const kevlar::Shield& shield, const char* label,
                     AfterLoop after_loop, Op op) {
  boost::asio::io_context ioc(1);
  AllocReport allocs;
  boost::asio::co_spawn(
      ioc,
      [&]() -> boost::asio::awaitable<void> {
        auto ex = co_await boost::asio::this_coro::executor;
        int x = 0;
        for (auto _ : state) {
          x = co_await shield.execute_async(
              [&](auto token) { return op(ex, x, std::move(token)); });
          benchmark::DoNotOptimize(x);
        }
        after_loop(ioc);
      },
      [](std::exception_ptr ep) {
        if (ep) std::rethrow_exception(ep);
      });
  ioc.run();
  allocs.report(state);
  state.SetLabel(label);
}

template <class AfterLoop>
void run_async_calls(benchmark::State& state, const kevlar::Shield& shield, const char* label,
                     AfterLoop after_loop) {
  run_async_calls(state, shield, label, std::move(after_loop),
                  [](const boost::asio::any_io_executor& ex, int x, auto token) {
                    return async_work(ex, x, std::move(token));
                  });
}

inline void run_async_calls(benchmark::State& state, const kevlar::Shield& shield,
                            const char* label) {
  run_async_calls(state, shield, label, [](boost::asio::io_context&) {});
}

}  // namespace kevlar::bench
