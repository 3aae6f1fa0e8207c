// BM_Hedging: the cost of a hedge when its first attempt wins before the delay (no hedge
// launched: one stagger armed and disarmed through the deadline queue), and when the first attempt
// fails and the second, launched at once, wins. BM_Hedging/one_layer_control is the same loop
// through one pass-through strategy, measured in the same run (BM_Overhead/one_layer_async's
// shape).
#include "bench_support.hpp"

#include <kevlar/hedging.hpp>
#include <kevlar/timeout.hpp>

#include <boost/asio/detached.hpp>

#include <chrono>
#include <memory>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

class PassThrough final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "PassThrough"; }
  kevlar::Step on_start(kevlar::Layer&) override { return kevlar::Step::run_inner; }
};

/// Completes through a post like bench::async_work, failing the first attempt of each execution
/// when `fail_first` (the attempt's number comes from its context).
template <class Token>
auto async_attempt(const asio::any_io_executor& ex, bool fail_first, int x, Token&& token) {
  return asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [ex, fail_first](auto handler, int v) {
        const kevlar::Context* ctx = kevlar::attempt_context(handler);
        const bool fail = fail_first && ctx != nullptr && ctx->attempt() == 1;
        auto hex = asio::get_associated_executor(handler, ex);
        asio::post(hex, asio::append(std::move(handler),
                                     fail ? make_error_code(boost::system::errc::connection_reset)
                                          : boost::system::error_code(),
                                     v + 1));
      },
      token, x);
}

void run(benchmark::State& state, const kevlar::Shield& shield, bool fail_first) {
  asio::io_context ioc(1);
  kevlar::bench::AllocReport allocs;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        int x = 0;
        for (auto _ : state) {
          x = co_await shield.execute_async(
              [&](auto token) { return async_attempt(ex, fail_first, x, std::move(token)); });
          benchmark::DoNotOptimize(x);
        }
        kevlar::TimeoutStrategy::release_idle_timers(ioc);  // the hedge's stagger queue
      },
      [](std::exception_ptr ep) {
        if (ep) std::rethrow_exception(ep);
      });
  ioc.run();
  allocs.report(state);
  state.SetLabel("idle loop");
}

void BM_Hedging_one_layer_control(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.use(std::make_shared<PassThrough>());
  run(state, s, false);
}

void BM_Hedging_first_attempt_wins(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.hedge(2, 10s);
  run(state, s, false);
}

void BM_Hedging_second_attempt_wins(benchmark::State& state) {
  static const kevlar::Shield s = kevlar::Shield{}.hedge(2, 0s);
  run(state, s, true);
}

}  // namespace

BENCHMARK(BM_Hedging_one_layer_control)->Name("BM_Hedging/one_layer_control");
BENCHMARK(BM_Hedging_first_attempt_wins)->Name("BM_Hedging/first_attempt_wins");
BENCHMARK(BM_Hedging_second_attempt_wins)->Name("BM_Hedging/second_attempt_wins");
