#include <kevlar/testing/model_runner.hpp>
#include <kevlar/testing/race_runner.hpp>

#include <cstdlib>
#include <exception>
#include <ostream>
#include <stdexcept>
#include <string>

namespace kevlar::testing {

namespace {

std::string hex(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string r;
  do {
    r.insert(r.begin(), digits[v & 0xF]);
    v >>= 4;
  } while (v != 0);
  return "0x" + r;
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

// ---- model runner
// --------------------------------------------------------------------------------

std::vector<std::uint64_t> model_sweep_seeds(std::size_t count) {
  std::vector<std::uint64_t> r;
  r.reserve(count);
  std::uint64_t x = 0x4B45564CULL;
  for (std::size_t i = 0; i < count; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    r.push_back(x);
  }
  return r;
}

std::vector<std::uint64_t> model_seeds() {
  std::vector<std::uint64_t> seeds(model_seed_corpus.begin(), model_seed_corpus.end());
  const char* value = std::getenv(model_sweep_variable);  // NOLINT(concurrency-mt-unsafe)
  if (value == nullptr || *value == '\0') return seeds;
  const std::string text(value);
  std::size_t count = 0;
  for (const char c : text) {
    if (c < '0' || c > '9' || count > 100000) {
      throw std::invalid_argument(std::string("kevlar::testing::model_seeds: ") +
                                  model_sweep_variable + "='" + text +
                                  "' is not a count of seeds (0 .. 100000)");
    }
    count = count * 10 + static_cast<std::size_t>(c - '0');
  }
  if (count > 100000) {
    throw std::invalid_argument(std::string("kevlar::testing::model_seeds: ") +
                                model_sweep_variable + "='" + text +
                                "' is not a count of seeds (0 .. 100000)");
  }
  const std::vector<std::uint64_t> extra = model_sweep_seeds(count);
  seeds.insert(seeds.end(), extra.begin(), extra.end());
  return seeds;
}

namespace detail {

std::string model_failure_message(std::string_view name, std::uint64_t seed,
                                  std::size_t original_size, const std::string& original_failure,
                                  const std::vector<std::string>& minimal,
                                  const std::string& minimal_failure, std::size_t replays) {
  std::string r = "model \"" + std::string(name) + "\" failed for seed " + std::to_string(seed) +
                  " (" + hex(seed) + ") with " + std::to_string(original_size) +
                  " commands: " + original_failure + "\n  minimised to " +
                  std::to_string(minimal.size()) + " of " + std::to_string(original_size) +
                  " commands (" + std::to_string(replays) + " replays): [";
  for (std::size_t i = 0; i < minimal.size(); ++i) {
    if (i != 0) r += ", ";
    r += minimal[i];
  }
  return r + "]\n  failure of the minimised list: " + minimal_failure;
}

}  // namespace detail

// ---- race runner
// ---------------------------------------------------------------------------------

const char* to_string(RaceOrder order) noexcept {
  return order == RaceOrder::a_then_b ? "a then b" : "b then a";
}

std::ostream& operator<<(std::ostream& os, RaceOrder order) {
  return os << to_string(order);
}

RaceOrder first_order(std::uint64_t seed) noexcept {
  return (ModelRandom(seed).next() & 1U) != 0 ? RaceOrder::b_then_a : RaceOrder::a_then_b;
}

RaceReport run_race(std::string_view name, std::size_t repetitions,
                    const std::function<RaceParties(const RaceRound&)>& setup) {
  RaceReport report;
  for (std::size_t rep = 0; rep < repetitions; ++rep) {
    const std::uint64_t seed = race_seed(rep);
    const RaceOrder first = first_order(seed);
    const RaceOrder second =
        first == RaceOrder::a_then_b ? RaceOrder::b_then_a : RaceOrder::a_then_b;
    for (const RaceOrder order : {first, second}) {
      const RaceRound round{rep, seed, order};
      std::exception_ptr failure;
      RaceParties parties;
      try {
        parties = setup(round);
      } catch (...) {
        failure = std::current_exception();
      }
      if (!failure && (!parties.a || !parties.b)) {
        throw std::invalid_argument("kevlar::testing::run_race: setup returned an empty party");
      }
      if (!failure) {
        try {
          if (order == RaceOrder::a_then_b) {
            parties.a();
            parties.b();
          } else {
            parties.b();
            parties.a();
          }
          if (parties.check) parties.check();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      if (failure) {
        throw RaceFailure("race \"" + std::string(name) + "\" failed at repetition " +
                              std::to_string(rep) + " (seed " + hex(seed) + ", order " +
                              to_string(order) + "): " + what_of(failure),
                          round);
      }
      ++report.runs;
      ++(order == RaceOrder::a_then_b ? report.a_first_runs : report.b_first_runs);
    }
  }
  return report;
}

}  // namespace kevlar::testing
