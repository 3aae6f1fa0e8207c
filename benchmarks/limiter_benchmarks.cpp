// BM_QueuedHandoffPair and BM_ConcurrencyLimit: the concurrency limiter end to end.
//
// The pair is the shape of the .NET report: limit 1, queue 1; call A takes the permit and awaits a
// one-shot promise; call B queues; the promise is completed; both are awaited; B returns 42. The
// pairs run back to back inside one io_context::run() (see run_pair).
//   <semaphore>: unpaired        — kevlar's limiter (one ledger word + the unpaired semaphore)
//                no_limiter_control — the shape's floor on Asio: no shield and no limiter; A and B
//                                  are the bare operations and A's completion starts B's
//                                  operation itself, where the limiter would grant B
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

/// Kevlar's two-object limiter (interlocked counters; a semaphore that only carries wake-ups),
/// following the rules that make it correct in C++ (seq_cst Dekker pair, registration before the
/// retry of the fast path). Benchmark control only.
template <class Sem>
class TwoObjectLimiter final : public kevlar::Strategy {
 public:
  template <class... A>
  TwoObjectLimiter(int limit, int queue, A&&... sem_args)
      : limit_(limit), queue_(queue), available_(limit), sem_(std::forward<A>(sem_args)...) {}
  std::string describe() const override { return "TwoObjectLimiter"; }
  kevlar::StrategyTraits traits() const noexcept override {
    return {kevlar::StrategyRole::proactive, true, 0};
  }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    if (pending_.fetch_add(1, std::memory_order_seq_cst) + 1 > limit_ + queue_) {
      pending_.fetch_sub(1, std::memory_order_seq_cst);
      layer.outcome().set_rejection(make_error_code(kevlar::errc::concurrency_limit_exceeded), {});
      return kevlar::Step::complete;
    }
    if (try_take()) return kevlar::Step::run_inner;
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    if (try_take()) {
      waiters_.fetch_sub(1, std::memory_order_seq_cst);
      return kevlar::Step::run_inner;
    }
    sem_.async_acquire(layer.wait_handler());
    return kevlar::Step::suspend;
  }
  kevlar::Step on_wait_complete(kevlar::Layer& layer, const error_code& ec) override {
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
    if (ec) {
      pending_.fetch_sub(1, std::memory_order_seq_cst);
      layer.outcome().set_error(ec);
      return kevlar::Step::complete;
    }
    return kevlar::Step::run_inner;  // the semaphore handed us a permit
  }
  [[nodiscard]] int waiting() const noexcept { return waiters_.load(std::memory_order_acquire); }
  kevlar::Step on_inner_complete(kevlar::Layer&) override {
    available_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) > 0 && try_take()) (void)sem_.release();
    pending_.fetch_sub(1, std::memory_order_seq_cst);
    return kevlar::Step::complete;
  }

 private:
  bool try_take() noexcept {
    int a = available_.load(std::memory_order_seq_cst);
    while (a > 0) {
      if (available_.compare_exchange_weak(a, a - 1, std::memory_order_seq_cst)) return true;
    }
    return false;
  }
  const int limit_;
  const int queue_;
  std::atomic<long long> pending_{0};
  std::atomic<int> available_;
  std::atomic<int> waiters_{0};
  Sem sem_;
};

using kevlar::bench::Caller;
using kevlar::bench::NoLimiter;
using kevlar::bench::Regime;

template <class Sem>
bool queued(const TwoObjectLimiter<Sem>& s) noexcept {
  return s.waiting() > 0;
}

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
auto mutex_control = [](asio::io_context& ioc) {
  return std::make_shared<TwoObjectLimiter<kevlar::bench::MutexDequeSemaphore>>(
      1, 1, ioc.get_executor(), 0u);
};
auto channel_control = [](asio::io_context& ioc) {
  return std::make_shared<TwoObjectLimiter<kevlar::bench::ChannelSemaphore>>(
      1, 1, ioc.get_executor(), 0u, 1u);
};

void no_limiter_pair(benchmark::State& state, Caller caller, Regime regime) {
  asio::io_context ioc(1);
  const NoLimiter none;
  run_pair(state, kevlar::Shield{}, none, ioc, caller, regime,
           regime == Regime::idle
               ? "idle loop; the shape without kevlar; ns and allocations per pair"
               : "live I/O (pending timer); the shape without kevlar; ns and allocations per pair");
}

#define KEVLAR_PAIR_FLOOR(caller, regime)                                               \
  BENCHMARK_CAPTURE(no_limiter_pair, caller##_##regime, Caller::caller, Regime::regime) \
      ->Name("BM_QueuedHandoffPair/no_limiter_control/" #caller "/" #regime)

#define KEVLAR_PAIR(sem, caller, regime)                                            \
  BENCHMARK_CAPTURE(pair_benchmark, sem##_##caller##_##regime, sem, Caller::caller, \
                    Regime::regime)                                                 \
      ->Name("BM_QueuedHandoffPair/" #sem "/" #caller "/" #regime)

KEVLAR_PAIR(unpaired, callback, idle);
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
BENCHMARK(BM_ConcurrencyLimit_contended)
    ->Name("BM_ConcurrencyLimit/contended/2")
    ->Arg(1)
    ->Arg(2)
    ->Threads(2)
    ->UseRealTime();
