// BM_CircuitBreaker: what a circuit breaker adds to a call. Compare
// ratio_closed_success with BM_Overhead/raw_sync and ratio_closed_success_async with
// BM_Overhead/raw_async (benchmarks/overhead_benchmarks.cpp); open_rejection is the whole cost of
// a call the breaker turns away.
#include "bench_support.hpp"

#include <kevlar/kevlar.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <memory>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

[[gnu::noinline]] int work(int x) {
  benchmark::DoNotOptimize(x);
  return x + 1;
}

/// Completes with (error_code, int) through a post (the same operation as BM_Overhead's).
template <class Token>
auto async_work(const asio::any_io_executor& ex, int x, Token&& token) {
  return asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [ex](auto handler, int v) {
        auto hex = asio::get_associated_executor(handler, ex);
        asio::post(hex, asio::append(std::move(handler), boost::system::error_code(), v + 1));
      },
      token, x);
}

/// The scenario: ratio 0.1, minimum throughput 100, window 30 s, break 5 s.
kevlar::CircuitBreakerOptions ratio_options() {
  kevlar::CircuitBreakerOptions o;
  o.failure_ratio = 0.1;
  o.minimum_throughput = 100;
  o.sampling_window = 30s;
  o.break_duration = 5s;
  return o;
}

void BM_CircuitBreaker_ratio_closed_success(benchmark::State& state) {
  const kevlar::Shield shield = kevlar::Shield{}.circuit_breaker(ratio_options());
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    x = shield.execute([x] { return work(x); });
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel("no event loop");
}

void BM_CircuitBreaker_consecutive_closed_success(benchmark::State& state) {
  const kevlar::Shield shield = kevlar::Shield{}.circuit_breaker(5, 30s);
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    x = shield.execute([x] { return work(x); });
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel("no event loop");
}

void BM_CircuitBreaker_open_rejection(benchmark::State& state) {
  kevlar::CircuitBreakerOptions o = ratio_options();
  o.break_duration = kevlar::CircuitBreakerOptions::max_duration;
  const auto breaker = kevlar::CircuitBreaker::create(o);
  const kevlar::Shield shield = kevlar::Shield{}.use(breaker);
  // Trip it for real: 100 failures in the window.
  for (int i = 0; i < 100; ++i) {
    (void)shield.execute_outcome([]() -> int { throw std::runtime_error("down"); });
  }
  if (breaker->state() != kevlar::CircuitState::open) {
    state.SkipWithError("the breaker did not open");
    return;
  }
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    auto o = shield.execute_outcome([x] { return work(x); });
    benchmark::DoNotOptimize(o);
  }
  allocs.report(state);
  state.SetLabel("no event loop");
}

void BM_CircuitBreaker_isolated_rejection(benchmark::State& state) {
  const auto breaker = kevlar::CircuitBreaker::create(ratio_options());
  breaker->isolate();
  const kevlar::Shield shield = kevlar::Shield{}.use(breaker);
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    auto o = shield.execute_outcome([x] { return work(x); });
    benchmark::DoNotOptimize(o);
  }
  allocs.report(state);
  state.SetLabel("no event loop");
}

void BM_CircuitBreaker_ratio_closed_success_async(benchmark::State& state) {
  const kevlar::Shield shield = kevlar::Shield{}.circuit_breaker(ratio_options());
  asio::io_context ioc(1);
  kevlar::bench::AllocReport allocs;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        int x = 0;
        for (auto _ : state) {
          x = co_await shield.execute_async(
              [&](auto token) { return async_work(ex, x, std::move(token)); });
          benchmark::DoNotOptimize(x);
        }
      },
      [](std::exception_ptr ep) {
        if (ep) std::rethrow_exception(ep);
      });
  ioc.run();
  allocs.report(state);
  state.SetLabel("idle loop");
}

}  // namespace

BENCHMARK(BM_CircuitBreaker_ratio_closed_success)->Name("BM_CircuitBreaker/ratio_closed_success");
BENCHMARK(BM_CircuitBreaker_consecutive_closed_success)
    ->Name("BM_CircuitBreaker/consecutive_closed_success");
BENCHMARK(BM_CircuitBreaker_open_rejection)->Name("BM_CircuitBreaker/open_rejection");
BENCHMARK(BM_CircuitBreaker_isolated_rejection)->Name("BM_CircuitBreaker/isolated_rejection");
BENCHMARK(BM_CircuitBreaker_ratio_closed_success_async)
    ->Name("BM_CircuitBreaker/ratio_closed_success_async");
