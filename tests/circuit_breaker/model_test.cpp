// Model tests on the model runner (kevlar::testing::ModelRunner): random command lists (calls that
// succeed, fail or are cancelled, clock moves, isolate and reset), generated from the runner's seed
// corpus, run side by side through a Shield over a CircuitBreaker, through a bare
// CircuitBreakerCore driven with explicit times, and through a small reference state machine.
// Every step must agree on whether the call ran, what it returned (with its retry-after) and the
// breaker's state. A failure names the seed and the deletion-minimised command list.
#include "breaker_test_support.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/model_runner.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using S = CircuitState;

using test::Boom;

/// One step of the breaker's model test.
struct BreakerCommand {
  enum class Kind : unsigned char { succeed, fail, cancel, advance, isolate, reset };
  Kind kind = Kind::succeed;
  std::int64_t ms = 0;  ///< advance: milliseconds
};

std::ostream& operator<<(std::ostream& os, const BreakerCommand& c) {
  switch (c.kind) {
    case BreakerCommand::Kind::succeed:
      return os << "succeed";
    case BreakerCommand::Kind::fail:
      return os << "fail";
    case BreakerCommand::Kind::cancel:
      return os << "cancel";
    case BreakerCommand::Kind::advance:
      return os << "advance " << c.ms << "ms";
    case BreakerCommand::Kind::isolate:
      return os << "isolate";
    case BreakerCommand::Kind::reset:
      return os << "reset";
  }
  return os;
}

using Op = BreakerCommand::Kind;

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

/// Runs one call of kind `op` through a bare core at `now`: admit, then record the outcome (or
/// release a cancelled call), as the strategy does.
Result execute(CircuitBreakerCore& core, Op op, Clock::time_point now) {
  Result r;
  const CircuitBreakerCore::Admission a = core.admit(now);
  if (!a.admitted()) {
    r.kind = a.state == S::isolated ? "isolated"
             : a.state == S::open   ? "circuit_open"
                                    : "rejected while " + std::string(to_string(a.state));
    r.retry_after = a.retry_after;
    return r;
  }
  r.ran = true;
  if (op == Op::fail) {
    core.record_failure(now, a);
    r.kind = "boom";
  } else if (op == Op::cancel) {
    core.release(a);
    r.kind = "cancelled";
  } else {
    core.record_success(now, a);
    r.kind = "value";
  }
  return r;
}

/// What a model run exercised.
struct Coverage {
  int values = 0, booms = 0, cancelled = 0, rejected_open = 0, rejected_isolated = 0;
  int trips = 0;           ///< closed -> open
  int probe_closes = 0;    ///< a probe succeeded: half-open -> closed
  int probe_reopens = 0;   ///< a probe failed: half-open -> open
  int probe_releases = 0;  ///< a probe was cancelled: its slot freed
  int isolations = 0, resets = 0;
};

/// The reference: Kevlar's breaker, written as plainly as possible. Calls are sequential, so a
/// half-open probe is never in flight between two steps.
class Reference {
 public:
  Reference(std::optional<int> consecutive, std::optional<double> ratio, int min,
            Clock::duration window, Clock::duration brk, Coverage& coverage)
      : consecutive_limit_(consecutive),
        ratio_(ratio),
        min_(min),
        window_(window),
        break_(brk),
        coverage_(coverage) {}

  Result call(Op op, Clock::time_point now) {
    Result r;
    bool probe = false;
    switch (state) {
      case S::isolated:
        r.kind = "isolated";
        ++coverage_.rejected_isolated;
        return r;
      case S::open:
        if (now < open_until_) {
          r.kind = "circuit_open";
          r.retry_after = open_until_ - now;
          ++coverage_.rejected_open;
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
      ++coverage_.cancelled;
      if (probe) ++coverage_.probe_releases;
      return r;
    }
    const bool failed = op == Op::fail;
    r.kind = failed ? "boom" : "value";
    ++(failed ? coverage_.booms : coverage_.values);
    if (probe) {
      if (failed) {
        trip(now);
        ++coverage_.probe_reopens;
      } else {
        close();
        ++coverage_.probe_closes;
      }
      return r;
    }
    if (consecutive_limit_) {
      consecutive_ = failed ? consecutive_ + 1 : 0;
      if (failed && consecutive_ >= *consecutive_limit_) {
        trip(now);
        ++coverage_.trips;
      }
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
          ++coverage_.trips;
        }
      }
    }
    return r;
  }
  void isolate() {
    state = S::isolated;
    ++coverage_.isolations;
  }
  void reset() {
    close();
    ++coverage_.resets;
  }

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
  Coverage& coverage_;
  int consecutive_ = 0;
  std::deque<Event> events_;
  Clock::time_point open_until_{};
};

/// Before the model runner each mode ran 40 std::mt19937 seeds of 400 steps: each corpus seed now
/// runs 3200 commands, the same 16000 steps per mode.
constexpr std::size_t commands_per_seed = 3200;

/// A runner checking a breaker built with `options` against a reference built with
/// `reference_options` (the same, except in the test that breaks the reference on purpose).
testing::ModelRunner<BreakerCommand> breaker_runner(const CircuitBreakerOptions& options,
                                                    const CircuitBreakerOptions& reference_options,
                                                    Clock::duration max_advance, Coverage& coverage,
                                                    std::size_t commands = commands_per_seed) {
  const auto max_ms = std::chrono::duration_cast<std::chrono::milliseconds>(max_advance).count();
  return testing::ModelRunner<BreakerCommand>(
      "circuit breaker vs reference",
      [max_ms](testing::ModelRandom& r) {
        // The distribution of the mt19937 version: 30% successes, 32% failures, 8% cancellations,
        // 24% clock moves in [0, max_advance), 3% isolate, 3% reset.
        const std::uint64_t pick = r.below(100);
        if (pick < 30) return BreakerCommand{Op::succeed, 0};
        if (pick < 62) return BreakerCommand{Op::fail, 0};
        if (pick < 70) return BreakerCommand{Op::cancel, 0};
        if (pick < 94) {
          return BreakerCommand{
              Op::advance, static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(max_ms)))};
        }
        if (pick < 97) return BreakerCommand{Op::isolate, 0};
        return BreakerCommand{Op::reset, 0};
      },
      [options, reference_options, &coverage](const std::vector<BreakerCommand>& cmds) {
        coverage = {};
        const auto clock = ManualClock::create();
        const auto breaker = CircuitBreaker::create(options);
        const Shield shield = Shield{}.use(breaker).with_clock(clock);
        CircuitBreakerCore core(options);  // the same decisions, driven with explicit times
        Reference ref(reference_options.consecutive_failures, reference_options.failure_ratio,
                      reference_options.minimum_throughput, reference_options.sampling_window,
                      reference_options.break_duration, coverage);
        for (std::size_t step = 0; step < cmds.size(); ++step) {
          const BreakerCommand& c = cmds[step];
          // Messages are built only on a disagreement: the minimisation replays many lists.
          const auto at = [&] {
            std::ostringstream s;
            s << "step " << step << " (" << c << ")";
            return s.str();
          };
          switch (c.kind) {
            case Op::advance:
              clock->advance(std::chrono::milliseconds(c.ms));
              break;
            case Op::isolate:
              breaker->isolate();
              core.isolate();
              ref.isolate();
              break;
            case Op::reset:
              breaker->reset();
              core.reset();
              ref.reset();
              break;
            default: {
              const Clock::time_point now = clock->now();
              const Result expected = ref.call(c.kind, now);
              const Result actual = execute(shield, c.kind);
              if (actual != expected) {
                testing::model_check(false, at() + ": the shield's call " + show(actual) +
                                                ", the reference's " + show(expected));
              }
              const Result bare = execute(core, c.kind, now);
              if (bare != expected) {
                testing::model_check(false, at() + ": the core's call " + show(bare) +
                                                ", the reference's " + show(expected));
              }
            }
          }
          if (breaker->state() != ref.state) {
            testing::model_check(false, at() + ": the breaker is " + to_string(breaker->state()) +
                                            ", the reference " + to_string(ref.state));
          }
          if (core.state() != ref.state) {
            testing::model_check(false, at() + ": the core is " + to_string(core.state()) +
                                            ", the reference " + to_string(ref.state));
          }
        }
      },
      commands);
}

bool in_corpus(std::uint64_t seed) {
  return std::find(testing::model_seed_corpus.begin(), testing::model_seed_corpus.end(), seed) !=
         testing::model_seed_corpus.end();
}

/// Runs every seed of testing::model_seeds(); for the fixed corpus (not the sweep seeds of
/// KEVLAR_MODEL_SWEEP_SEEDS) it also checks that the run exercised every path.
void run_model(const CircuitBreakerOptions& options, Clock::duration max_advance) {
  Coverage coverage;
  const auto runner = breaker_runner(options, options, max_advance, coverage);
  int probe_releases = 0;  // rare (a cancellation right after a break): counted over the corpus
  for (const std::uint64_t seed : testing::model_seeds()) {
    runner.run_seed(seed);
    if (!in_corpus(seed)) continue;
    EXPECT_GT(coverage.values, 100) << seed;
    EXPECT_GT(coverage.booms, 100) << seed;
    EXPECT_GT(coverage.cancelled, 20) << seed;
    EXPECT_GT(coverage.rejected_open, 100) << seed;
    EXPECT_GT(coverage.rejected_isolated, 100) << seed;
    EXPECT_GT(coverage.trips, 20) << seed;
    EXPECT_GT(coverage.probe_closes, 5) << seed;
    EXPECT_GT(coverage.probe_reopens, 5) << seed;
    EXPECT_GT(coverage.isolations, 20) << seed;
    EXPECT_GT(coverage.resets, 20) << seed;
    probe_releases += coverage.probe_releases;
  }
  EXPECT_GE(probe_releases, 5) << "cancelled probes over the seed corpus";
}

CircuitBreakerOptions consecutive_options() {
  CircuitBreakerOptions o;
  o.consecutive_failures = 2;
  o.break_duration = 3s;
  return o;
}

CircuitBreakerOptions ratio_options() {
  CircuitBreakerOptions o;
  o.failure_ratio = 0.5;
  o.minimum_throughput = 4;
  o.sampling_window = 10s;
  o.break_duration = 2s;
  return o;
}

TEST(CircuitBreakerModel, ConsecutiveModeMatchesTheReference) {
  run_model(consecutive_options(), 2s);
}

TEST(CircuitBreakerModel, RatioModeMatchesTheReference) {
  run_model(ratio_options(), 1500ms);
}

// The report of a disagreement: a reference that trips one failure later than the breaker fails
// at the second failure in a row, and the runner names the seed and minimises the list to the two
// failures that show it.
TEST(CircuitBreakerModel, ADisagreementNamesTheSeedAndTheMinimisedCommands) {
  CircuitBreakerOptions wrong = consecutive_options();
  wrong.consecutive_failures = 3;
  Coverage coverage;
  const auto runner = breaker_runner(consecutive_options(), wrong, 2s, coverage, 200);
  try {
    runner.run_seed(17);
    FAIL() << "the broken reference was not caught";
  } catch (const testing::ModelFailure& f) {
    EXPECT_EQ(f.seed(), 17u);
    EXPECT_EQ(f.original_size(), 200u);
    EXPECT_EQ(f.minimal_commands(), (std::vector<std::string>{"fail", "fail"})) << f.what();
    const std::string what = f.what();
    EXPECT_NE(what.find("seed 17"), std::string::npos) << what;
    EXPECT_NE(what.find("[fail, fail]"), std::string::npos) << what;
    EXPECT_NE(what.find("the breaker is open, the reference closed"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace kevlar
