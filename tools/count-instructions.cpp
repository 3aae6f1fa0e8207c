// kevlar_count_instructions: instructions per call of a few shields, driven by
// tools/count-instructions.sh. `<shield>` runs synchronous calls (Shield::execute);
// `async_<shield>` runs the same shield's calls one after another from a coroutine on an
// io_context (`co_await shield.execute_async(op, deferred)`, the operation completing through a
// post, as BM_Overhead/one_layer_async does); `pair_<semaphore>_<caller>` runs queued-handoff
// pairs, the idle cells of BM_QueuedHandoffPair (benchmarks/handoff_pair.hpp), and counts a pair
// as one call.
//
// Wall-clock times on a shared VM move by 10-30 % between runs; instruction counts do not. The
// script runs this program under callgrind with N and 2N calls and divides the difference by N,
// which cancels start-up and shield construction.
#include "handoff_pair.hpp"
#include "second_thread.hpp"
#include "two_object_limiter.hpp"

#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/metrics.hpp>
#include <kevlar/spdlog.hpp>
#include <kevlar/timeout.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

using kevlar::bench::PassThrough;

/// The rate limit's control: a pass-through layer that reads the shield's clock and does one CAS
/// on a shared word, what the limiter's admission adds to a layer.
class ClockCasControl final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "ClockCasControl"; }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    const std::int64_t now = layer.clock().now().time_since_epoch().count();
    std::int64_t w = word_.load(std::memory_order_relaxed);
    while (!word_.compare_exchange_weak(w, (w > now ? w : now) + 1, std::memory_order_relaxed,
                                        std::memory_order_relaxed)) {
    }
    return kevlar::Step::run_inner;
  }

 private:
  std::atomic<std::int64_t> word_{0};
};

[[gnu::noinline]] int work(int x) {
  asm volatile("" : "+r"(x));
  return x + 1;
}

/// True for async_hedge_second_wins: the first attempt of each execution fails.
bool fail_first_attempt = false;

/// Completes with (no error, x + 1) through a post to the handler's executor (with an error for
/// an execution's first attempt when fail_first_attempt is set).
template <class Executor, class Token>
auto async_work(const Executor& ex, int x, Token&& token) {
  return boost::asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [ex](auto handler, int v) {
        // The flag first: the other modes must not pay for reading the attempt's context.
        const kevlar::Context* ctx = fail_first_attempt ? kevlar::attempt_context(handler) : nullptr;
        const bool fail = ctx != nullptr && ctx->attempt() == 1;
        auto hex = boost::asio::get_associated_executor(handler, ex);
        boost::asio::post(
            hex, boost::asio::append(std::move(handler),
                                     fail ? make_error_code(boost::system::errc::connection_reset)
                                          : boost::system::error_code(),
                                     work(v)));
      },
      token, x);
}

/// `WithDeadline`: every call carries the caller's deadline (CallOptions::deadline), an hour away,
/// so that it is armed and disarmed but never expires.
template <bool WithDeadline = false>
int run_async(const kevlar::Shield& shield, long calls) {
  namespace asio = boost::asio;
  asio::io_context ioc(1);
  int x = 0;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        for (long i = 0; i < calls; ++i) {
          auto op = [&](auto token) { return async_work(ex, x, std::move(token)); };
          if constexpr (WithDeadline) {
            x = co_await shield.execute_async(
                kevlar::CallOptions::within(std::chrono::hours(1), shield.clock()), op,
                asio::deferred);
          } else {
            x = co_await shield.execute_async(op, asio::deferred);
          }
        }
      },
      asio::detached);
  ioc.run();
  return x;
}

/// Runs `pairs` measured pairs (after the driver's warm-up) of one idle BM_QueuedHandoffPair cell:
/// `<semaphore>_<caller>`, semaphore one of `unpaired`, `priority` and `queue_timeout` (the
/// limiter with a priority generator, or a fixed queue timeout), `mutex_control`,
/// `channel_control`, `shield_control` and `no_limiter_control`, caller `callback` or `coroutine`.
int run_pair_cell(const char* cell, long pairs) {
  using kevlar::bench::Caller;
  struct CountedLoop {
    long left;
    void measuring() {}
    bool next() { return left-- > 0; }
  };
  kevlar::bench::keep_second_thread_alive();  // as the benchmark does
  const std::string name = cell;
  const Caller caller = name.ends_with("_coroutine") ? Caller::coroutine : Caller::callback;
  boost::asio::io_context ioc(1);
  CountedLoop loop{pairs};
  kevlar::bench::PairRun run;
  if (name.starts_with("no_limiter_control_")) {
    const kevlar::bench::NoLimiter none;
    run = kevlar::bench::run_pairs(loop, kevlar::Shield{}, none, ioc, caller,
                                   kevlar::bench::Regime::idle);
  } else if (name.starts_with("shield_control_")) {
    const kevlar::bench::ShieldOnly shield_only;
    run = kevlar::bench::run_pairs(loop, kevlar::bench::pair_shield_control(), shield_only, ioc,
                                   caller, kevlar::bench::Regime::idle);
  } else if (name.starts_with("unpaired_")) {
    const auto limiter = kevlar::bench::pair_limiter();
    run = kevlar::bench::run_pairs(loop, kevlar::Shield{}.use(limiter), *limiter, ioc, caller,
                                   kevlar::bench::Regime::idle);
  } else if (name.starts_with("priority_")) {
    const auto limiter = kevlar::bench::pair_priority_limiter();
    run = kevlar::bench::run_pairs(loop, kevlar::Shield{}.use(limiter), *limiter, ioc, caller,
                                   kevlar::bench::Regime::idle);
  } else if (name.starts_with("queue_timeout_")) {
    const auto limiter = kevlar::bench::pair_queue_timeout_limiter();
    run = kevlar::bench::run_pairs(loop, kevlar::Shield{}.use(limiter), *limiter, ioc, caller,
                                   kevlar::bench::Regime::idle);
  } else if (name.starts_with("mutex_control_")) {
    const auto limiter = kevlar::bench::pair_mutex_control(ioc);
    run = kevlar::bench::run_pairs(loop, kevlar::Shield{}.use(limiter), *limiter, ioc, caller,
                                   kevlar::bench::Regime::idle);
  } else if (name.starts_with("channel_control_")) {
    const auto limiter = kevlar::bench::pair_channel_control(ioc);
    run = kevlar::bench::run_pairs(loop, kevlar::Shield{}.use(limiter), *limiter, ioc, caller,
                                   kevlar::bench::Regime::idle);
  } else {
    std::fprintf(stderr, "unknown pair cell %s\n", cell);
    std::exit(2);
  }
  if (!run.b_was_queued || run.b_value != 42) {
    std::fprintf(stderr, "pair %s: not a queued handoff returning 42\n", cell);
    std::exit(1);
  }
  return run.b_value;
}

kevlar::Shield make(const char* name) {
  using namespace std::chrono_literals;
  const kevlar::Shield empty;
  if (std::strcmp(name, "empty") == 0) return empty;
  if (std::strcmp(name, "pass_through") == 0) return empty.use(std::make_shared<PassThrough>());
  if (std::strcmp(name, "retry") == 0) return empty.retry(3);
  // The same retry holding a budget of each mode (compare with retry): the happy path feeds the
  // tokens mode a success at capacity, deposits into the rate window, counts the concurrency
  // mode's execution in and out.
  if (std::strncmp(name, "retry_budget_", 13) == 0) {
    kevlar::RetryOptions o;
    const std::string mode = name + 13;
    if (mode == "tokens") o.budget = kevlar::RetryBudget::tokens();
    if (mode == "rate") o.budget = kevlar::RetryBudget::rate();
    if (mode == "concurrency") o.budget = kevlar::RetryBudget::concurrency();
    if (o.budget) return empty.retry(o);
  }
  if (std::strcmp(name, "timeout") == 0) return empty.timeout(10s);
  if (std::strcmp(name, "circuit_breaker") == 0) {
    kevlar::CircuitBreakerOptions o;
    o.failure_ratio = 0.1;
    o.minimum_throughput = 100;
    return empty.circuit_breaker(o);
  }
  if (std::strcmp(name, "concurrency_limit") == 0) return empty.concurrency_limit(1024);
  // The same limiter with a priority generator and a fixed queue timeout, neither used while a
  // permit is free (compare with concurrency_limit).
  if (std::strcmp(name, "concurrency_limit_configured") == 0) {
    kevlar::ConcurrencyLimitOptions o;
    o.max_concurrency = 1024;
    o.max_queue = 16;
    o.priority_generator = [](const kevlar::Context&) { return std::int32_t{1}; };
    o.queue_timeout = kevlar::QueueTimeout::fixed(1s);
    return empty.concurrency_limit(o);
  }
  // The adaptive limit over the same 1024 permits (one call in flight: its AIMD holds the limit),
  // timing every call, or one in 16 (compare with concurrency_limit and clock_cas_control). Its
  // window is an hour, so that no window closes during the run: how many would close depends on
  // how fast the machine runs the calls, which would make the count move with the machine's
  // speed. A window's update is BM_AdaptiveLimit/window_update's.
  if (std::strncmp(name, "adaptive_concurrency_limit", 26) == 0) {
    kevlar::AdaptiveLimitOptions o;
    o.initial_limit = o.max_limit = 1024;
    o.window = std::chrono::hours(1);
    o.sample_one_in = std::strcmp(name + 26, "_sampled") == 0 ? 16 : 1;
    return empty.adaptive_concurrency_limit(o);
  }
  if (std::strcmp(name, "fallback") == 0) return empty.fallback(0);
  // The adaptive throttle with nothing refused (its rejection probability stays 0): one request
  // and one accept counted in the current bucket (compare with pass_through).
  if (std::strcmp(name, "adaptive_throttle") == 0) return empty.adaptive_throttle();
  // Chaos built in and switched off (the production shape): compare with pass_through.
  if (std::strcmp(name, "chaos_disabled") == 0) {
    kevlar::ChaosFaultOptions fault;
    fault.chaos.enabled = false;
    return empty.use(std::make_shared<kevlar::ChaosFaultStrategy>(fault));
  }
  // A rate that never rejects here: one permit per nanosecond, a burst of 2^31-1.
  kevlar::RateLimitOptions rate;
  rate.permits = static_cast<int>(kevlar::RateLimitLedger::max_count);
  rate.window = 1s;
  if (std::strcmp(name, "rate_limit") == 0) return empty.rate_limit(rate);
  if (std::strcmp(name, "clock_cas_control") == 0) {
    return empty.use(std::make_shared<ClockCasControl>());
  }
  // Asynchronous only: the first attempt wins before the 10 s delay (no hedge launched), or the
  // first fails and the second, launched with it, wins.
  if (std::strcmp(name, "hedge_first_wins") == 0) return empty.hedge(2, 10s);
  if (std::strcmp(name, "hedge_second_wins") == 0) {
    fail_first_attempt = true;
    return empty.hedge(2, 0s);
  }
  // The same, the hedge admitted by a concurrency budget and given back when its attempt ends.
  if (std::strcmp(name, "hedge_second_wins_budget") == 0) {
    fail_first_attempt = true;
    kevlar::HedgeOptions o;
    o.max_attempts = 2;
    o.delay = 0s;
    o.budget = kevlar::RetryBudget::concurrency();
    return empty.hedge(o);
  }
  kevlar::CircuitBreakerOptions ratio;
  ratio.failure_ratio = 0.1;
  ratio.minimum_throughput = 100;
  const kevlar::Shield trb = empty.timeout(10s).retry(3).circuit_breaker(ratio);
  if (std::strcmp(name, "timeout_retry_breaker") == 0) return trb;
  if (std::strcmp(name, "five_strategies") == 0) {
    return empty.rate_limit(rate).timeout(10s).retry(3).circuit_breaker(ratio).concurrency_limit(
        1024);
  }
  // The same shield, named and observed: by the metrics observer, by the spdlog observer (a null
  // sink at spdlog's default level, info, where a successful call logs nothing), or by both.
  const std::string observed = name;
  if (observed.starts_with("observed_trb_")) {
    const kevlar::Shield named = trb.with_name("api");
    auto metrics = std::make_shared<kevlar::MetricsObserver>();
    auto logger = std::make_shared<spdlog::logger>(
        "count", std::make_shared<spdlog::sinks::null_sink_mt>());
    auto log = std::make_shared<kevlar::SpdlogObserver>(logger);
    // The control: an observer that wants only ExecutionFinished and does nothing with it, the
    // price of being observed at all (the execution layer, its clock reads, one event delivered).
    struct Noop final : kevlar::Observer {
      void on_event(const kevlar::Event&) override {}
      [[nodiscard]] kevlar::EventKinds interests() const override {
        return kevlar::event_kinds<kevlar::ExecutionFinished>();
      }
    };
    if (observed == "observed_trb_noop") return named.observed_by(std::make_shared<Noop>());
    if (observed == "observed_trb_metrics") return named.observed_by(metrics);
    if (observed == "observed_trb_spdlog") return named.observed_by(log);
    if (observed == "observed_trb_both") return named.observed_by(metrics).observed_by(log);
  }
  std::fprintf(stderr, "unknown shield %s\n", name);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <shield> <calls>\n", argv[0]);
    return 2;
  }
  const long calls = std::atol(argv[2]);
  if (std::strncmp(argv[1], "pair_", 5) == 0) {
    std::printf("%d\n", run_pair_cell(argv[1] + 5, calls));
    return 0;
  }
  if (std::strncmp(argv[1], "async_deadline_", 15) == 0) {
    std::printf("%d\n", run_async<true>(make(argv[1] + 15), calls));
    return 0;
  }
  if (std::strncmp(argv[1], "async_", 6) == 0) {
    std::printf("%d\n", run_async(make(argv[1] + 6), calls));
    return 0;
  }
  const kevlar::Shield shield = make(argv[1]);
  int x = 0;
  for (long i = 0; i < calls; ++i) x = shield.execute([x] { return work(x); });
  std::printf("%d\n", x);
  return 0;
}
