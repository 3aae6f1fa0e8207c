// BM_CircuitBreaker: what a circuit breaker adds to a call. Compare
// ratio_closed_success with BM_Overhead/raw_sync and ratio_closed_success_async with
// BM_Overhead/raw_async (benchmarks/overhead_benchmarks.cpp); open_rejection is the whole cost of
// a call the breaker turns away.
#include "bench_support.hpp"

#include <kevlar/kevlar.hpp>

#include <memory>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

using kevlar::bench::work;

void BM_CircuitBreaker_ratio_closed_success(benchmark::State& state) {
  kevlar::bench::run_sync_calls(
      state, kevlar::Shield{}.circuit_breaker(kevlar::bench::ratio_breaker()), "no event loop");
}

void BM_CircuitBreaker_consecutive_closed_success(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, kevlar::Shield{}.circuit_breaker(5, 30s), "no event loop");
}

/// Times calls the breaker turns away (execute_outcome: no exception is thrown).
void run_rejections(benchmark::State& state, const kevlar::Shield& shield) {
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    auto o = shield.execute_outcome([x] { return work(x); });
    benchmark::DoNotOptimize(o);
  }
  allocs.report(state);
  state.SetLabel("no event loop");
}

void BM_CircuitBreaker_open_rejection(benchmark::State& state) {
  kevlar::CircuitBreakerOptions o = kevlar::bench::ratio_breaker();
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
  run_rejections(state, shield);
}

void BM_CircuitBreaker_isolated_rejection(benchmark::State& state) {
  const auto breaker = kevlar::CircuitBreaker::create(kevlar::bench::ratio_breaker());
  breaker->isolate();
  const kevlar::Shield shield = kevlar::Shield{}.use(breaker);
  run_rejections(state, shield);
}

void BM_CircuitBreaker_ratio_closed_success_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(
      state, kevlar::Shield{}.circuit_breaker(kevlar::bench::ratio_breaker()), "idle loop");
}

}  // namespace

BENCHMARK(BM_CircuitBreaker_ratio_closed_success)->Name("BM_CircuitBreaker/ratio_closed_success");
BENCHMARK(BM_CircuitBreaker_consecutive_closed_success)
    ->Name("BM_CircuitBreaker/consecutive_closed_success");
BENCHMARK(BM_CircuitBreaker_open_rejection)->Name("BM_CircuitBreaker/open_rejection");
BENCHMARK(BM_CircuitBreaker_isolated_rejection)->Name("BM_CircuitBreaker/isolated_rejection");
BENCHMARK(BM_CircuitBreaker_ratio_closed_success_async)
    ->Name("BM_CircuitBreaker/ratio_closed_success_async");
