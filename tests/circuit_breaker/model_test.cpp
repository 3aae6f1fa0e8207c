// Model tests: random sequences (fixed seeds) of calls, cancellations, clock moves and manual
// control run through a Shield and, side by side, through a small reference state machine. Every
// step must agree on whether the call ran, what it returned and the breaker's state.
#include "breaker_test_support.hpp"

#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>

#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using S = CircuitState;

using test::Boom;

enum class Op { succeed, fail, cancel, advance, isolate, reset };

/// What one call produced.
struct Result {
  bool ran = false;
  std::string kind;  // "value", "boom", "cancelled", "circuit_open", "isolated"
  std::optional<Clock::duration> retry_after;
  bool operator==(const Result&) const = default;
};

std::string show(const Result& r) {
  std::ostringstream s;
  s << (r.ran ? "ran " : "not run ") << r.kind;
  if (r.retry_after) s << " retry_after=" << r.retry_after->count() << "ns";
  return s.str();
}

/// Runs one call of kind `op` through `shield`.
Result execute(const Shield& shield, Op op) {
  Result r;
  std::stop_source stop;
  const Outcome<int> o = shield.execute_outcome(
      [&](Context& ctx) -> int {
        r.ran = true;
        if (op == Op::fail) throw Boom();
        if (op == Op::cancel) {
          stop.request_stop();
          if (ctx.cancelled()) throw Error(boost::asio::error::operation_aborted);
        }
        return 1;
      },
      stop.get_token());
  if (o.has_value()) {
    r.kind = "value";
  } else if (o.has_exception()) {
    try {
      std::rethrow_exception(o.exception());
    } catch (const Boom&) {
      r.kind = "boom";
    } catch (const Error& e) {
      r.kind = e.error() == boost::asio::error::operation_aborted ? "cancelled" : "error";
    } catch (...) {
      r.kind = "unexpected exception";
    }
  } else if (o.error() == make_error_code(errc::circuit_open)) {
    r.kind = "circuit_open";
  } else if (o.error() == make_error_code(errc::isolated)) {
    r.kind = "isolated";
  } else {
    r.kind = o.error().message();
  }
  r.retry_after = o.retry_after();
  return r;
}

/// The reference: Kevlar's breaker, written as plainly as possible. Calls are sequential, so a
/// half-open probe is never in flight between two steps.
class Reference {
 public:
  Reference(std::optional<int> consecutive, std::optional<double> ratio, int min,
            Clock::duration window, Clock::duration brk)
      : consecutive_limit_(consecutive), ratio_(ratio), min_(min), window_(window), break_(brk) {}

  Result call(Op op, Clock::time_point now) {
    Result r;
    bool probe = false;
    switch (state) {
      case S::isolated:
        r.kind = "isolated";
        return r;
      case S::open:
        if (now < open_until_) {
          r.kind = "circuit_open";
          r.retry_after = open_until_ - now;
          return r;
        }
        state = S::half_open;
        probe = true;
        break;
      case S::half_open:
        probe = true;
        break;
      case S::closed:
        break;
    }
    r.ran = true;
    if (op == Op::cancel) {
      r.kind = "cancelled";  // counts as nothing; a probe frees its slot
      return r;
    }
    const bool failed = op == Op::fail;
    r.kind = failed ? "boom" : "value";
    if (probe) {
      if (failed) {
        trip(now);
      } else {
        close();
      }
      return r;
    }
    if (consecutive_limit_) {
      consecutive_ = failed ? consecutive_ + 1 : 0;
      if (failed && consecutive_ >= *consecutive_limit_) trip(now);
    } else {
      events_.push_back({bucket(now), failed});
      if (failed) {
        std::uint64_t total = 0;
        std::uint64_t failures = 0;
        for (const auto& e : events_) {
          if (bucket(now) - e.bucket >= 10) continue;
          ++total;
          failures += e.failed ? 1 : 0;
        }
        if (total >= static_cast<std::uint64_t>(min_) &&
            static_cast<double>(failures) / static_cast<double>(total) >= *ratio_) {
          trip(now);
        }
      }
    }
    return r;
  }
  void isolate() { state = S::isolated; }
  void reset() { close(); }

  S state = S::closed;

 private:
  struct Event {
    std::int64_t bucket;
    bool failed;
  };
  [[nodiscard]] std::int64_t bucket(Clock::time_point t) const {
    return t.time_since_epoch().count() * 10 / window_.count();
  }
  void trip(Clock::time_point now) {
    state = S::open;
    open_until_ = now + break_;
  }
  void close() {
    state = S::closed;
    consecutive_ = 0;
    events_.clear();
  }

  std::optional<int> consecutive_limit_;
  std::optional<double> ratio_;
  int min_;
  Clock::duration window_;
  Clock::duration break_;
  int consecutive_ = 0;
  std::deque<Event> events_;
  Clock::time_point open_until_{};
};

void run_model(const CircuitBreakerOptions& options, unsigned seed, int steps,
               Clock::duration max_advance) {
  const auto clock = ManualClock::create();
  const auto breaker = CircuitBreaker::create(options);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  Reference ref(options.consecutive_failures, options.failure_ratio, options.minimum_throughput,
                options.sampling_window, options.break_duration);
  std::mt19937 rng(seed);
  std::string trace;
  for (int i = 0; i < steps; ++i) {
    const unsigned pick = rng() % 100;
    Op op = Op::succeed;
    if (pick < 30) {
      op = Op::succeed;
    } else if (pick < 62) {
      op = Op::fail;
    } else if (pick < 70) {
      op = Op::cancel;
    } else if (pick < 94) {
      op = Op::advance;
    } else if (pick < 97) {
      op = Op::isolate;
    } else {
      op = Op::reset;
    }
    switch (op) {
      case Op::advance: {
        const auto d =
            Clock::duration(static_cast<std::int64_t>(
                                rng() % static_cast<unsigned>(max_advance.count() / 1000000)) *
                            1000000);
        clock->advance(d);
        trace += " +" + std::to_string(d.count() / 1000000) + "ms";
        break;
      }
      case Op::isolate:
        breaker->isolate();
        ref.isolate();
        trace += " I";
        break;
      case Op::reset:
        breaker->reset();
        ref.reset();
        trace += " R";
        break;
      default: {
        const Result expected = ref.call(op, clock->now());
        const Result actual = execute(shield, op);
        trace += op == Op::succeed ? " S" : op == Op::fail ? " F" : " C";
        ASSERT_EQ(actual, expected) << "seed " << seed << " step " << i << ": got " << show(actual)
                                    << ", expected " << show(expected) << "\ntrace:" << trace;
      }
    }
    ASSERT_EQ(breaker->state(), ref.state)
        << "seed " << seed << " step " << i << "\ntrace:" << trace;
  }
}

TEST(CircuitBreakerModel, ConsecutiveModeMatchesTheReference) {
  CircuitBreakerOptions o;
  o.consecutive_failures = 2;
  o.break_duration = 3s;
  for (unsigned seed = 1; seed <= 40; ++seed) run_model(o, seed, 400, 2s);
}

TEST(CircuitBreakerModel, RatioModeMatchesTheReference) {
  CircuitBreakerOptions o;
  o.failure_ratio = 0.5;
  o.minimum_throughput = 4;
  o.sampling_window = 10s;
  o.break_duration = 2s;
  for (unsigned seed = 100; seed < 140; ++seed) run_model(o, seed, 400, 1500ms);
}

}  // namespace
}  // namespace kevlar
