// Benchmark layers of kevlar::UnpairedSemaphore against two controls in the same binary
// (docs/semaphore.md, Measurements, explains each layer and control): BM_Semaphore/<layer>, BM_SemaphoreControl/mutex_deque/<layer> and
// BM_SemaphoreControl/channel/<layer>. Every layer reports allocs_per_op and bytes_per_op and
// names its Asio regime in the label. All layers run on an idle loop (no reactor object in the
// io_context), so a hop costs tens of nanoseconds, not a syscall.
//
// Run: kevlar_benchmarks --benchmark_filter='BM_Semaphore' --benchmark_repetitions=9
//        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include "bench_support.hpp"
#include "semaphore_controls.hpp"

#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using kevlar::bench::AllocReport;
using kevlar::bench::ProcessAllocReport;

using kevlar::bench::keep_second_thread_alive;

// The three implementations, built the same way from an executor and an initial count.
struct Ours {
  using type = kevlar::UnpairedSemaphore;
  static std::unique_ptr<type> make(asio::any_io_executor ex, std::uint32_t initial) {
    return std::make_unique<type>(ex, initial);
  }
};
struct MutexDeque {
  using type = kevlar::bench::MutexDequeSemaphore;
  static std::unique_ptr<type> make(asio::any_io_executor ex, std::uint32_t initial) {
    return std::make_unique<type>(ex, initial);
  }
};
struct Channel {
  using type = kevlar::bench::ChannelSemaphore;
  static std::unique_ptr<type> make(asio::any_io_executor ex, std::uint32_t initial) {
    return std::make_unique<type>(ex, initial, initial > 1 ? initial : 1);
  }
};

constexpr const char* idle_loop = "idle loop";

// atomic_cas_control (B0): one CAS decrement and one CAS increment on an aligned word, the floor
// under ready_acquire_release.
void atomic_cas_control(benchmark::State& state) {
  keep_second_thread_alive();
  alignas(64) std::atomic<std::uint64_t> word{1};
  AllocReport allocs;
  for (auto _ : state) {
    std::uint64_t w = word.load(std::memory_order_relaxed);
    while (!word.compare_exchange_weak(w, w - 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
    }
    w = word.load(std::memory_order_relaxed);
    while (!word.compare_exchange_weak(w, w + 1, std::memory_order_release,
                                       std::memory_order_relaxed)) {
    }
  }
  allocs.report(state);
  state.SetLabel("no Asio");
}

/// Warms the caches with 64 steps, then runs one handler of `ioc` per iteration, allocations
/// counted by `Report`; a context that runs out of work (a completion never arrived) is reported
/// as an error instead of timing empty run_one() calls.
template <class Report>
void run_one_per_iteration(benchmark::State& state, asio::io_context& ioc) {
  for (int i = 0; i < 64; ++i) ioc.run_one();
  Report allocs;
  for (auto _ : state) {
    if (ioc.run_one() == 0) {
      state.SkipWithError("the io_context ran out of work: a completion never arrived");
      break;
    }
  }
  allocs.report(state);
}

// ready_acquire_release (B1): try_acquire + release with nobody waiting; no Asio involved.
template <class Impl>
void ready_acquire_release(benchmark::State& state) {
  keep_second_thread_alive();
  asio::io_context ioc(1);
  auto sem = Impl::make(ioc.get_executor(), 1);
  AllocReport allocs;
  for (auto _ : state) {
    bool ok = sem->try_acquire();
    benchmark::DoNotOptimize(ok);
    ok = sem->release();
    benchmark::DoNotOptimize(ok);
  }
  allocs.report(state);
  state.SetLabel("no Asio");
}

// release_no_waiter (B2): the release alone (permits were taken beforehand, outside the timing,
// in batches of 1024).
template <class Impl>
void release_no_waiter(benchmark::State& state) {
  keep_second_thread_alive();
  constexpr int batch = 1024;
  asio::io_context ioc(1);
  auto sem = Impl::make(ioc.get_executor(), batch);
  for (int i = 0; i < batch; ++i) (void)sem->try_acquire();
  AllocReport allocs;
  int n = 0;
  for (auto _ : state) {
    bool ok = sem->release();
    benchmark::DoNotOptimize(ok);
    if (++n == batch) {
      state.PauseTiming();
      for (int i = 0; i < batch; ++i) (void)sem->try_acquire();
      n = 0;
      state.ResumeTiming();
    }
  }
  allocs.report(state);
  state.SetLabel("no Asio");
}

// The handler-chain harness: each iteration is one io_context::run_one() that runs one completion
// handler; the handler does the layer's work (release, re-arm, emit ...), which queues the next
// completion. Everything happens inside the scheduler, where Asio's per-thread recycling caches
// live, as it does for any server's handlers.
template <class Sem, class Step>
struct Chain {
  Chain(Sem* s, asio::io_context* c, Step st) : sem(s), ioc(c), step(st) {}

  Sem* sem;
  asio::io_context* ioc;
  Step step;  // the layer's work, run by each completion; it must queue the next completion
  std::uint64_t completions = 0;

  auto handler() {
    return asio::bind_executor(*ioc, [this](error_code) {
      ++completions;
      step(*this);
    });
  }
};

// The layers' steps.
struct ReadyStep {  // release, then acquire again (a permit is free)
  bool on = true;
  template <class C>
  void operator()(C& c) const {
    if (!on) return;
    (void)c.sem->release();
    c.sem->async_acquire(c.handler());
  }
};
struct ParkUnlinkStep {  // park with a connected slot, then cancel from the waiter's executor
  asio::cancellation_signal* sig;
  bool on = true;
  template <class C>
  void operator()(C& c) const {
    if (!on) return;
    c.sem->async_acquire(asio::bind_cancellation_slot(sig->slot(), c.handler()));
    sig->emit(asio::cancellation_type::terminal);
  }
};
template <bool Cancellable>
struct HandoffStep {  // park the next waiter, then release: a direct handoff to it (T5)
  asio::cancellation_signal* sig;
  bool on = true;
  template <class C>
  void operator()(C& c) const {
    if (!on) return;
    if constexpr (Cancellable) {
      c.sem->async_acquire(asio::bind_cancellation_slot(sig->slot(), c.handler()));
    } else {
      c.sem->async_acquire(c.handler());
    }
    (void)c.sem->release();
  }
};

template <class Impl, class Step, class Start>
void run_chain(benchmark::State& state, std::uint32_t initial, Step step, Start start) {
  keep_second_thread_alive();
  asio::io_context ioc(1);
  auto sem = Impl::make(ioc.get_executor(), initial);
  Chain<typename Impl::type, Step> chain(sem.get(), &ioc, step);
  start(chain);
  run_one_per_iteration<AllocReport>(state, ioc);
  state.SetLabel(idle_loop);
  // Tear down: stop re-arming, let the last completion run.
  chain.step.on = false;
  sem.reset();
  ioc.run_for(std::chrono::seconds(1));  // a hang guard only: returns as soon as idle
}

// async_acquire_ready (B3): async_acquire with a permit free. Boost 1.81 has no immediate
// executor, so the completion is posted; the handler releases and acquires again.
template <class Impl>
void async_acquire_ready(benchmark::State& state) {
  run_chain<Impl>(state, 1, ReadyStep{}, [](auto& c) { c.sem->async_acquire(c.handler()); });
}

// park_unlink (B4): a wait on an empty semaphore with a connected slot, cancelled from the
// waiter's own handler, and its aborted completion delivered: op block (recycled), slot handler,
// lock, link, unlink, delivery.
template <class Impl>
void park_unlink(benchmark::State& state) {
  asio::cancellation_signal sig;
  run_chain<Impl>(state, 0, ParkUnlinkStep{&sig}, [](auto& c) { c.step(c); });
}

// handoff_same_thread (B5) and handoff_cancellable (B8): the handler parks the next waiter and
// releases, which hands the permit to it directly (T5); its completion is the next run_one().
template <class Impl, bool Cancellable>
void handoff(benchmark::State& state) {
  asio::cancellation_signal sig;
  run_chain<Impl>(state, 0, HandoffStep<Cancellable>{&sig}, [](auto& c) { c.step(c); });
}

// forced_handoff: two coroutines (on io_context::executor_type, deferred tokens) alternately hand
// one permit through the queue: each resumption releases (to the other, parked) and parks again.
// One iteration = one run_one() = one handoff.
template <class Impl>
void forced_handoff(benchmark::State& state) {
  keep_second_thread_alive();
  using Ex = asio::io_context::executor_type;
  asio::io_context ioc(1);
  auto sem = Impl::make(ioc.get_executor(), 1);
  bool stop = false;
  auto player = [&]() -> asio::awaitable<void, Ex> {
    for (;;) {
      auto [ec] = co_await sem->async_acquire(asio::as_tuple(asio::deferred));
      if (ec || stop) co_return;
      (void)sem->release();
    }
  };
  asio::co_spawn(ioc.get_executor(), player(), asio::detached);
  asio::co_spawn(ioc.get_executor(), player(), asio::detached);
  // After the warm-up both players park in turn.
  run_one_per_iteration<AllocReport>(state, ioc);
  stop = true;
  (void)sem->release();
  ioc.run_for(std::chrono::seconds(1));  // hang guard only: the players finish at once
  state.SetLabel(idle_loop);
}

// asio_hop_control: the floor under the handoff layers. A handler that posts itself (one
// scheduler hop per run_one), and a coroutine on io_context::executor_type that resumes itself
// through `co_await post(deferred)`: what one hop costs with no semaphore at all.
void asio_hop_control(benchmark::State& state) {
  keep_second_thread_alive();
  asio::io_context ioc(1);
  struct Hop {
    asio::io_context* ioc;
    bool* on;
    void operator()() const {
      if (*on) asio::post(*ioc, *this);
    }
  };
  bool on = true;
  asio::post(ioc, Hop{&ioc, &on});
  run_one_per_iteration<AllocReport>(state, ioc);
  on = false;
  ioc.run_for(std::chrono::seconds(1));
  state.SetLabel(idle_loop);
}

void asio_coroutine_hop_control(benchmark::State& state) {
  keep_second_thread_alive();
  using Ex = asio::io_context::executor_type;
  asio::io_context ioc(1);
  bool stop = false;
  asio::co_spawn(
      ioc.get_executor(),
      [&]() -> asio::awaitable<void, Ex> {
        while (!stop) co_await asio::post(ioc.get_executor(), asio::deferred);
      },
      asio::detached);
  run_one_per_iteration<AllocReport>(state, ioc);
  stop = true;
  ioc.run_for(std::chrono::seconds(1));
  state.SetLabel(idle_loop);
}

// handoff_cross_thread (B7, parked regime): the waiter's io_context runs on another thread,
// parked in run(); its handler re-parks the next waiter. The benchmark thread releases and spins
// until the woken waiter has run. Measures the cross-thread wake-up more than the semaphore.
template <class Impl>
void handoff_cross_thread(benchmark::State& state) {
  keep_second_thread_alive();
  asio::io_context ioc(1);
  auto guard = asio::make_work_guard(ioc);
  auto sem = Impl::make(ioc.get_executor(), 0);
  std::atomic<std::uint64_t> woken{0};
  std::atomic<bool> stop{false};
  std::function<void()> arm = [&] {
    sem->async_acquire(asio::bind_executor(ioc, [&](error_code ec) {
      if (!ec && !stop.load(std::memory_order_relaxed)) arm();
      woken.fetch_add(1, std::memory_order_release);
    }));
  };
  asio::post(ioc, arm);
  std::thread runner([&] { ioc.run(); });
  for (int i = 0; i < 64; ++i) {  // warm-up
    (void)sem->release();
    while (woken.load() == static_cast<std::uint64_t>(i)) std::this_thread::yield();
  }
  ProcessAllocReport allocs;
  for (auto _ : state) {
    const std::uint64_t before = woken.load(std::memory_order_relaxed);
    (void)sem->release();
    while (woken.load(std::memory_order_acquire) == before) {
    }
  }
  allocs.report(state);
  stop = true;
  (void)sem->release();
  guard.reset();
  runner.join();
  state.SetLabel(std::string(idle_loop) + ", waiter thread parked in run()");
}

// contended/2 (B10): two threads, each with its own io_context, run chains of
// async_acquire -> tiny work -> release on a one-permit semaphore; the time is per cycle of the
// measured thread. Most waits park and are woken across threads: the wake-up regime dominates.
template <class Impl>
void contended(benchmark::State& state) {
  keep_second_thread_alive();
  asio::io_context main_ioc(1), other_ioc(1);
  auto sem = Impl::make(main_ioc.get_executor(), 1);
  std::atomic<bool> stop{false};
  struct Worker {
    typename Impl::type* sem;
    asio::io_context* ioc;
    std::atomic<bool>* stop;
    std::uint64_t work = 0;
    void arm() {
      sem->async_acquire(asio::bind_executor(*ioc, [this](error_code ec) {
        if (ec) return;
        benchmark::DoNotOptimize(++work);
        const bool more = !stop->load(std::memory_order_relaxed);
        if (more) arm();  // queue behind the other thread before handing over
        (void)sem->release();
      }));
    }
  };
  Worker mine{sem.get(), &main_ioc, &stop}, theirs{sem.get(), &other_ioc, &stop};
  theirs.arm();
  std::thread other([&] { other_ioc.run(); });
  mine.arm();
  run_one_per_iteration<ProcessAllocReport>(state, main_ioc);
  // Teardown: stop re-arming and drain this side, then stop (rather than drain) the other
  // side's context: with the channel control its last send was seen to stay parked there, and a
  // benchmark must not hang on a control's teardown.
  stop = true;
  main_ioc.run();
  other_ioc.stop();
  other.join();
  state.SetLabel(std::string(idle_loop) + ", 2 threads, limit 1");
}

template <class Impl>
void register_layers(const std::string& prefix) {
  benchmark::RegisterBenchmark((prefix + "ready_acquire_release").c_str(),
                               ready_acquire_release<Impl>);
  benchmark::RegisterBenchmark((prefix + "release_no_waiter").c_str(), release_no_waiter<Impl>);
  benchmark::RegisterBenchmark((prefix + "async_acquire_ready").c_str(), async_acquire_ready<Impl>);
  benchmark::RegisterBenchmark((prefix + "park_unlink").c_str(), park_unlink<Impl>);
  benchmark::RegisterBenchmark((prefix + "handoff_same_thread").c_str(), handoff<Impl, false>);
  benchmark::RegisterBenchmark((prefix + "forced_handoff").c_str(), forced_handoff<Impl>);
  benchmark::RegisterBenchmark((prefix + "handoff_cross_thread").c_str(),
                               handoff_cross_thread<Impl>)
      ->UseRealTime();
  benchmark::RegisterBenchmark((prefix + "handoff_cancellable").c_str(), handoff<Impl, true>);
  benchmark::RegisterBenchmark((prefix + "contended/2").c_str(), contended<Impl>)->UseRealTime();
}

const bool registered = [] {
  benchmark::RegisterBenchmark("BM_Semaphore/atomic_cas_control", atomic_cas_control);
  benchmark::RegisterBenchmark("BM_Semaphore/asio_hop_control", asio_hop_control);
  benchmark::RegisterBenchmark("BM_Semaphore/asio_coroutine_hop_control",
                               asio_coroutine_hop_control);
  register_layers<Ours>("BM_Semaphore/");
  register_layers<MutexDeque>("BM_SemaphoreControl/mutex_deque/");
  register_layers<Channel>("BM_SemaphoreControl/channel/");
  return true;
}();

}  // namespace
