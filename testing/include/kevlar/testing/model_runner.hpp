// kevlar — testing kit: run a command model from a fixed seed corpus, and minimise what fails.
#pragma once

#include <kevlar/testing/assertion.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kevlar::testing {

/// A small deterministic random source for generating commands (SplitMix64): the same seed gives
/// the same sequence on every platform and standard library (unlike std's distributions).
///
/// Thread-safety: one instance per thread.
class ModelRandom {
 public:
  explicit ModelRandom(std::uint64_t seed) noexcept : state_(seed) {}
  /// The next 64 random bits.
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// A value in [0, n) (0 when n is 0).
  std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }
  /// A value in [lo, hi] (lo when hi < lo).
  std::int64_t between(std::int64_t lo, std::int64_t hi) noexcept {
    if (hi <= lo) return lo;
    return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
  }
  /// True with probability `percent` / 100.
  bool chance(unsigned percent) noexcept { return below(100) < percent; }

 private:
  std::uint64_t state_;
};

/// The seeds every model runs: 0, 1, 17, 0x4B45564C and 2147483647 (Kevlar's corpus).
inline constexpr std::array<std::uint64_t, 5> model_seed_corpus{0, 1, 17, 0x4B45564C, 2147483647};
/// The environment variable that adds sweep seeds: a count (decimal, at most 100000).
inline constexpr const char* model_sweep_variable = "KEVLAR_MODEL_SWEEP_SEEDS";

/// `count` extra seeds, derived from 0x4B45564C by the LCG
/// `x' = x * 6364136223846793005 + 1442695040888963407` (the first is the first step's value).
[[nodiscard]] std::vector<std::uint64_t> model_sweep_seeds(std::size_t count);
/// The corpus, followed by model_sweep_seeds(KEVLAR_MODEL_SWEEP_SEEDS) when that variable is set.
/// Throws std::invalid_argument, naming the variable, for a value that is not a count.
[[nodiscard]] std::vector<std::uint64_t> model_seeds();

/// A model run failed: thrown by ModelRunner with the seed, the minimised command list and both
/// failures in its message.
class ModelFailure : public ShieldAssertionError {
 public:
  ModelFailure(const std::string& message, std::uint64_t seed,
               std::vector<std::string> minimal_commands, std::size_t original_size)
      : ShieldAssertionError(message),
        seed_(seed),
        minimal_(std::move(minimal_commands)),
        original_size_(original_size) {}
  /// The seed whose command list failed.
  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  /// The minimised failing command list, printed.
  [[nodiscard]] const std::vector<std::string>& minimal_commands() const noexcept {
    return minimal_;
  }
  /// The length of the command list the seed generated.
  [[nodiscard]] std::size_t original_size() const noexcept { return original_size_; }

 private:
  std::uint64_t seed_;
  std::vector<std::string> minimal_;
  std::size_t original_size_;
};

/// What a ModelRunner ran.
struct ModelReport {
  std::size_t seeds = 0;     ///< seeds run
  std::size_t commands = 0;  ///< commands executed, over every seed
};

namespace detail {
/// The message of a ModelFailure.
[[nodiscard]] std::string model_failure_message(std::string_view name, std::uint64_t seed,
                                                std::size_t original_size,
                                                const std::string& original_failure,
                                                const std::vector<std::string>& minimal,
                                                const std::string& minimal_failure,
                                                std::size_t replays);
}  // namespace detail

/// Runs a command model: for each seed, generates a list of commands, then executes the list
/// against the system under test and a model of it, side by side; `execute` throws (any
/// exception) when they disagree. On a failure it minimises the list by deletion (delta
/// debugging: removes chunks of commands, then single commands, as long as the shorter list
/// still fails) and throws ModelFailure with the seed, the minimal list and its failure:
///
/// ```
/// kevlar::testing::ModelRunner<Cmd> runner(
///     "breaker vs reference",
///     [](kevlar::testing::ModelRandom& r) { return Cmd{r.below(4)}; },
///     [](const std::vector<Cmd>& cmds) {       // a fresh system and model per run
///       System s; Model m;
///       for (const Cmd& c : cmds) if (s.apply(c) != m.apply(c)) throw std::runtime_error("...");
///     });
/// runner.run();   // every seed of model_seeds()
/// ```
///
/// `execute` must build a fresh system and model on every call (the minimisation replays
/// sublists), tolerate any sublist (a command that does not apply in the current state does
/// nothing), and report disagreement by throwing, not through GoogleTest assertions, which would
/// record a failure for every replay. Commands are printed with `operator<<` when Command has one,
/// or by the printer given to with_printer.
///
/// Thread-safety: a runner is used from one thread; run() calls `generate` and `execute` on it.
template <class Command>
class ModelRunner {
 public:
  using Generate = std::function<Command(ModelRandom&)>;
  using Execute = std::function<void(const std::vector<Command>&)>;
  using Print = std::function<std::string(const Command&)>;

  /// `name` names the model in failure messages; each seed generates `commands_per_seed`
  /// commands.
  ModelRunner(std::string name, Generate generate, Execute execute,
              std::size_t commands_per_seed = 50)
      : name_(std::move(name)),
        generate_(std::move(generate)),
        execute_(std::move(execute)),
        commands_per_seed_(commands_per_seed) {}

  /// Prints commands with `print` in failure messages.
  ModelRunner& with_printer(Print print) {
    print_ = std::move(print);
    return *this;
  }
  /// Bounds the replays the minimisation makes (default 5000): past it, the list found so far is
  /// reported.
  ModelRunner& with_max_replays(std::size_t n) {
    max_replays_ = n;
    return *this;
  }

  /// The commands `seed` generates.
  [[nodiscard]] std::vector<Command> generate(std::uint64_t seed) const {
    ModelRandom random(seed);
    std::vector<Command> commands;
    commands.reserve(commands_per_seed_);
    for (std::size_t i = 0; i < commands_per_seed_; ++i) commands.push_back(generate_(random));
    return commands;
  }

  /// Runs one seed; throws ModelFailure (minimised) if it fails. Returns its commands.
  std::vector<Command> run_seed(std::uint64_t seed) const {
    std::vector<Command> commands = generate(seed);
    if (std::optional<std::string> failure = failure_of(commands)) {
      report(seed, commands, *failure);
    }
    return commands;
  }

  /// Runs every seed of model_seeds(), in order; throws ModelFailure for the first that fails.
  ModelReport run() const { return run(model_seeds()); }
  /// Runs `seeds`, in order; throws ModelFailure for the first that fails.
  ModelReport run(const std::vector<std::uint64_t>& seeds) const {
    ModelReport r;
    for (const std::uint64_t seed : seeds) {
      r.commands += run_seed(seed).size();
      ++r.seeds;
    }
    return r;
  }

  /// Deletion-minimises a failing list: the result still fails and removing any single command
  /// from it makes it pass (unless the replay bound stopped the search). Returns the list and the
  /// number of replays made. A list that passes is returned as it is.
  std::pair<std::vector<Command>, std::size_t> minimise(std::vector<Command> commands) const {
    std::size_t replays = 0;
    if (!failure_of(commands)) return {std::move(commands), replays};
    std::size_t chunk = commands.size() / 2;
    if (chunk == 0) chunk = 1;
    while (!commands.empty() && replays < max_replays_) {
      bool removed = false;
      for (std::size_t start = 0; start < commands.size() && replays < max_replays_;) {
        const std::size_t end = std::min(commands.size(), start + chunk);
        std::vector<Command> candidate;
        candidate.reserve(commands.size() - (end - start));
        candidate.insert(candidate.end(), commands.begin(),
                         commands.begin() + static_cast<std::ptrdiff_t>(start));
        candidate.insert(candidate.end(), commands.begin() + static_cast<std::ptrdiff_t>(end),
                         commands.end());
        ++replays;
        if (failure_of(candidate)) {
          commands = std::move(candidate);  // same start: the next chunk moved here
          removed = true;
        } else {
          start = end;
        }
      }
      if (chunk > 1) {
        chunk /= 2;
      } else if (!removed) {
        break;  // no single command can go: 1-minimal
      }
    }
    return {std::move(commands), replays};
  }

  /// The failure `commands` produce (the exception's message), or nothing if they pass.
  [[nodiscard]] std::optional<std::string> failure_of(const std::vector<Command>& commands) const {
    try {
      execute_(commands);
    } catch (const std::exception& e) {
      return std::string(e.what());
    } catch (...) {
      return std::string("an exception that is not a std::exception");
    }
    return std::nullopt;
  }

  /// Prints `c` as failure messages do.
  [[nodiscard]] std::string print(const Command& c) const {
    if (print_) return print_(c);
    if constexpr (requires(std::ostream & os) { os << c; }) {
      std::ostringstream s;
      s << c;
      return s.str();
    } else {
      return "(command)";
    }
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  [[noreturn]] void report(std::uint64_t seed, const std::vector<Command>& commands,
                           const std::string& failure) const {
    auto [minimal, replays] = minimise(commands);
    std::string minimal_failure = failure_of(minimal).value_or("(passed when replayed)");
    std::vector<std::string> printed;
    printed.reserve(minimal.size());
    for (const Command& c : minimal) printed.push_back(print(c));
    const std::string message = detail::model_failure_message(name_, seed, commands.size(), failure,
                                                              printed, minimal_failure, replays);
    throw ModelFailure(message, seed, std::move(printed), commands.size());
  }

  std::string name_;
  Generate generate_;
  Execute execute_;
  Print print_;
  std::size_t commands_per_seed_;
  std::size_t max_replays_ = 5000;
};

/// Throws std::runtime_error(`what`) unless `condition`: how a model's `execute` reports that the
/// system and the model disagree.
inline void model_check(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error(what);
}

}  // namespace kevlar::testing
