// BM_Retry and BM_Fallback: the retry and fallback strategies beside BM_Overhead/raw_sync and
// BM_Overhead/raw_async (overhead_benchmarks.cpp), in the same binary. Overhead = a benchmark's
// time minus the raw baseline of the same regime.
#include "bench_support.hpp"

#include <kevlar/fallback.hpp>
#include <kevlar/retry.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <exception>
#include <stdexcept>

namespace {

namespace asio = boost::asio;
using boost::system::error_code;

struct Transient : std::runtime_error {
  Transient() : std::runtime_error("transient") {}
};

using kevlar::bench::async_work;
using kevlar::bench::work;

const kevlar::Shield& retry_default() {
  static const kevlar::Shield s = kevlar::Shield{}.retry(3);  // Kevlar's default backoff
  return s;
}

const kevlar::Shield& retry_no_delay() {
  static const kevlar::Shield s = [] {
    kevlar::RetryOptions o;
    o.max_retries = 3;
    o.backoff = kevlar::Backoff::none();
    return kevlar::Shield{}.retry(o);
  }();
  return s;
}

const kevlar::Shield& fallback_shield() {
  static const kevlar::Shield s = kevlar::Shield{}.fallback(-1);
  return s;
}

// ---- synchronous: "no event loop" -------------------------------------------------------------

template <class Fn>
void run_sync(benchmark::State& state, const kevlar::Shield& shield, Fn fn) {
  int x = 0;
  for (int i = 0; i < 100; ++i) x = shield.execute([&] { return fn(x); });  // warm-up
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    x = shield.execute([&] { return fn(x); });
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel("no event loop");
}

void BM_Retry_success_first_attempt(benchmark::State& state) {
  run_sync(state, retry_default(), [](int x) { return work(x); });
}

void BM_Retry_two_failures_then_success(benchmark::State& state) {
  int calls = 0;
  run_sync(state, retry_no_delay(), [&](int x) {
    if (++calls % 3 != 0) throw Transient();
    return work(x);
  });
}

void BM_Fallback_not_triggered(benchmark::State& state) {
  run_sync(state, fallback_shield(), [](int x) { return work(x); });
}

void BM_Fallback_triggered(benchmark::State& state) {
  run_sync(state, fallback_shield(), [](int x) -> int {
    benchmark::DoNotOptimize(work(x));
    throw Transient();  // every call fails; x stays -1
  });
}

/// The cost of the exceptions alone: what two_failures_then_success pays before any strategy
/// (allocations here are the exceptions' message strings, not kevlar's).
void BM_Retry_raw_two_exceptions(benchmark::State& state) {
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    for (int i = 0; i < 2; ++i) {
      try {
        throw Transient();
      } catch (const Transient&) {
        benchmark::ClobberMemory();
      }
    }
    x = work(x);
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel("no event loop");
}

// ---- asynchronous: co_await execute_async on an idle io_context: "idle loop" ------------------

template <class Body>
void run_in_coroutine(benchmark::State& state, Body body) {
  asio::io_context ioc(1);
  asio::co_spawn(ioc, body(), [](std::exception_ptr ep) {
    if (ep) std::rethrow_exception(ep);
  });
  ioc.run();
  state.SetLabel("idle loop");
}

/// Each attempt fails with `connection_reset` while `fail(attempt_number)` says so.
template <class Fail>
void run_async(benchmark::State& state, const kevlar::Shield& shield, Fail fail) {
  run_in_coroutine(state, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    int x = 0;
    auto op = [&](auto token) {
      const error_code ec = fail() ? error_code(asio::error::connection_reset) : error_code();
      return async_work(ex, ec, x, std::move(token));
    };
    for (int i = 0; i < 100; ++i) x = co_await shield.execute_async(op);  // warm-up
    kevlar::bench::AllocReport allocs;
    for (auto _ : state) {
      x = co_await shield.execute_async(op);
      benchmark::DoNotOptimize(x);
    }
    allocs.report(state);
  });
}

void BM_Retry_success_first_attempt_async(benchmark::State& state) {
  run_async(state, retry_default(), [] { return false; });
}

void BM_Retry_two_failures_then_success_async(benchmark::State& state) {
  int calls = 0;
  run_async(state, retry_no_delay(), [&] { return ++calls % 3 != 0; });
}

void BM_Fallback_not_triggered_async(benchmark::State& state) {
  run_async(state, fallback_shield(), [] { return false; });
}

void BM_Fallback_triggered_async(benchmark::State& state) {
  run_async(state, fallback_shield(), [] { return true; });
}

}  // namespace

BENCHMARK(BM_Retry_success_first_attempt)->Name("BM_Retry/success_first_attempt");
BENCHMARK(BM_Retry_two_failures_then_success)->Name("BM_Retry/two_failures_then_success");
BENCHMARK(BM_Retry_raw_two_exceptions)->Name("BM_Retry/raw_two_exceptions");
BENCHMARK(BM_Fallback_not_triggered)->Name("BM_Fallback/not_triggered");
BENCHMARK(BM_Fallback_triggered)->Name("BM_Fallback/triggered");
BENCHMARK(BM_Retry_success_first_attempt_async)->Name("BM_Retry/success_first_attempt_async");
BENCHMARK(BM_Retry_two_failures_then_success_async)
    ->Name("BM_Retry/two_failures_then_success_async");
BENCHMARK(BM_Fallback_not_triggered_async)->Name("BM_Fallback/not_triggered_async");
BENCHMARK(BM_Fallback_triggered_async)->Name("BM_Fallback/triggered_async");
