// The concurrency limit's priorities, displacements and queue timeouts against a reference model,
// and the same under threads that race grants against expiries (ThreadSanitizer in CI).
#include "concurrency_limit/limiter_test_support.hpp"

#include <kevlar/concurrency_limit.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/model_runner.hpp>

#include <gtest/gtest.h>
#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

struct PriorityCommand {
  enum class Kind : unsigned char { start, complete, cancel, advance } kind = Kind::start;
  std::uint64_t pick = 0;     ///< complete, cancel: which running or queued call (modulo)
  std::int32_t priority = 0;  ///< start: the call's priority
  int millis = 0;             ///< advance: how far the clock moves
};

std::ostream& operator<<(std::ostream& os, const PriorityCommand& c) {
  switch (c.kind) {
    case PriorityCommand::Kind::start:
      return os << "start at priority " << c.priority;
    case PriorityCommand::Kind::complete:
      return os << "complete #" << c.pick;
    case PriorityCommand::Kind::cancel:
      return os << "cancel queued #" << c.pick;
    case PriorityCommand::Kind::advance:
      return os << "advance " << c.millis << "ms";
  }
  return os;
}

/// A queued call in the model: served by priority, then by arrival.
struct ModelWaiter {
  int id;
  std::int32_t priority;
  Clock::time_point deadline;
};

struct PriorityCoverage {
  int admitted = 0, queued = 0, rejected = 0, displaced = 0, handoffs = 0, timed_out = 0,
      cancelled = 0, overtook = 0;
};

/// Model test: limit 2, queue 3, queue timeout fixed(10ms), priorities 0-2 from CallOptions.
/// Starts, completions, cancellations of queued calls and clock advances in random order; after
/// every step the limiter agrees with the model: the running and queued counts, which calls run
/// (a handoff goes to the first of the highest priority), which calls were rejected, displaced
/// (the newest of the lowest priority, for a higher newcomer) or timed out, each with its error.
TEST(ConcurrencyLimitPriorityModel, MatchesTheModelForTheSeedCorpus) {
  PriorityCoverage coverage;
  const testing::ModelRunner<PriorityCommand> runner(
      "concurrency limit (2, 3) with priorities and a 10ms queue timeout vs its model",
      [](testing::ModelRandom& r) {
        switch (r.below(5)) {
          case 0:
          case 1:
            return PriorityCommand{PriorityCommand::Kind::start, 0,
                                   static_cast<std::int32_t>(r.below(3)), 0};
          case 2:
            return PriorityCommand{PriorityCommand::Kind::complete, r.next(), 0, 0};
          case 3:
            return PriorityCommand{PriorityCommand::Kind::cancel, r.next(), 0, 0};
          default:
            return PriorityCommand{PriorityCommand::Kind::advance, 0, 0,
                                   static_cast<int>(r.below(7))};
        }
      },
      [&](const std::vector<PriorityCommand>& commands) {
        coverage = {};
        std::map<int, std::unique_ptr<asio::cancellation_signal>> signals;
        auto clock = ManualClock::create();
        asio::io_context ioc;
        auto work = asio::make_work_guard(ioc);
        std::map<int, error_code> done;
        test::ManualOps ops;
        ConcurrencyLimitOptions o;
        o.max_concurrency = 2;
        o.max_queue = 3;
        o.queue_timeout = QueueTimeout::fixed(10ms);
        auto limiter = ConcurrencyLimitStrategy::create(o);
        const Shield s = Shield{}.with_clock(clock).use(limiter);
        std::vector<int> running;
        std::vector<ModelWaiter> queued;     // served front first
        std::map<int, error_code> expected;  // calls the model says fail, and how
        int next = 0;
        const auto run_ready = [&] {
          while (ioc.poll() > 0) {
          }
        };
        const auto grant_front = [&] {
          running.push_back(queued.front().id);
          queued.erase(queued.begin());
          ++coverage.handoffs;
        };
        for (std::size_t step = 0; step < commands.size(); ++step) {
          const PriorityCommand& c = commands[step];
          const auto at = [&] {
            std::ostringstream os;
            os << "step " << step << " (" << c << ")";
            return os.str();
          };
          if (c.kind == PriorityCommand::Kind::start) {
            const int id = next++;
            auto& sig = signals[id] = std::make_unique<asio::cancellation_signal>();
            s.execute_async(
                CallOptions{c.priority}, ops.attempt(id),
                asio::bind_cancellation_slot(
                    sig->slot(),
                    asio::bind_executor(ioc, [&done, id](error_code ec, int) { done[id] = ec; })));
            const ModelWaiter w{id, c.priority, clock->now() + 10ms};
            // The first queued call of a lower priority is where the newcomer goes.
            const auto place =
                std::find_if(queued.begin(), queued.end(),
                             [&](const ModelWaiter& q) { return q.priority < c.priority; });
            if (running.size() < 2 && queued.empty()) {
              running.push_back(id);
              ++coverage.admitted;
            } else if (queued.size() < 3) {
              coverage.overtook += place != queued.end();
              queued.insert(place, w);
              ++coverage.queued;
            } else if (queued.back().priority < c.priority) {
              expected[queued.back().id] = make_error_code(errc::concurrency_limit_exceeded);
              queued.pop_back();
              queued.insert(
                  std::find_if(queued.begin(), queued.end(),
                               [&](const ModelWaiter& q) { return q.priority < c.priority; }),
                  w);
              ++coverage.displaced;
            } else {
              expected[id] = make_error_code(errc::concurrency_limit_exceeded);
              ++coverage.rejected;
            }
          } else if (c.kind == PriorityCommand::Kind::complete && !running.empty()) {
            const std::size_t k = static_cast<std::size_t>(c.pick % running.size());
            ops.complete(running[k]);
            running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
            if (!queued.empty()) grant_front();
          } else if (c.kind == PriorityCommand::Kind::cancel && !queued.empty()) {
            const std::size_t k = static_cast<std::size_t>(c.pick % queued.size());
            const int id = queued[k].id;
            queued.erase(queued.begin() + static_cast<std::ptrdiff_t>(k));
            signals[id]->emit(asio::cancellation_type::terminal);
            expected[id] = asio::error::operation_aborted;
            ++coverage.cancelled;
          } else if (c.kind == PriorityCommand::Kind::advance) {
            clock->advance(std::chrono::milliseconds(c.millis));
            const Clock::time_point now = clock->now();
            for (auto it = queued.begin(); it != queued.end();) {
              if (it->deadline <= now) {
                expected[it->id] = make_error_code(errc::queue_timeout);
                it = queued.erase(it);
                ++coverage.timed_out;
              } else {
                ++it;
              }
            }
          }
          run_ready();
          const auto st = limiter->state();
          if (st.running != running.size() || st.queued != queued.size()) {
            testing::model_check(false, at() + ": the limiter has " + std::to_string(st.running) +
                                            " running and " + std::to_string(st.queued) +
                                            " queued, the model " + std::to_string(running.size()) +
                                            " and " + std::to_string(queued.size()));
          }
          for (int id : running) {
            if (!ops.pending(id)) {
              testing::model_check(false, at() + ": call " + std::to_string(id) +
                                              " should run but its operation is not pending");
            }
          }
          for (const auto& [id, want] : expected) {
            const auto it = done.find(id);
            if (it == done.end()) {
              testing::model_check(
                  false, at() + ": call " + std::to_string(id) + " should have completed");
              continue;
            }
            if (it->second != want) {
              testing::model_check(false, at() + ": call " + std::to_string(id) + " ended with " +
                                              it->second.message() + ", the model says " +
                                              want.message());
            }
          }
        }
        // Quiescence: finish everything; full capacity comes back and nothing else failed.
        while (!running.empty()) {
          ops.complete(running.front());
          running.erase(running.begin());
          if (!queued.empty()) grant_front();
          run_ready();
        }
        const auto st = limiter->state();
        testing::model_check(st.running == 0 && st.queued == 0 && st.available == 2,
                             "at quiescence: " + std::to_string(st.running) + " running, " +
                                 std::to_string(st.queued) + " queued");
        testing::model_check(ops.peak() <= 2, "peak " + std::to_string(ops.peak()) + " running");
        testing::model_check(
            done.size() == static_cast<std::size_t>(next),
            std::to_string(done.size()) + " of " + std::to_string(next) + " calls completed");
        for (const auto& [id, ec] : done) {
          if (expected.count(id) == 0 && ec) {
            testing::model_check(false, "call " + std::to_string(id) + " failed with " +
                                            ec.message() + " but the model ran it");
          }
        }
      },
      400);
  for (const std::uint64_t seed : testing::model_seeds()) {
    runner.run_seed(seed);
    if (std::find(testing::model_seed_corpus.begin(), testing::model_seed_corpus.end(), seed) ==
        testing::model_seed_corpus.end()) {
      continue;
    }
    EXPECT_GT(coverage.admitted, 10) << seed;
    EXPECT_GT(coverage.queued, 10) << seed;
    EXPECT_GT(coverage.overtook, 3) << seed;
    EXPECT_GT(coverage.displaced, 0) << seed;
    EXPECT_GT(coverage.handoffs, 10) << seed;
    EXPECT_GT(coverage.timed_out, 1) << seed;
    EXPECT_GT(coverage.cancelled, 3) << seed;
  }
}

/// Two threads, strands, random priorities, a small queue (displacements), random cancellations and
/// a queue timeout of a few hundred microseconds on the steady clock, so that expiries race grants
/// and displacements: never more than `limit` running, every call completes exactly once with one
/// of the limiter's outcomes, and full capacity comes back (run under ThreadSanitizer in CI).
TEST(ConcurrencyLimitPriorityStress, GrantsRacingExpiriesAndDisplacementsConservePermits) {
  constexpr int calls = 400;
  asio::io_context ioc(2);
  ConcurrencyLimitOptions o;
  o.max_concurrency = 2;
  o.max_queue = 3;
  o.queue_timeout = QueueTimeout::fixed(300us);
  auto limiter = ConcurrencyLimitStrategy::create(o);
  const Shield s = Shield{}.use(limiter);
  std::atomic<int> in_flight{0}, peak{0}, completed{0}, unexpected{0};
  std::atomic<int> succeeded{0}, rejected{0}, timed_out{0}, aborted{0};
  std::vector<std::thread> threads;
  auto guard = asio::make_work_guard(ioc);
  for (int t = 0; t < 2; ++t) threads.emplace_back([&] { ioc.run(); });
  std::mt19937 rng(11);
  for (int i = 0; i < calls; ++i) {
    auto strand = asio::make_strand(ioc);
    const bool cancel = rng() % 5 == 0;
    const std::int32_t priority = static_cast<std::int32_t>(rng() % 4);
    asio::post(strand, [&, strand, cancel, priority] {
      auto signal = std::make_shared<asio::cancellation_signal>();
      s.execute_async(
          CallOptions{priority},
          [&, strand](auto token) {
            const int now = ++in_flight;
            int p = peak.load();
            while (now > p && !peak.compare_exchange_weak(p, now)) {
            }
            return asio::async_initiate<decltype(token), void(error_code, int)>(
                [&, strand](auto handler) {
                  --in_flight;
                  asio::post(strand, asio::append(std::move(handler), error_code(), 1));
                },
                token);
          },
          asio::bind_cancellation_slot(signal->slot(),
                                       asio::bind_executor(strand, [&, signal](error_code ec, int) {
                                         if (!ec) {
                                           ++succeeded;
                                         } else if (ec == errc::concurrency_limit_exceeded) {
                                           ++rejected;
                                         } else if (ec == errc::queue_timeout) {
                                           ++timed_out;
                                         } else if (ec == asio::error::operation_aborted) {
                                           ++aborted;
                                         } else {
                                           ++unexpected;
                                         }
                                         ++completed;
                                       })));
      if (cancel) asio::post(strand, [signal] { signal->emit(asio::cancellation_type::terminal); });
    });
  }
  while (completed.load() < calls) std::this_thread::yield();
  guard.reset();
  for (auto& t : threads) t.join();
  EXPECT_EQ(completed.load(), calls);
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(succeeded + rejected + timed_out + aborted, calls);
  EXPECT_GT(succeeded.load(), 0);
  EXPECT_LE(peak.load(), 2);
  test::expect_at_rest(*limiter, 2U);
}

}  // namespace
}  // namespace kevlar
