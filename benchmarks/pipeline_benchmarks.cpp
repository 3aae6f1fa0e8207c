// BM_Pipeline: Kevlar's composed scenarios: Timeout(10 s) -> Retry(3, no delay) -> ratio breaker,
// and rate limit -> timeout -> retry -> breaker -> concurrency limit beside each of its five
// strategies alone, in the same run.
#include "bench_support.hpp"

#include <kevlar/kevlar.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

using kevlar::bench::timeout_retry_breaker;

void BM_Pipeline_timeout_retry_breaker(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, timeout_retry_breaker(),
                                "no event loop; compare BM_Overhead/raw_sync");
}

void BM_Pipeline_timeout_retry_breaker_async(benchmark::State& state) {
  // The timeout's deadlines are woken by kevlar's deadline thread: the loop stays idle (no
  // reactor).
  kevlar::bench::run_async_calls(state, timeout_retry_breaker(),
                                 "idle loop; compare BM_Overhead/raw_async");
}

/// The five strategies of BM_Pipeline/five_strategies; BM_Pipeline/single/* runs each alone.
const kevlar::Shield& five_strategies() {
  static const kevlar::Shield s = kevlar::Shield{}
                                      .rate_limit(kevlar::bench::never_rejecting_rate())
                                      .timeout(10s)
                                      .retry(kevlar::bench::three_retries())
                                      .circuit_breaker(kevlar::bench::ratio_breaker())
                                      .concurrency_limit(1024);
  return s;
}

void BM_Pipeline_raw(benchmark::State& state) {
  kevlar::bench::run_raw_calls(state, "no event loop; the call itself");
}

void BM_Pipeline_five_strategies(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, five_strategies(),
                                "no event loop; compare the sum of BM_Pipeline/single/*");
}

void BM_Pipeline_five_strategies_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, five_strategies(),
                                 "idle loop; compare BM_Overhead/raw_async");
}

/// One strategy of the five alone, for the sum the pipeline is compared with.
template <int Which>
void BM_Pipeline_single(benchmark::State& state) {
  static const kevlar::Shield s = [] {
    const kevlar::Shield e;
    switch (Which) {
      case 0:
        return e.rate_limit(kevlar::bench::never_rejecting_rate());
      case 1:
        return e.timeout(10s);
      case 2:
        return e.retry(kevlar::bench::three_retries());
      case 3:
        return e.circuit_breaker(kevlar::bench::ratio_breaker());
      default:
        return e.concurrency_limit(1024);
    }
  }();
  kevlar::bench::run_sync_calls(state, s, "no event loop; one of the five alone");
}

}  // namespace

BENCHMARK(BM_Pipeline_raw)->Name("BM_Pipeline/raw");
BENCHMARK(BM_Pipeline_five_strategies)->Name("BM_Pipeline/five_strategies");
BENCHMARK(BM_Pipeline_five_strategies_async)->Name("BM_Pipeline/five_strategies_async");
BENCHMARK(BM_Pipeline_single<0>)->Name("BM_Pipeline/single/rate_limit");
BENCHMARK(BM_Pipeline_single<1>)->Name("BM_Pipeline/single/timeout");
BENCHMARK(BM_Pipeline_single<2>)->Name("BM_Pipeline/single/retry");
BENCHMARK(BM_Pipeline_single<3>)->Name("BM_Pipeline/single/circuit_breaker");
BENCHMARK(BM_Pipeline_single<4>)->Name("BM_Pipeline/single/concurrency_limit");
BENCHMARK(BM_Pipeline_timeout_retry_breaker)->Name("BM_Pipeline/timeout_retry_breaker");
BENCHMARK(BM_Pipeline_timeout_retry_breaker_async)->Name("BM_Pipeline/timeout_retry_breaker_async");
