// BM_QueuedHandoffPair and BM_ConcurrencyLimit: the concurrency limiter end to end.
//
// The pair is the shape of the .NET report: limit 1, queue 1; call A takes the permit and awaits a
// one-shot promise; call B queues; the promise is completed; both are awaited; B returns 42. The
// pairs run back to back inside one io_context::run() (see run_pair).
//   <semaphore>: unpaired        — kevlar's limiter (one ledger word + the unpaired semaphore)
//                (BM_ConcurrencyLimit/priority_handoff and queue_timeout_handoff: the same limiter
//                with a priority generator, or with a fixed queue timeout armed for B)
//                adaptive        — the adaptive limiter over it, limit pinned to 1, every call
//                                  timed and sampled
//                no_limiter_control — the shape's floor on Asio: no shield and no limiter; A and B
//                                  are the bare operations and A's completion starts B's
//                                  operation itself, where the limiter would grant B
//                shield_control  — the same as no_limiter_control, with A and B executed
//                                  through a shield whose one layer does nothing: the floor of
//                                  any pair of shield calls, whatever limits them
//                mutex_control   — the same limiter design, two objects as in Kevlar (interlocked
//                                  counters + a semaphore that only carries wake-ups), waking
//                                  through MutexDequeSemaphore (the SemaphoreSlim analog)
//                channel_control — the same, waking through an asio concurrent_channel semaphore
//   <caller>:    callback (completion handlers) or coroutine (co_spawn'd coroutines)
//   <regime>:    idle (a loop with no I/O object) or live_io (a pending timer keeps the reactor
//   live)
#include "bench_support.hpp"
#include "handoff_pair.hpp"
#include "semaphore_controls.hpp"
#include "two_object_limiter.hpp"

#include <handoff_ops.hpp>

#include <kevlar/concurrency_limit.hpp>
#include <kevlar/kevlar.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace {

namespace asio = boost::asio;
using boost::system::error_code;

using kevlar::bench::keep_second_thread_alive;

using kevlar::bench::Caller;
using kevlar::bench::NoLimiter;
using kevlar::bench::Regime;

/// The benchmark's loop: pairs until Google Benchmark has timed enough of them; allocations
/// counted from the first measured pair.
struct BenchmarkLoop {
  benchmark::State& state;
  std::optional<kevlar::bench::AllocReport> allocs;
  void measuring() { allocs.emplace(); }
  bool next() { return state.KeepRunning(); }
};

template <class Strategy>
void run_pair(benchmark::State& state, const kevlar::Shield& shield, const Strategy& limiter,
              asio::io_context& ioc, Caller caller, Regime regime, const char* label) {
  keep_second_thread_alive();
  BenchmarkLoop loop{state, std::nullopt};
  const kevlar::bench::PairRun run =
      kevlar::bench::run_pairs(loop, shield, limiter, ioc, caller, regime);
  if (loop.allocs) loop.allocs->report(state);
  if (!run.b_was_queued) {
    state.SkipWithError("B did not queue: not a queued handoff");
  } else if (run.b_value != 42) {
    state.SkipWithError("B did not return 42");
  }
  state.SetLabel(label);
}

template <class Make>
void pair_benchmark(benchmark::State& state, Make make_strategy, Caller caller, Regime regime) {
  asio::io_context ioc(1);
  const auto limiter = make_strategy(ioc);
  const kevlar::Shield shield = kevlar::Shield{}.use(limiter);
  run_pair(state, shield, *limiter, ioc, caller, regime,
           regime == Regime::idle ? "idle loop; ns and allocations per pair"
                                  : "live I/O (pending timer); ns and allocations per pair");
}

auto unpaired = [](asio::io_context&) { return kevlar::bench::pair_limiter(); };
auto priority = [](asio::io_context&) { return kevlar::bench::pair_priority_limiter(); };
auto queue_timeout = [](asio::io_context&) { return kevlar::bench::pair_queue_timeout_limiter(); };
auto adaptive = [](asio::io_context&) { return kevlar::bench::pair_adaptive_limiter(); };
auto mutex_control = [](asio::io_context& ioc) { return kevlar::bench::pair_mutex_control(ioc); };
auto channel_control = [](asio::io_context& ioc) {
  return kevlar::bench::pair_channel_control(ioc);
};

void no_limiter_pair(benchmark::State& state, Caller caller, Regime regime) {
  asio::io_context ioc(1);
  const NoLimiter none;
  run_pair(state, kevlar::Shield{}, none, ioc, caller, regime,
           regime == Regime::idle
               ? "idle loop; the shape without kevlar; ns and allocations per pair"
               : "live I/O (pending timer); the shape without kevlar; ns and allocations per pair");
}

void shield_control_pair(benchmark::State& state, Caller caller, Regime regime) {
  asio::io_context ioc(1);
  const kevlar::bench::ShieldOnly shield_only;
  run_pair(state, kevlar::bench::pair_shield_control(), shield_only, ioc, caller, regime,
           regime == Regime::idle ? "idle loop; two shield calls without a limiter; ns and "
                                    "allocations per pair"
                                  : "live I/O (pending timer); two shield calls without a limiter; "
                                    "ns and allocations per pair");
}

#define KEVLAR_PAIR_SHIELD(caller, regime)                                                  \
  BENCHMARK_CAPTURE(shield_control_pair, caller##_##regime, Caller::caller, Regime::regime) \
      ->Name("BM_QueuedHandoffPair/shield_control/" #caller "/" #regime)

#define KEVLAR_PAIR_FLOOR(caller, regime)                                               \
  BENCHMARK_CAPTURE(no_limiter_pair, caller##_##regime, Caller::caller, Regime::regime) \
      ->Name("BM_QueuedHandoffPair/no_limiter_control/" #caller "/" #regime)

#define KEVLAR_PAIR(sem, caller, regime)                                            \
  BENCHMARK_CAPTURE(pair_benchmark, sem##_##caller##_##regime, sem, Caller::caller, \
                    Regime::regime)                                                 \
      ->Name("BM_QueuedHandoffPair/" #sem "/" #caller "/" #regime)

KEVLAR_PAIR(unpaired, callback, idle);
KEVLAR_PAIR(adaptive, callback, idle);
KEVLAR_PAIR(adaptive, coroutine, idle);
KEVLAR_PAIR(mutex_control, callback, idle);
KEVLAR_PAIR(channel_control, callback, idle);
KEVLAR_PAIR(unpaired, coroutine, idle);
KEVLAR_PAIR(mutex_control, coroutine, idle);
KEVLAR_PAIR(channel_control, coroutine, idle);
KEVLAR_PAIR(unpaired, callback, live_io);
KEVLAR_PAIR(mutex_control, callback, live_io);
KEVLAR_PAIR(channel_control, callback, live_io);
KEVLAR_PAIR(unpaired, coroutine, live_io);
KEVLAR_PAIR(mutex_control, coroutine, live_io);
KEVLAR_PAIR(channel_control, coroutine, live_io);
KEVLAR_PAIR_FLOOR(callback, idle);
KEVLAR_PAIR_FLOOR(coroutine, idle);
KEVLAR_PAIR_FLOOR(callback, live_io);
KEVLAR_PAIR_FLOOR(coroutine, live_io);
#define KEVLAR_LIMIT_PAIR(sem, caller, regime)                                      \
  BENCHMARK_CAPTURE(pair_benchmark, sem##_##caller##_##regime, sem, Caller::caller, \
                    Regime::regime)                                                 \
      ->Name("BM_ConcurrencyLimit/" #sem "_handoff/" #caller "/" #regime)

KEVLAR_LIMIT_PAIR(priority, callback, idle);
KEVLAR_LIMIT_PAIR(priority, coroutine, idle);
KEVLAR_LIMIT_PAIR(queue_timeout, callback, idle);
KEVLAR_LIMIT_PAIR(queue_timeout, coroutine, idle);
KEVLAR_PAIR_SHIELD(callback, idle);
KEVLAR_PAIR_SHIELD(coroutine, idle);
KEVLAR_PAIR_SHIELD(callback, live_io);
KEVLAR_PAIR_SHIELD(coroutine, live_io);

// ---- uncontended and contended
// -------------------------------------------------------------------

using kevlar::bench::work;

const kevlar::Shield& limit_shield() {
  static const kevlar::Shield s = kevlar::Shield{}.concurrency_limit(1024);
  return s;
}

void BM_ConcurrencyLimit_uncontended_sync(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, limit_shield(),
                                "no event loop; compare BM_Overhead/raw_sync");
}

void BM_ConcurrencyLimit_uncontended_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, limit_shield(), "idle loop; compare BM_Overhead/raw_async");
}

/// The limiter with a priority generator and a fixed queue timeout, neither used while a permit
/// is free: what configuring them costs a call that does not queue.
const kevlar::Shield& configured_limit_shield() {
  static const kevlar::Shield s = [] {
    kevlar::ConcurrencyLimitOptions o;
    o.max_concurrency = 1024;
    o.max_queue = 16;
    o.priority_generator = [](const kevlar::Context&) { return std::int32_t{1}; };
    o.queue_timeout = kevlar::QueueTimeout::fixed(std::chrono::seconds(1));
    return kevlar::Shield{}.concurrency_limit(o);
  }();
  return s;
}

void BM_ConcurrencyLimit_priority_queue_timeout_uncontended_sync(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, configured_limit_shield(),
                                "no event loop; compare BM_ConcurrencyLimit/uncontended_sync");
}

void BM_ConcurrencyLimit_priority_queue_timeout_uncontended_async(benchmark::State& state) {
  kevlar::bench::run_async_calls(state, configured_limit_shield(),
                                 "idle loop; compare BM_ConcurrencyLimit/uncontended_async");
}

std::shared_ptr<kevlar::Shield> contended_shield;

void BM_ConcurrencyLimit_contended(benchmark::State& state) {
  if (state.thread_index() == 0) {
    kevlar::ConcurrencyLimitOptions o;
    o.max_concurrency = static_cast<int>(state.range(0));
    o.max_queue = 64;
    contended_shield = std::make_shared<kevlar::Shield>(kevlar::Shield{}.concurrency_limit(o));
  }
  kevlar::bench::AllocReport allocs;
  int x = 0;
  for (auto _ : state) {
    x = contended_shield->execute([x] { return work(x); });
    benchmark::DoNotOptimize(x);
  }
  allocs.report(state);
  state.SetLabel("2 threads, synchronous execute, no event loop");
}

}  // namespace

BENCHMARK(BM_ConcurrencyLimit_uncontended_sync)->Name("BM_ConcurrencyLimit/uncontended_sync");
BENCHMARK(BM_ConcurrencyLimit_uncontended_async)->Name("BM_ConcurrencyLimit/uncontended_async");
BENCHMARK(BM_ConcurrencyLimit_priority_queue_timeout_uncontended_sync)
    ->Name("BM_ConcurrencyLimit/priority_queue_timeout_uncontended_sync");
BENCHMARK(BM_ConcurrencyLimit_priority_queue_timeout_uncontended_async)
    ->Name("BM_ConcurrencyLimit/priority_queue_timeout_uncontended_async");
BENCHMARK(BM_ConcurrencyLimit_contended)
    ->Name("BM_ConcurrencyLimit/contended/2")
    ->Arg(1)
    ->Arg(2)
    ->Threads(2)
    ->UseRealTime();
