// BM_AdaptiveThrottle: the adaptive throttle's cost when it rejects nothing (every call succeeds,
// so p = 0: the per-call work is counting the request, reading the window's 20 buckets and
// counting the accept), beside the same loop through an empty shield, in the same binary and run.
//   closed / closed_async:                  a shield holding only the throttle (default options)
//   empty_shield_control / _control_async:  the same loops through kevlar::Shield{}
// The empty shield bypasses the engine (BM_Overhead/shield_sync), so the ratio is the engine's
// one-layer cost plus the throttle's; BM_Overhead/one_layer_sync and _async isolate the former.
#include "bench_support.hpp"

#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/kevlar.hpp>

namespace {

const kevlar::Shield& throttle_shield() {
  static const kevlar::Shield s = kevlar::Shield{}.adaptive_throttle();
  return s;
}

const kevlar::Shield& empty_shield() {
  static const kevlar::Shield s;
  return s;
}

void BM_AdaptiveThrottle_closed(benchmark::State& state) {
  kevlar::bench::run_sync_calls(
      state, throttle_shield(),
      "no event loop; p = 0; compare BM_AdaptiveThrottle/empty_shield_control");
}

void BM_AdaptiveThrottle_empty_shield_control(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, empty_shield(), "no event loop; the empty shield control");
}

void BM_AdaptiveThrottle_closed_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(
      state, throttle_shield(),
      "idle loop; p = 0; compare BM_AdaptiveThrottle/empty_shield_control_async");
}

void BM_AdaptiveThrottle_empty_shield_control_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, empty_shield(), "idle loop; the empty shield control");
}

}  // namespace

BENCHMARK(BM_AdaptiveThrottle_closed)->Name("BM_AdaptiveThrottle/closed");
BENCHMARK(BM_AdaptiveThrottle_empty_shield_control)
    ->Name("BM_AdaptiveThrottle/empty_shield_control");
BENCHMARK(BM_AdaptiveThrottle_closed_async)->Name("BM_AdaptiveThrottle/closed_async");
BENCHMARK(BM_AdaptiveThrottle_empty_shield_control_async)
    ->Name("BM_AdaptiveThrottle/empty_shield_control_async");
