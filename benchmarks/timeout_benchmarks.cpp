// BM_Timeout: the overhead of a timeout when the operation completes at once.
#include "bench_support.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/timeout.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

using kevlar::bench::async_work;
using kevlar::bench::work;

const kevlar::Shield& timeout_shield() {
  static const kevlar::Shield s = kevlar::Shield{}.timeout(10s);
  return s;
}

void BM_Timeout_completes_instantly(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, timeout_shield(),
                                "no event loop; compare BM_Overhead/raw_sync");
}

void BM_Timeout_completes_instantly_async(benchmark::State& state) {
  // The deadline is woken by kevlar's deadline thread, not by a timer on this loop: no reactor on
  // the loop, which stays idle; run() returns after the loop by itself.
  kevlar::bench::run_async_calls(state, timeout_shield(),
                                 "idle loop (no reactor: the deadline thread wakes the deadlines); "
                                 "compare BM_Overhead/raw_async");
}

/// The raw call on a loop with one timer pending for the whole run (a loop with I/O). Asio then
/// runs its reactor (an epoll_wait syscall) once per pass over its queue, as a real server with
/// any socket or timer does. Before the deadline thread, a timeout's deadline timer put every
/// caller's loop in this regime; this control shows what that cost, against BM_Overhead/raw_async.
void BM_Timeout_raw_async_live_io_control(benchmark::State& state) {
  asio::io_context ioc(1);
  asio::steady_timer pending(ioc, std::chrono::hours(1));
  pending.async_wait([](boost::system::error_code) {});
  kevlar::bench::AllocReport allocs;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        int x = 0;
        for (auto _ : state) {
          x = co_await async_work(ex, x, asio::deferred);
          benchmark::DoNotOptimize(x);
        }
      },
      [&](std::exception_ptr ep) {
        pending.cancel();
        if (ep) std::rethrow_exception(ep);
      });
  ioc.run();
  allocs.report(state);
  state.SetLabel("live I/O (one timer pending); what a reactor adds to BM_Overhead/raw_async");
}

/// Reads of the shield's clock through `read`, one per iteration.
template <kevlar::Clock::time_point (kevlar::Clock::*Read)() const noexcept>
void run_clock_reads(benchmark::State& state, const char* label) {
  const kevlar::Clock& clock = timeout_shield().clock();
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) benchmark::DoNotOptimize((clock.*Read)());
  allocs.report(state);
  state.SetLabel(label);
}

/// One read of the shield's clock, as the timeout makes per call to compute its deadline: the
/// floor under the synchronous timeout's overhead on this machine.
void BM_Timeout_clock_now_control(benchmark::State& state) {
  run_clock_reads<&kevlar::Clock::now>(
      state, "no event loop; one Clock::now(), the timeout's deadline read");
}

/// The coarse clock read the timeout used before: cheaper, but it lags by a scheduler tick or
/// more, so deadlines computed from it expired early.
void BM_Timeout_clock_coarse_now_control(benchmark::State& state) {
  run_clock_reads<&kevlar::Clock::coarse_now>(state, "no event loop; one Clock::coarse_now()");
}

}  // namespace

BENCHMARK(BM_Timeout_clock_now_control)->Name("BM_Timeout/clock_now_control");
BENCHMARK(BM_Timeout_clock_coarse_now_control)->Name("BM_Timeout/clock_coarse_now_control");
BENCHMARK(BM_Timeout_completes_instantly)->Name("BM_Timeout/completes_instantly");
BENCHMARK(BM_Timeout_raw_async_live_io_control)->Name("BM_Timeout/raw_async_live_io_control");
BENCHMARK(BM_Timeout_completes_instantly_async)->Name("BM_Timeout/completes_instantly_async");
