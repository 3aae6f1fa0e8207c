// kevlar_limit_charts: runs the adaptive concurrency limit's reference scenarios in the testing
// kit's LimitSimulator (virtual time, fixed seeds) for a static limit and each algorithm, and
// writes, into the folder it is given:
//   <scenario>_<limiter>.csv   the rows (LimitSimulation::write_csv)
//   summary.csv                one line per scenario, limiter and phase: convergence, goodput
//   <scenario>.gp              a gnuplot script drawing <scenario>.png from the CSVs
// tools/limit-charts.sh builds it, runs it and draws the charts of docs/strategies/
// adaptive-concurrency.md.
#include <kevlar/adaptive_limit.hpp>
#include <kevlar/testing/limit_simulator.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using kevlar::Clock;
using kevlar::testing::DependencyPhase;
using kevlar::testing::LimitScenario;
using kevlar::testing::LimitSimulation;
using kevlar::testing::LimitSimulator;

struct Limiter {
  std::string name;
  std::function<LimitSimulation(const LimitScenario&)> run;
};

kevlar::AdaptiveLimitSettings settings() {
  kevlar::AdaptiveLimitSettings s;  // Kevlar's bounds and window, a wider ceiling
  s.initial_limit = 10;
  s.min_limit = 1;
  s.max_limit = 200;
  s.window = 1s;
  return s;
}

template <class Algorithm, class Options>
Limiter adaptive(std::string name, Options options) {
  return {std::move(name), [options](const LimitScenario& s) {
            kevlar::AdaptiveLimitController c(settings(), std::make_unique<Algorithm>(options));
            return LimitSimulator::run(s, c);
          }};
}

std::vector<Limiter> limiters() {
  kevlar::VegasOptions vegas;
  vegas.seed = 11;
  return {
      {"static", [](const LimitScenario& s) { return LimitSimulator::run(s, 40); }},
      adaptive<kevlar::AimdLimit>("aimd", kevlar::AimdOptions{}),
      adaptive<kevlar::VegasLimit>("vegas", vegas),
      adaptive<kevlar::GradientLimit>("gradient", kevlar::GradientOptions{}),
  };
}

std::vector<LimitScenario> scenarios() {
  // 10 ms mean service; 6,000 calls/s offered throughout: 1.5x the steady capacity (40 at once,
  // 4,000/s), 3x when it halves, 0.75x when it doubles; a 20 ms latency spike that is not
  // queueing; then the steady dependency again.
  const auto phase = [](std::string name, int capacity, Clock::duration extra = {}) {
    return DependencyPhase{std::move(name), 120s, capacity, 10ms, 6000, extra};
  };
  LimitScenario phases;
  phases.name = "phases";
  phases.seed = 42;
  phases.timeout = 1s;
  phases.phases = {phase("steady", 40), phase("halved", 20), phase("doubled", 80),
                   phase("spike", 40, 20ms), phase("recovered", 40)};
  // A few calls per second: no window fills quickly, and none uses half the limit.
  LimitScenario low;
  low.name = "low_traffic";
  low.seed = 42;
  low.timeout = 1s;
  low.report_every = 10s;
  low.phases = {DependencyPhase{"low", 600s, 40, 10ms, 3, {}}};
  // An overload that times calls out: the capacity falls to a tenth for two minutes while the
  // callers give up after 100 ms (ten mean service times: one call in 22,000 of the healthy
  // dependency). Calls beyond the capacity queue inside the dependency until they time out, and
  // their work is still done: a limit that does not shrink spends the dependency on calls nobody
  // waits for any more.
  LimitScenario overload;
  overload.name = "overload";
  overload.seed = 42;
  overload.timeout = 100ms;
  overload.phases = {DependencyPhase{"steady", 60s, 40, 10ms, 3000, {}},
                     DependencyPhase{"tenth", 120s, 4, 10ms, 3000, {}},
                     DependencyPhase{"recovered", 60s, 40, 10ms, 3000, {}}};
  return {phases, low, overload};
}

void write_gnuplot(const std::filesystem::path& folder, const std::string& scenario,
                   const std::vector<std::string>& names) {
  std::ofstream gp(folder / (scenario + ".gp"));
  gp << "set terminal pngcairo size 1100,1150 font ',10'\n"
     << "set output '" << scenario << ".png'\n"
     << "set datafile separator ','\n"
     << "set key outside right top\n"
     << "set grid\n"
     << "set multiplot layout 4,1 title 'kevlar adaptive concurrency: " << scenario
     << " (LimitSimulator, seed 42)'\n"
     << "set xlabel 'time (s)'\n";
  const auto panel = [&](const char* ylabel, const char* column, bool capacity) {
    gp << "set ylabel '" << ylabel << "'\n" << "plot ";
    if (capacity) {
      gp << "'" << scenario << "_static.csv' using 1:3 with steps lw 3 dt 2 lc rgb '#aaaaaa' title "
         << "'capacity', ";
    }
    // One colour per limiter in every panel.
    static const char* const colours[] = {"#000000", "#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
    for (std::size_t i = 0; i < names.size(); ++i) {
      gp << "'" << scenario << '_' << names[i] << ".csv' using 1:" << column
         << " with lines lw 1.5 lc rgb '" << colours[i % 5] << "' title '" << names[i] << "'"
         << (i + 1 < names.size() ? ", " : "\n");
    }
  };
  panel("limit", "4", true);
  panel("goodput (calls/s)", "7", false);
  panel("dropped (calls/s)", "9", false);
  gp << "set logscale y\n";
  panel("p99 latency (ms)", "11", false);
  gp << "unset multiplot\n";
}

}  // namespace

int main(int argc, char** argv) {
  // "--smoke": every phase a tenth as long (CTest's tools.limit_charts, which also runs in the
  // sanitizer builds, where the full scenarios take minutes).
  const bool smoke = argc == 3 && std::string(argv[2]) == "--smoke";
  if (argc != 2 && !smoke) {
    std::cerr << "usage: " << argv[0] << " <output folder> [--smoke]\n";
    return 2;
  }
  const std::filesystem::path folder = argv[1];
  std::filesystem::create_directories(folder);
  std::ofstream summary(folder / "summary.csv");
  summary << "scenario,limiter,phase,capacity,capacity_per_s,offered_per_s,goodput_per_s,"
             "goodput_share,dropped_per_s,mean_limit,converged_after_s,settled_after_s,p99_ms\n";
  for (LimitScenario s : scenarios()) {
    if (smoke) {
      for (DependencyPhase& p : s.phases) p.duration /= 10;
    }
    std::vector<std::string> names;
    for (const Limiter& l : limiters()) {
      const LimitSimulation r = l.run(s);
      std::ofstream csv(folder / (s.name + "_" + l.name + ".csv"));
      r.write_csv(csv);
      names.push_back(l.name);
      for (const auto& p : r.phases) {
        summary << s.name << ',' << l.name << ',' << p.name << ',' << p.capacity << ','
                << p.capacity_per_s << ',' << p.offered_per_s << ',' << p.goodput_per_s << ','
                << p.goodput_share << ',' << p.dropped_per_s << ',' << p.mean_limit << ',';
        if (p.converged_after_s) summary << *p.converged_after_s;
        summary << ',';
        if (p.settled_after_s) summary << *p.settled_after_s;
        summary << ',' << p.p99_ms << '\n';
      }
    }
    write_gnuplot(folder, s.name, names);
  }
  std::cout << "kevlar_limit_charts: wrote " << (folder / "summary.csv").string() << "\n";
  return 0;
}
