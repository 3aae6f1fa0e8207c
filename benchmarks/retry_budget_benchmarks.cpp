// BM_RetryBudget: what a retry budget adds to a retry, beside the plain retry in the same run.
//   plain_retry, tokens, rate, concurrency: a successful synchronous call through retry(3), without
//     a budget and with one of each mode (the happy path: tokens reads its balance at capacity,
//     rate deposits into its window, concurrency counts the execution in and out)
//   admission/<mode>: one retry admitted and its admission given back (try_acquire +
//     release_attempt), beside admission/control: one relaxed atomic increment and decrement
#include "bench_support.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/retry_budget.hpp>

#include <atomic>
#include <memory>

namespace {

std::shared_ptr<kevlar::RetryBudget> make_budget(int mode) {
  switch (mode) {
    case 1:
      return kevlar::RetryBudget::tokens();
    case 2:
      return kevlar::RetryBudget::rate();
    case 3:
      return kevlar::RetryBudget::concurrency();
    default:
      return nullptr;
  }
}

template <int Mode>
void BM_RetryBudget_call(benchmark::State& state) {
  kevlar::RetryOptions options;
  options.budget = make_budget(Mode);
  const kevlar::Shield shield = kevlar::Shield{}.retry(options);
  kevlar::bench::run_sync_calls(state, shield,
                                "no event loop; compare BM_RetryBudget/plain_retry");
}

template <int Mode>
void BM_RetryBudget_admission(benchmark::State& state) {
  const auto budget = make_budget(Mode);
  // Admissions never run out: the concurrency mode gets its admission back at once; the rate
  // window is refilled by as many executions as retries; the tokens mode only reads.
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    budget->execution_started();
    benchmark::DoNotOptimize(budget->try_acquire());
    budget->release_attempt();
    budget->execution_finished();
  }
  allocs.report(state);
  state.SetLabel("no event loop; per admission, with its execution counted in and out");
}

void BM_RetryBudget_admission_control(benchmark::State& state) {
  std::atomic<std::int64_t> word{0};
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    word.fetch_add(1, std::memory_order_relaxed);
    benchmark::DoNotOptimize(word.fetch_sub(1, std::memory_order_relaxed));
  }
  allocs.report(state);
  state.SetLabel("no event loop; one relaxed increment and decrement");
}

}  // namespace

BENCHMARK(BM_RetryBudget_call<0>)->Name("BM_RetryBudget/plain_retry");
BENCHMARK(BM_RetryBudget_call<1>)->Name("BM_RetryBudget/tokens");
BENCHMARK(BM_RetryBudget_call<2>)->Name("BM_RetryBudget/rate");
BENCHMARK(BM_RetryBudget_call<3>)->Name("BM_RetryBudget/concurrency");
BENCHMARK(BM_RetryBudget_admission_control)->Name("BM_RetryBudget/admission/control");
BENCHMARK(BM_RetryBudget_admission<1>)->Name("BM_RetryBudget/admission/tokens");
BENCHMARK(BM_RetryBudget_admission<2>)->Name("BM_RetryBudget/admission/rate");
BENCHMARK(BM_RetryBudget_admission<3>)->Name("BM_RetryBudget/admission/concurrency");
