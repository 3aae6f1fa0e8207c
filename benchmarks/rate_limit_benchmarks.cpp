// BM_RateLimit: the rate limit's admission and rejection, beside the raw call, one pass-through
// layer, and pass-through layers doing what the limiter adds (one CAS; a clock read and one CAS)
// in the same run.
#include "bench_support.hpp"

#include <kevlar/kevlar.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace {

using namespace std::chrono_literals;
using kevlar::bench::work;

/// A layer that passes through, optionally reading the clock and doing one CAS on a shared word,
/// as the rate limit's admission does: the control of "one pass-through layer plus one CAS".
template <bool ReadClock, bool Cas>
class Control final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "Control"; }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    std::int64_t next = 1;
    if constexpr (ReadClock) next = layer.clock().now().time_since_epoch().count();
    if constexpr (Cas) {
      std::int64_t w = word_.load(std::memory_order_relaxed);
      while (!word_.compare_exchange_weak(w, (w > next ? w : next) + 1, std::memory_order_relaxed,
                                          std::memory_order_relaxed)) {
      }
    }
    return kevlar::Step::run_inner;
  }

 private:
  alignas(64) std::atomic<std::int64_t> word_{0};
};

const kevlar::Shield& uncontended() {
  static const kevlar::Shield s =
      kevlar::Shield{}.rate_limit(kevlar::bench::never_rejecting_rate());
  return s;
}

void BM_RateLimit_raw(benchmark::State& state) {
  kevlar::bench::run_raw_calls(state, "no event loop; the call itself");
}

template <bool ReadClock, bool Cas>
void BM_RateLimit_control(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.use(std::make_shared<Control<ReadClock, Cas>>());
  kevlar::bench::run_sync_calls(state, s, "no event loop; control layer");
}

void BM_RateLimit_uncontended(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, uncontended(),
                                "no event loop; never rejects; compare the controls");
}

void BM_RateLimit_uncontended_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, uncontended(), "idle loop; never rejects");
}

void BM_RateLimit_rejection(benchmark::State& state) {
  // One permit per hour, taken before the loop: every call is rejected, as an outcome (no throw).
  kevlar::RateLimitOptions o;
  o.permits = 1;
  o.window = 1h;
  const kevlar::Shield s = kevlar::Shield{}.rate_limit(o);
  (void)s.execute([] { return 0; });
  int x = 0;
  int rejected = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    const kevlar::Outcome<int> r = s.execute_outcome([x] { return work(x); });
    rejected += r.has_value() ? 0 : 1;
    benchmark::DoNotOptimize(rejected);
  }
  allocs.report(state);
  if (rejected != static_cast<int>(state.iterations())) state.SkipWithError("a call was admitted");
  state.SetLabel("no event loop; every call rejected (execute_outcome)");
}

/// Two threads on one limiter (one shared word), and the same on the CAS control.
void BM_RateLimit_contended(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, uncontended(), "no event loop; 2 threads, one limiter");
}
void BM_RateLimit_contended_control(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.use(std::make_shared<Control<true, true>>());
  kevlar::bench::run_sync_calls(state, s, "no event loop; 2 threads, one control word");
}

}  // namespace

BENCHMARK(BM_RateLimit_raw)->Name("BM_RateLimit/raw");
BENCHMARK(BM_RateLimit_control<false, false>)->Name("BM_RateLimit/control_pass_through");
BENCHMARK(BM_RateLimit_control<false, true>)->Name("BM_RateLimit/control_pass_through_cas");
BENCHMARK(BM_RateLimit_control<true, true>)->Name("BM_RateLimit/control_pass_through_clock_cas");
BENCHMARK(BM_RateLimit_uncontended)->Name("BM_RateLimit/uncontended");
BENCHMARK(BM_RateLimit_uncontended_async)->Name("BM_RateLimit/uncontended_async");
BENCHMARK(BM_RateLimit_rejection)->Name("BM_RateLimit/rejection");
BENCHMARK(BM_RateLimit_contended)->Name("BM_RateLimit/contended/2")->Threads(2)->UseRealTime();
BENCHMARK(BM_RateLimit_contended_control)
    ->Name("BM_RateLimit/contended_control/2")
    ->Threads(2)
    ->UseRealTime();
