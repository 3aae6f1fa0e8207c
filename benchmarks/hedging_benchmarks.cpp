// BM_Hedging: the cost of a hedge when its first attempt wins before the delay (no hedge
// launched: one stagger armed and disarmed through the deadline queue, woken by kevlar's deadline
// thread as a timeout's is: the loop stays idle), and when the first attempt fails and the second,
// launched with it, wins (delay 0: no deadline). BM_Hedging/one_layer_control is the same loop
// through one pass-through strategy (BM_Overhead/one_layer_async's shape), in the same binary.
// BM_Hedging/second_attempt_wins_budget: the same, the hedge admitted by a RetryBudget.
#include "bench_support.hpp"
#include "pass_through.hpp"

#include <kevlar/hedging.hpp>
#include <kevlar/timeout.hpp>

#include <chrono>
#include <memory>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

using kevlar::bench::PassThrough;

/// bench::async_work, failing the first attempt of each execution (its number comes from the
/// attempt's context).
struct FailFirstAttempt {
  template <class Token>
  auto operator()(const asio::any_io_executor& ex, int x, Token&& token) const {
    return asio::async_initiate<Token, void(boost::system::error_code, int)>(
        [ex](auto handler, int v) {
          const kevlar::Context* ctx = kevlar::attempt_context(handler);
          const bool fail = ctx != nullptr && ctx->attempt() == 1;
          auto hex = asio::get_associated_executor(handler, ex);
          asio::post(hex, asio::append(std::move(handler),
                                       fail ? make_error_code(boost::system::errc::connection_reset)
                                            : boost::system::error_code(),
                                       v + 1));
        },
        token, x);
  }
};

/// After the loop: releases the stagger queue's idle timer so that run() returns at once.
void release_timers(asio::io_context& ioc) { kevlar::TimeoutStrategy::release_idle_timers(ioc); }

void BM_Hedging_one_layer_control(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.use(std::make_shared<PassThrough>());
  kevlar::bench::run_async_calls(state, s, "idle loop; the pass-through control");
}

void BM_Hedging_first_attempt_wins(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.hedge(2, 10s);
  kevlar::bench::run_async_calls(
      state, s,
      "idle loop (the stagger's deadline is woken by kevlar's deadline thread); compare "
      "BM_Timeout/completes_instantly_async",
      release_timers);
}

void BM_Hedging_second_attempt_wins(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.hedge(2, 0s);
  kevlar::bench::run_async_calls(
      state, s, "idle loop (delay 0: no timer); two attempts per call", release_timers,
      FailFirstAttempt{});
}

void BM_Hedging_second_attempt_wins_budget(benchmark::State& state) {
  kevlar::HedgeOptions o;
  o.max_attempts = 2;
  o.delay = 0s;
  o.budget = kevlar::RetryBudget::concurrency();
  static const kevlar::Shield s = kevlar::Shield{}.hedge(o);
  kevlar::bench::run_async_calls(
      state, s,
      "idle loop; the hedge admitted by a concurrency budget; compare "
      "BM_Hedging/second_attempt_wins",
      release_timers, FailFirstAttempt{});
}

}  // namespace

BENCHMARK(BM_Hedging_one_layer_control)->Name("BM_Hedging/one_layer_control");
BENCHMARK(BM_Hedging_first_attempt_wins)->Name("BM_Hedging/first_attempt_wins");
BENCHMARK(BM_Hedging_second_attempt_wins)->Name("BM_Hedging/second_attempt_wins");
BENCHMARK(BM_Hedging_second_attempt_wins_budget)->Name("BM_Hedging/second_attempt_wins_budget");
