// The queued-handoff pair (limit 1, queue 1: call A takes the permit and awaits a one-shot
// promise; call B queues; the promise fires; B returns 42), run back to back inside one
// io_context::run(). Shared by BM_QueuedHandoffPair (benchmarks/limiter_benchmarks.cpp) and the
// instruction-count driver (tools/count-instructions.cpp), so that the gate counts exactly the
// pairs the benchmark times.
//
// A `Loop` decides how many pairs run: `bool next()` is asked after each measured pair (and
// before the first), `void measuring()` once, when the warm-up pairs are done.
#pragma once

#include "pass_through.hpp"

#include <handoff_ops.hpp>

#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/shield.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace kevlar::bench {

enum class Caller { callback, coroutine };
enum class Regime { idle, live_io };
/// Loop passes a pair may wait for B to queue before the run ends with an error.
inline constexpr int max_fire_polls = 1000;

/// Whether call B waits in the limiter's queue (the pair's precondition for firing the promise).
inline bool queued(const kevlar::ConcurrencyLimitStrategy& s) noexcept {
  return s.state().queued > 0;
}
inline bool queued(const kevlar::AdaptiveConcurrencyLimitStrategy& s) noexcept {
  return s.state().queued > 0;
}

/// no_limiter_control's stand-in for a limiter: the pair without kevlar (see Gate).
struct NoLimiter {};

/// shield_control's stand-in for a limiter: the pair through a shield whose one layer does nothing
/// (the shield passed to run_pairs), with B's operation parked at the Gate as in
/// no_limiter_control. Two executions through kevlar's engine and no limiter: what any pair of
/// shield calls costs, whatever limits it.
struct ShieldOnly {};

/// The call B of no_limiter_control and shield_control: parked until resume(), which starts B's
/// operation (async_answer) right there with B's handler, as a grant starts a queued call's
/// operation inside the releasing completion.
struct AnswerNow {
  template <class H>
  void operator()(H&& h) const {
    kevlar::testing::async_answer(std::forward<H>(h));
  }
};
using Gate = kevlar::testing::ParkedOp<AnswerNow>;

/// How a run of pairs ended.
struct PairRun {
  bool b_was_queued = true;  ///< every pair was a queued handoff
  int b_value = 0;           ///< what the last B returned (42)
};

/// One run's pairs, back to back (see run_pairs).
template <class Strategy, class Loop>
struct PairDriver {
  PairDriver(Loop& l, const kevlar::Shield& sh, const Strategy& lim, boost::asio::io_context& io,
             Caller c)
      : loop(l), shield(sh), limiter(lim), ioc(io), caller(c) {}
  Loop& loop;
  const kevlar::Shield& shield;
  const Strategy& limiter;
  boost::asio::io_context& ioc;
  Caller caller;
  kevlar::testing::OneShot promise;
  Gate gate;  // the call B of no_limiter_control and shield_control
  int done = 0;
  int warm_up = 100;  // untimed pairs first: recycling caches, deadline services
  bool measuring = false;
  int polls = 0;
  PairRun result;
  std::function<void()> finish;

  static constexpr bool no_limiter = std::is_same_v<Strategy, NoLimiter>;
  /// B waits at the gate, not in a limiter's queue (no_limiter_control, shield_control).
  static constexpr bool gated = no_limiter || std::is_same_v<Strategy, ShieldOnly>;

  // Call A: through the shield, or (no_limiter_control) the bare operation.
  template <class Token>
  auto call_a(Token&& token) {
    if constexpr (no_limiter) {
      return promise.wait(std::forward<Token>(token));
    } else {
      return shield.execute_async([this](auto t) { return promise.wait(std::move(t)); },
                                  std::forward<Token>(token));
    }
  }
  // Call B: through the shield, or parked until A's completion starts its operation (bare, or
  // through the shield: shield_control).
  template <class Token>
  auto call_b(Token&& token) {
    if constexpr (no_limiter) {
      return gate.wait(std::forward<Token>(token));
    } else if constexpr (gated) {
      return shield.execute_async([this](auto t) { return gate.wait(std::move(t)); },
                                  std::forward<Token>(token));
    } else {
      return shield.execute_async(
          [](auto t) { return kevlar::testing::async_answer(std::move(t)); },
          std::forward<Token>(token));
    }
  }
  // A's handler; without a limiter it then starts B's operation, in the order a grant runs after
  // the releasing call's handler.
  void a_done() {
    one_done();
    // B may not be parked: a run ending with an error fires the promise without it.
    if constexpr (gated) {
      if (gate.pending()) gate.resume();
    }
  }
  void b_done(int v) {
    result.b_value = v;
    one_done();
  }

  void start() {
    using boost::system::error_code;
    namespace asio = boost::asio;
    done = 0;
    polls = 0;
    if (caller == Caller::callback) {
      call_a(asio::bind_executor(ioc, [this](error_code, int) { a_done(); }));
      call_b(asio::bind_executor(ioc, [this](error_code ec, int v) { b_done(ec ? -1 : v); }));
    } else {
      // A failure is counted all the same: an error must end the run, not hang it.
      asio::co_spawn(
          ioc,
          [this]() -> asio::awaitable<void> {
            try {
              co_await call_a(asio::deferred);
            } catch (...) {
            }
            a_done();
          },
          asio::detached);
      asio::co_spawn(
          ioc,
          [this]() -> asio::awaitable<void> {
            int v = -1;
            try {
              v = co_await call_b(asio::deferred);
            } catch (...) {
            }
            b_done(v);
          },
          asio::detached);
    }
    fire_when_b_queued();
  }
  [[nodiscard]] bool b_parked() const noexcept {
    if constexpr (gated) {
      return gate.pending();
    } else {
      return queued(limiter);
    }
  }
  // A takes the permit and parks on the promise, then B queues. Started from inside the loop,
  // both happen before start() returns (co_spawn runs a coroutine inline up to its first
  // suspension when already on its executor); the check stays, so that a pair in which B did not
  // queue is reported rather than measured. The promise fires only then.
  void fire_when_b_queued() {
    if (promise.pending() && (b_parked() || done > 0)) {
      // done > 0: B ran first, without queueing; A waits on the promise now. Not a queued
      // handoff: the run ends with an error after this pair.
      if (done > 0) result.b_was_queued = false;
      promise.fire();
      return;
    }
    if (++polls > max_fire_polls) {  // neither state came: end the run with an error, not a hang
      result.b_was_queued = false;
      if (promise.pending()) promise.fire();
      finish();
      return;
    }
    boost::asio::post(ioc, [this] { fire_when_b_queued(); });
  }
  void one_done() {
    if (++done < 2) return;
    if (warm_up > 0) {
      --warm_up;
      start();
      return;
    }
    if (!measuring) {
      measuring = true;
      loop.measuring();
    }
    if (result.b_was_queued && loop.next()) {
      start();
      return;
    }
    finish();
  }
};

/// Runs pairs back to back inside one io_context::run(), as a server's loop runs: each pair
/// starts from the completion that ends the one before. Asio keeps its per-thread state, the
/// recycling allocator's cache among it, for the length of one run() call; a harness calling
/// run_one()/poll_one() per handler rebuilt it at every call, which cost every pair that set-up
/// and made every coroutine frame miss the cache.
template <class Strategy, class Loop>
PairRun run_pairs(Loop& loop, const kevlar::Shield& shield, const Strategy& limiter,
                  boost::asio::io_context& ioc, Caller caller, Regime regime) {
  std::optional<boost::asio::steady_timer> live;
  if (regime == Regime::live_io) {
    live.emplace(ioc, std::chrono::hours(1));
    live->async_wait([](boost::system::error_code) {});
  }
  auto guard = boost::asio::make_work_guard(ioc);
  PairDriver<Strategy, Loop> d(loop, shield, limiter, ioc, caller);
  d.finish = [&] {
    if (live) live->cancel();
    guard.reset();
  };
  boost::asio::post(ioc, [&] { d.start(); });
  ioc.run();
  return d.result;
}

/// shield_control's shield: one layer that does nothing, where the other cells have their limiter.
inline kevlar::Shield pair_shield_control() {
  return kevlar::Shield{}.use(std::make_shared<PassThrough>());
}

/// kevlar's limiter in the pair's shape: limit 1, queue 1.
inline std::shared_ptr<kevlar::ConcurrencyLimitStrategy> pair_limiter() {
  kevlar::ConcurrencyLimitOptions o;
  o.max_concurrency = 1;
  o.max_queue = 1;
  return kevlar::ConcurrencyLimitStrategy::create(o);
}

/// kevlar's limiter in the pair's shape with priorities in use: a generator gives each call that
/// finds no permit priority 1, so B's wait is linked by priority after the generator's call.
inline std::shared_ptr<kevlar::ConcurrencyLimitStrategy> pair_priority_limiter() {
  kevlar::ConcurrencyLimitOptions o;
  o.max_concurrency = 1;
  o.max_queue = 1;
  o.priority_generator = [](const kevlar::Context&) { return std::int32_t{1}; };
  return kevlar::ConcurrencyLimitStrategy::create(o);
}

/// kevlar's limiter in the pair's shape with a fixed queue timeout of 10 s (never reached): B's
/// queue deadline is armed and disarmed once per pair.
inline std::shared_ptr<kevlar::ConcurrencyLimitStrategy> pair_queue_timeout_limiter() {
  kevlar::ConcurrencyLimitOptions o;
  o.max_concurrency = 1;
  o.max_queue = 1;
  o.queue_timeout = kevlar::QueueTimeout::fixed(std::chrono::seconds(10));
  return kevlar::ConcurrencyLimitStrategy::create(o);
}

/// The adaptive limiter in the pair's shape: its limit pinned to 1 (floor = ceiling = 1), queue 1;
/// every call timed and sampled, windows closing as they fall due.
inline std::shared_ptr<kevlar::AdaptiveConcurrencyLimitStrategy> pair_adaptive_limiter() {
  kevlar::AdaptiveLimitOptions o;
  o.initial_limit = o.min_limit = o.max_limit = 1;
  o.max_queue = 1;
  return kevlar::AdaptiveConcurrencyLimitStrategy::create(o);
}

}  // namespace kevlar::bench
