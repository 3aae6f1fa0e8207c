// BM_Overhead: what an empty shield (and a one-strategy pipeline) adds to a call.
#include "bench_support.hpp"
#include "pass_through.hpp"

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

using kevlar::bench::async_work;
using kevlar::bench::work;

using kevlar::bench::PassThrough;

const kevlar::Shield& empty_shield() {
  static const kevlar::Shield s;
  return s;
}

const kevlar::Shield& one_layer_shield() {
  static const kevlar::Shield s = kevlar::Shield{}.use(std::make_shared<PassThrough>());
  return s;
}

void BM_Overhead_raw_sync(benchmark::State& state) {
  kevlar::bench::run_raw_calls(state, "no event loop");
}

void BM_Overhead_shield_sync(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, empty_shield(), "no event loop");
}
void BM_Overhead_one_layer_sync(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, one_layer_shield(), "no event loop");
}

/// Runs `body` (a coroutine holding the benchmark loop) on an idle io_context.
template <class Body>
void run_in_coroutine(benchmark::State& state, Body body) {
  asio::io_context ioc(1);
  kevlar::bench::AllocReport allocs;
  asio::co_spawn(ioc, body(), [](std::exception_ptr ep) {
    if (ep) std::rethrow_exception(ep);
  });
  ioc.run();
  allocs.report(state);
  state.SetLabel("idle loop");
}

void BM_Overhead_raw_async(benchmark::State& state) {
  run_in_coroutine(state, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    int x = 0;
    for (auto _ : state) {
      x = co_await async_work(ex, x, asio::deferred);
      benchmark::DoNotOptimize(x);
    }
  });
}

void BM_Overhead_shield_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, empty_shield(), "idle loop");
}
void BM_Overhead_one_layer_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, one_layer_shield(), "idle loop");
}

}  // namespace

BENCHMARK(BM_Overhead_raw_sync)->Name("BM_Overhead/raw_sync");
BENCHMARK(BM_Overhead_shield_sync)->Name("BM_Overhead/shield_sync");
BENCHMARK(BM_Overhead_one_layer_sync)->Name("BM_Overhead/one_layer_sync");
BENCHMARK(BM_Overhead_raw_async)->Name("BM_Overhead/raw_async");
BENCHMARK(BM_Overhead_shield_async)->Name("BM_Overhead/shield_async");
BENCHMARK(BM_Overhead_one_layer_async)->Name("BM_Overhead/one_layer_async");
