// BM_AdaptiveLimit: the adaptive concurrency limit's admission path beside the static one
// (BM_ConcurrencyLimit, same binary, same run), and the cost of closing one window.
//   uncontended_sync / _async:         every call timed (the default)
//   uncontended_sync_sampled / _async: one call in 16 timed (AdaptiveLimitOptions::sample_one_in)
//   window_update/<algorithm>:         min_window_samples samples recorded, then the window closed
//                                      and handed to the algorithm; per window
#include "bench_support.hpp"

#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/kevlar.hpp>

#include <chrono>
#include <memory>

namespace {

using namespace std::chrono_literals;

/// The adaptive limit over 1024 permits, as BM_ConcurrencyLimit's static one; one call at a time
/// never fills half of it, so its AIMD holds the limit.
const kevlar::Shield& adaptive_shield(int sample_one_in) {
  const auto make = [](int one_in) {
    kevlar::AdaptiveLimitOptions o;
    o.initial_limit = o.max_limit = 1024;
    o.sample_one_in = one_in;
    return kevlar::Shield{}.adaptive_concurrency_limit(o);
  };
  static const kevlar::Shield every = make(1);
  static const kevlar::Shield sampled = make(16);
  return sample_one_in == 1 ? every : sampled;
}

void BM_AdaptiveLimit_uncontended_sync(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, adaptive_shield(static_cast<int>(state.range(0))),
                                "no event loop; compare BM_ConcurrencyLimit/uncontended_sync");
}

void BM_AdaptiveLimit_uncontended_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, adaptive_shield(static_cast<int>(state.range(0))),
                                 "idle loop; compare BM_ConcurrencyLimit/uncontended_async");
}

template <class Algorithm>
void BM_AdaptiveLimit_window_update(benchmark::State& state) {
  kevlar::AdaptiveLimitSettings settings;
  settings.window = 1ms;
  settings.min_limit = 1;
  settings.max_limit = 1000;
  settings.initial_limit = 100;
  kevlar::AdaptiveLimitController controller(settings, std::make_unique<Algorithm>());
  kevlar::Clock::time_point now{1h};
  (void)controller.close_window(now);  // starts the first window
  kevlar::bench::AllocReport allocs;
  std::int64_t step = 0;
  for (auto _ : state) {
    // A window of 10 samples, alternately of 5 and 7 ms, each started with the whole limit in use:
    // the algorithm moves the limit both ways.
    const auto rtt = std::chrono::microseconds(5000 + (++step % 2) * 2000);
    for (int i = 0; i < settings.min_window_samples; ++i) {
      controller.record(kevlar::LimitSample::success, rtt, controller.limit());
    }
    now += settings.window;
    benchmark::DoNotOptimize(controller.close_window(now));
  }
  allocs.report(state);
  state.SetLabel("no event loop; per window (10 samples recorded, then closed)");
}

}  // namespace

BENCHMARK(BM_AdaptiveLimit_uncontended_sync)->Name("BM_AdaptiveLimit/uncontended_sync")->Arg(1);
BENCHMARK(BM_AdaptiveLimit_uncontended_sync)
    ->Name("BM_AdaptiveLimit/uncontended_sync_sampled")
    ->Arg(16);
BENCHMARK(BM_AdaptiveLimit_uncontended_async)->Name("BM_AdaptiveLimit/uncontended_async")->Arg(1);
BENCHMARK(BM_AdaptiveLimit_uncontended_async)
    ->Name("BM_AdaptiveLimit/uncontended_async_sampled")
    ->Arg(16);
BENCHMARK(BM_AdaptiveLimit_window_update<kevlar::AimdLimit>)
    ->Name("BM_AdaptiveLimit/window_update/aimd");
BENCHMARK(BM_AdaptiveLimit_window_update<kevlar::VegasLimit>)
    ->Name("BM_AdaptiveLimit/window_update/vegas");
BENCHMARK(BM_AdaptiveLimit_window_update<kevlar::GradientLimit>)
    ->Name("BM_AdaptiveLimit/window_update/gradient");
