// BM_Pipeline: Kevlar's composed scenario, Timeout(10 s) -> Retry(3, no delay) -> ratio breaker.
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

using kevlar::bench::work;

using kevlar::bench::timeout_retry_breaker;

void BM_Pipeline_timeout_retry_breaker(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, timeout_retry_breaker(), "no event loop; compare BM_Overhead/raw_sync");
}

void BM_Pipeline_timeout_retry_breaker_async(benchmark::State& state) {
  // run() returns after the loop by itself: the deadline queue releases its timer once idle.
  kevlar::bench::run_async_calls(
      state, timeout_retry_breaker(), "idle loop (deadline timer armed once); compare BM_Overhead/raw_async");
}

}  // namespace

BENCHMARK(BM_Pipeline_timeout_retry_breaker)->Name("BM_Pipeline/timeout_retry_breaker");
BENCHMARK(BM_Pipeline_timeout_retry_breaker_async)->Name("BM_Pipeline/timeout_retry_breaker_async");
