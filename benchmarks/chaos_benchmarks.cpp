// BM_Chaos: what a chaos strategy costs a call. `disabled` is the production shape (chaos built in,
// switched off); compare it with BM_Overhead/one_layer_sync (one pass-through strategy) in the same
// run. `enabled_half` decides every call (rate 0.5 draws a sample) and fails half of them with an
// error code; `fault_injected` fails every call (rate 1 draws none).
#include "bench_support.hpp"

#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>

#include <boost/asio/error.hpp>

namespace {

namespace asio = boost::asio;

using kevlar::bench::work;

kevlar::ChaosFaultOptions fault_options(bool enabled, double rate) {
  kevlar::ChaosFaultOptions o;
  o.chaos.enabled = enabled;
  o.chaos.injection_rate = rate;
  o.chaos.seed = 1;
  o.error = asio::error::connection_reset;
  return o;
}

void BM_Chaos_disabled(benchmark::State& state) {
  static const kevlar::Shield shield = kevlar::chaos::fault(fault_options(false, 1.0));
  kevlar::bench::run_sync_calls(state, shield, "no event loop; baseline BM_Overhead/one_layer_sync");
}

void BM_Chaos_enabled_half(benchmark::State& state) {
  static const kevlar::Shield shield = kevlar::chaos::fault(fault_options(true, 0.5));
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    const kevlar::Outcome<int> o = shield.execute_outcome([x] { return work(x); });
    x += o.has_value() ? 1 : 2;
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel("no event loop; half the calls injected");
}

void BM_Chaos_fault_injected(benchmark::State& state) {
  static const kevlar::Shield shield = kevlar::chaos::fault(fault_options(true, 1.0));
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    const kevlar::Outcome<int> o = shield.execute_outcome([x] { return work(x); });
    x += o.has_error() ? 1 : 2;
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel("no event loop; every call injected");
}

}  // namespace

BENCHMARK(BM_Chaos_disabled)->Name("BM_Chaos/disabled");
BENCHMARK(BM_Chaos_enabled_half)->Name("BM_Chaos/enabled_half");
BENCHMARK(BM_Chaos_fault_injected)->Name("BM_Chaos/fault_injected");
