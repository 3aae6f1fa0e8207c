// The model runner: the seed corpus and the sweep variable, deterministic generation, and a
// deliberately broken system whose failure is reported with its seed and minimised to the two
// commands that cause it.
#include <kevlar/testing/model_runner.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace kevlar::testing;

/// Restores KEVLAR_MODEL_SWEEP_SEEDS when the test ends.
class SweepVariable {
 public:
  SweepVariable() {
    if (const char* v = std::getenv(model_sweep_variable)) saved_ = v;
  }
  ~SweepVariable() {
    if (saved_) {
      ::setenv(model_sweep_variable, saved_->c_str(), 1);
    } else {
      ::unsetenv(model_sweep_variable);
    }
  }
  SweepVariable(const SweepVariable&) = delete;
  SweepVariable& operator=(const SweepVariable&) = delete;

 private:
  std::optional<std::string> saved_;
};

TEST(ModelRunner, SeedsAreTheCorpusPlusTheSweep) {
  const SweepVariable restore;
  ::unsetenv(model_sweep_variable);
  EXPECT_EQ(model_seeds(), (std::vector<std::uint64_t>{0, 1, 17, 0x4B45564C, 2147483647}));
  ::setenv(model_sweep_variable, "3", 1);
  const std::vector<std::uint64_t> seeds = model_seeds();
  ASSERT_EQ(seeds.size(), 8u);
  const std::vector<std::uint64_t> sweep = model_sweep_seeds(3);
  EXPECT_TRUE(std::equal(sweep.begin(), sweep.end(), seeds.begin() + 5));
  EXPECT_EQ(sweep[0], 0x4B45564CULL * 6364136223846793005ULL + 1442695040888963407ULL);
  EXPECT_EQ(std::set<std::uint64_t>(seeds.begin(), seeds.end()).size(), 8u) << "all distinct";
  ::setenv(model_sweep_variable, "many", 1);
  try {
    (void)model_seeds();
    ADD_FAILURE() << "not a count";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("KEVLAR_MODEL_SWEEP_SEEDS='many'"), std::string::npos)
        << e.what();
  }
  for (const char* too_many : {"100001", "99999999999"}) {
    ::setenv(model_sweep_variable, too_many, 1);
    EXPECT_THROW((void)model_seeds(), std::invalid_argument) << too_many;
  }
  ::setenv(model_sweep_variable, "100000", 1);
  EXPECT_EQ(model_seeds().size(), 100005u) << "the largest sweep accepted";
  ::setenv(model_sweep_variable, "", 1);
  EXPECT_EQ(model_seeds().size(), 5u) << "an empty variable is no sweep";
}

TEST(ModelRunner, GenerationIsAFunctionOfTheSeed) {
  const ModelRunner<std::uint64_t> runner(
      "numbers", [](ModelRandom& r) { return r.below(1000); },
      [](const std::vector<std::uint64_t>&) {}, 20);
  EXPECT_EQ(runner.generate(17), runner.generate(17));
  EXPECT_NE(runner.generate(17), runner.generate(1));
  ModelRandom r(5);
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t v = r.between(-3, 3);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 3);
  }
}

TEST(ModelRunner, APassingModelRunsEverySeed) {
  std::size_t executed = 0;
  const ModelRunner<int> runner(
      "sum", [](ModelRandom& r) { return static_cast<int>(r.below(10)); },
      [&](const std::vector<int>& commands) {
        long system = 0;
        long model = 0;
        for (const int c : commands) {
          system += c;
          model += c;
          model_check(system == model, "sum differs");
        }
        ++executed;
      });
  const ModelReport report =
      runner.run(std::vector<std::uint64_t>(model_seed_corpus.begin(), model_seed_corpus.end()));
  EXPECT_EQ(report.seeds, 5u);
  EXPECT_EQ(report.commands, 250u);
  EXPECT_EQ(executed, 5u) << "no replay when nothing fails";
}

/// A counter with a bug: once it has seen a 7, a later 3 counts twice. The model counts right.
void broken_counter(const std::vector<int>& commands) {
  long system = 0;
  long model = 0;
  bool seen_seven = false;
  for (const int c : commands) {
    system += (seen_seven && c == 3) ? 6 : c;
    model += c;
    seen_seven = seen_seven || c == 7;
    model_check(system == model,
                "system " + std::to_string(system) + " != model " + std::to_string(model));
  }
}

TEST(ModelRunner, AFailureIsReportedWithItsSeedAndMinimisedToTheCommandsThatCauseIt) {
  const ModelRunner<int> runner(
      "broken counter", [](ModelRandom& r) { return static_cast<int>(r.below(10)); },
      broken_counter);
  // The first seed of the corpus whose commands hold a 7 followed by a 3.
  std::optional<std::uint64_t> failing;
  for (const std::uint64_t seed : model_seed_corpus) {
    const std::vector<int> c = runner.generate(seed);
    const auto seven = std::find(c.begin(), c.end(), 7);
    if (seven != c.end() && std::find(seven, c.end(), 3) != c.end()) {
      failing = seed;
      break;
    }
  }
  ASSERT_TRUE(failing.has_value());
  try {
    (void)runner.run(
        std::vector<std::uint64_t>(model_seed_corpus.begin(), model_seed_corpus.end()));
    ADD_FAILURE() << "the broken counter passed";
  } catch (const ModelFailure& e) {
    EXPECT_EQ(e.seed(), *failing);
    EXPECT_EQ(e.original_size(), 50u);
    EXPECT_EQ(e.minimal_commands(), (std::vector<std::string>{"7", "3"}));
    const std::string m = e.what();
    EXPECT_NE(m.find("model \"broken counter\" failed for seed " + std::to_string(*failing)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("minimised to 2 of 50 commands"), std::string::npos) << m;
    EXPECT_NE(m.find("[7, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("failure of the minimised list: system 13 != model 10"), std::string::npos)
        << m;
  }
}

TEST(ModelRunner, MinimiseLeavesAOneMinimalList) {
  const ModelRunner<int> runner(
      "broken counter", [](ModelRandom&) { return 0; }, broken_counter);
  const auto [minimal, replays] = runner.minimise({1, 7, 2, 7, 5, 3, 3, 9});
  EXPECT_EQ(minimal, (std::vector<int>{7, 3}));
  EXPECT_GT(replays, 0u);
  EXPECT_EQ(runner.minimise({1, 2}).first, (std::vector<int>{1, 2})) << "a passing list stays";
  // A custom printer names the commands.
  ModelRunner<int> printed(
      "broken counter", [](ModelRandom& r) { return static_cast<int>(r.below(10)); },
      broken_counter);
  printed.with_printer([](const int& c) { return "add(" + std::to_string(c) + ")"; });
  try {
    (void)printed.run(
        std::vector<std::uint64_t>(model_seed_corpus.begin(), model_seed_corpus.end()));
    ADD_FAILURE() << "the broken counter passed";
  } catch (const ModelFailure& e) {
    EXPECT_EQ(e.minimal_commands(), (std::vector<std::string>{"add(7)", "add(3)"}));
  }
}

TEST(ModelRunner, ASweepCountWithASignOrASpaceIsRefused) {
  const SweepVariable restore;
  for (const char* not_a_count : {"-1", " 3", "+2"}) {
    ::setenv(model_sweep_variable, not_a_count, 1);
    try {
      (void)model_seeds();
      ADD_FAILURE() << not_a_count;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("kevlar::testing::model_seeds: "
                                                   "KEVLAR_MODEL_SWEEP_SEEDS='") +
                                           not_a_count + "' is not a count of seeds (0 .. 100000)");
    }
  }
}

TEST(ModelRandom, EmptyRangesGiveTheirLowerBoundWithoutDrawing) {
  ModelRandom r(17);
  ModelRandom reference(17);
  EXPECT_EQ(r.below(0), 0u);
  EXPECT_EQ(r.between(5, 5), 5);
  EXPECT_EQ(r.between(5, -2), 5) << "hi < lo";
  EXPECT_EQ(r.next(), reference.next()) << "no random bits were used";
  EXPECT_EQ(r.below(1), 0u);
  EXPECT_FALSE(r.chance(0));
  EXPECT_TRUE(r.chance(100));
}

/// A model that fails as soon as a 9 runs.
void nine_fails(const std::vector<int>& commands) {
  for (const int c : commands) model_check(c != 9, "a 9 ran");
}

TEST(ModelRunner, ASingleFailingCommandIsAlreadyMinimal) {
  const ModelRunner<int> runner(
      "nine", [](ModelRandom&) { return 9; }, nine_fails);
  const auto [minimal, replays] = runner.minimise({9});
  EXPECT_EQ(minimal, std::vector<int>{9});
  EXPECT_EQ(replays, 1u) << "one replay without it, which passes";
}

TEST(ModelRunner, AFailureWithoutAnyCommandIsMinimisedToTheEmptyList) {
  const ModelRunner<int> runner(
      "always", [](ModelRandom& r) { return static_cast<int>(r.below(10)); },
      [](const std::vector<int>&) { throw std::runtime_error("the system does not start"); }, 8);
  EXPECT_TRUE(runner.minimise({1, 2, 3}).first.empty());
  try {
    (void)runner.run_seed(1);
    ADD_FAILURE() << "no failure";
  } catch (const ModelFailure& e) {
    EXPECT_TRUE(e.minimal_commands().empty());
    const std::string m = e.what();
    EXPECT_NE(m.find("minimised to 0 of 8 commands"), std::string::npos) << m;
    EXPECT_NE(m.find("failure of the minimised list: the system does not start"), std::string::npos)
        << m;
  }
}

TEST(ModelRunner, TheReplayBoundStopsMinimisationWithTheListFoundSoFar) {
  ModelRunner<int> runner(
      "nine", [](ModelRandom&) { return 9; }, nine_fails);
  runner.with_max_replays(2);
  const auto [minimal, replays] = runner.minimise({1, 2, 3, 4, 9, 5, 6, 7});
  EXPECT_EQ(replays, 2u);
  // The first half goes, then the bound stops the search before the second half is split.
  EXPECT_EQ(minimal, (std::vector<int>{9, 5, 6, 7}));
}

TEST(ModelRunner, AThrownValueThatIsNotAStdExceptionIsAFailure) {
  const ModelRunner<int> runner(
      "thrower", [](ModelRandom&) { return 1; },
      [](const std::vector<int>& commands) {
        if (!commands.empty()) throw 42;  // NOLINT(hicpp-exception-baseclass)
      },
      3);
  EXPECT_EQ(runner.failure_of({1}),
            std::optional<std::string>("an exception that is not a std::exception"));
  EXPECT_EQ(runner.failure_of({}), std::nullopt);
  try {
    (void)runner.run_seed(0);
    ADD_FAILURE() << "no failure";
  } catch (const ModelFailure& e) {
    EXPECT_EQ(e.minimal_commands(), std::vector<std::string>{"1"});
  }
}

}  // namespace
