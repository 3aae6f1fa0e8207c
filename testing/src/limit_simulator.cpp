#include <kevlar/testing/limit_simulator.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <ostream>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>

namespace kevlar::testing {
namespace {

using ns = std::int64_t;

constexpr double to_s(ns t) { return static_cast<double>(t) / 1e9; }

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("kevlar::testing::LimitScenario: " + what);
}

void validate(const LimitScenario& s) {
  check(!s.phases.empty(), "phases must not be empty");
  for (const DependencyPhase& p : s.phases) {
    check(p.duration.count() > 0, "phase '" + p.name + "': duration must be positive");
    check(p.capacity > 0, "phase '" + p.name + "': capacity must be positive");
    check(p.service_time.count() > 0, "phase '" + p.name + "': service_time must be positive");
    check(std::isfinite(p.arrival_rate) && p.arrival_rate > 0,
          "phase '" + p.name + "': arrival_rate must be positive");
    check(p.extra_latency.count() >= 0, "phase '" + p.name + "': extra_latency must be >= 0");
  }
  check(s.timeout.count() >= 0, "timeout must be non-negative");
  check(s.max_queue >= 0, "max_queue must be non-negative");
  check(s.report_every.count() > 0, "report_every must be positive");
}

/// The limit in front of the dependency: a fixed number or a controller's.
struct Limit {
  int fixed = 0;
  AdaptiveLimitController* controller = nullptr;
  [[nodiscard]] std::uint32_t value() const {
    return controller != nullptr ? controller->limit() : static_cast<std::uint32_t>(fixed);
  }
};

enum class EventKind : unsigned char { arrival, served, responded, timeout, report };

struct Event {
  ns time;
  std::uint64_t seq;  // ties resolve in scheduling order: runs are reproducible
  EventKind kind;
  std::size_t call;
  friend bool operator>(const Event& a, const Event& b) {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

struct Call {
  ns admitted = 0;
  std::uint32_t in_flight_at_start = 0;
  bool done = false;  // completed or timed out, as the caller sees it
};

struct Interval {
  std::uint64_t offered = 0, good = 0, rejected = 0, dropped = 0;
  std::vector<ns> latencies;
};

double percentile(std::vector<ns>& v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]) / 1e6;
}

class Simulation {
 public:
  Simulation(const LimitScenario& scenario, Limit limit)
      : s_(scenario), limit_(limit), random_(scenario.seed) {
    validate(s_);
    ns t = 0;
    for (const DependencyPhase& p : s_.phases) {
      t += p.duration.count();
      phase_ends_.push_back(t);
    }
    result_.scenario = s_.name;
    result_.lowest_limit = result_.highest_limit = limit_.value();
    phase_totals_.resize(s_.phases.size());
    phase_limits_.resize(s_.phases.size());
    phase_latencies_.resize(s_.phases.size());
  }

  LimitSimulation run() {
    schedule(next_arrival(0), EventKind::arrival, 0);
    schedule(s_.report_every.count(), EventKind::report, 0);
    const ns end = phase_ends_.back();
    while (!events_.empty()) {
      const Event e = events_.top();
      if (e.time > end) break;
      events_.pop();
      now_ = e.time;
      // A report at a phase's exact end closes that phase's last interval: it belongs to it.
      advance_phase(e.kind == EventKind::report);
      switch (e.kind) {
        case EventKind::arrival:
          arrive();
          schedule(next_arrival(now_), EventKind::arrival, 0);
          break;
        case EventKind::served:
          served(e.call);
          break;
        case EventKind::responded:
          responded(e.call);
          break;
        case EventKind::timeout:
          timed_out(e.call);
          break;
        case EventKind::report:
          report();
          schedule(now_ + s_.report_every.count(), EventKind::report, 0);
          break;
      }
    }
    summarise();
    return std::move(result_);
  }

 private:
  [[nodiscard]] const DependencyPhase& phase() const { return s_.phases[phase_]; }

  void schedule(ns time, EventKind kind, std::size_t call) {
    events_.push(Event{time, seq_++, kind, call});
  }

  ns next_arrival(ns from) {
    std::exponential_distribution<double> gap(phase().arrival_rate);
    return from + std::max<ns>(1, static_cast<ns>(gap(random_) * 1e9));
  }

  void advance_phase(bool report) {
    while (phase_ + 1 < s_.phases.size() &&
           (report ? now_ > phase_ends_[phase_] : now_ >= phase_ends_[phase_])) {
      ++phase_;
      start_service();  // a larger capacity serves waiting requests at once
    }
  }

  // --- the limiter ---
  void arrive() {
    ++interval_.offered;
    ++phase_totals_[phase_].offered;
    const std::size_t id = calls_.size();
    calls_.push_back(Call{});
    if (waiting_.empty() && in_flight_ < limit_.value()) {
      admit(id);
    } else if (waiting_.size() < static_cast<std::size_t>(s_.max_queue)) {
      waiting_.push_back(id);
    } else {
      ++interval_.rejected;
      ++phase_totals_[phase_].rejected;
    }
  }

  void admit(std::size_t id) {
    ++in_flight_;
    Call& c = calls_[id];
    c.admitted = now_;
    c.in_flight_at_start = in_flight_;
    if (s_.timeout.count() > 0) schedule(now_ + s_.timeout.count(), EventKind::timeout, id);
    dependency_queue_.push_back(id);
    start_service();
  }

  void release() {
    --in_flight_;
    grant();
  }

  void grant() {
    while (!waiting_.empty() && in_flight_ < limit_.value()) {
      const std::size_t id = waiting_.front();
      waiting_.pop_front();
      admit(id);
    }
  }

  void sample(LimitSample kind, const Call& c) {
    if (limit_.controller == nullptr) return;
    AdaptiveLimitController& ctl = *limit_.controller;
    ctl.record(kind, Clock::duration(now_ - c.admitted), c.in_flight_at_start);
    if (!ctl.due(Clock::time_point(Clock::duration(now_)))) return;
    if (const std::optional<LimitChange> change =
            ctl.close_window(Clock::time_point(Clock::duration(now_)))) {
      ++result_.limit_changes;
      result_.lowest_limit = std::min(result_.lowest_limit, change->new_limit);
      result_.highest_limit = std::max(result_.highest_limit, change->new_limit);
      grant();  // growth lets waiting calls in
    }
  }

  // --- the dependency ---
  void start_service() {
    while (busy_ < phase().capacity && !dependency_queue_.empty()) {
      const std::size_t id = dependency_queue_.front();
      dependency_queue_.pop_front();
      ++busy_;
      std::exponential_distribution<double> service(1.0 / static_cast<double>(phase().service_time.count()));
      const ns took = std::max<ns>(1, static_cast<ns>(service(random_)));
      schedule(now_ + took, EventKind::served, id);
    }
  }

  void served(std::size_t id) {
    --busy_;
    start_service();
    // The extra latency is on the way back: it does not hold a server.
    if (phase().extra_latency.count() > 0) {
      schedule(now_ + phase().extra_latency.count(), EventKind::responded, id);
    } else {
      responded(id);
    }
  }

  void responded(std::size_t id) {
    Call& c = calls_[id];
    if (c.done) return;  // the caller gave up already; the work was wasted
    c.done = true;
    ++interval_.good;
    ++phase_totals_[phase_].good;
    interval_.latencies.push_back(now_ - c.admitted);
    phase_latencies_[phase_].push_back(now_ - c.admitted);
    sample(LimitSample::success, c);
    release();
  }

  void timed_out(std::size_t id) {
    Call& c = calls_[id];
    if (c.done) return;
    c.done = true;
    ++interval_.dropped;
    ++phase_totals_[phase_].dropped;
    sample(LimitSample::dropped, c);
    release();
  }

  // --- reporting ---
  void report() {
    const double span = to_s(s_.report_every.count());
    LimitSimulationRow row;
    row.time_s = to_s(now_);
    row.phase = phase_;
    row.capacity = phase().capacity;
    row.limit = limit_.value();
    row.in_flight = in_flight_;
    row.offered_per_s = static_cast<double>(interval_.offered) / span;
    row.goodput_per_s = static_cast<double>(interval_.good) / span;
    row.rejected_per_s = static_cast<double>(interval_.rejected) / span;
    row.dropped_per_s = static_cast<double>(interval_.dropped) / span;
    row.p50_ms = percentile(interval_.latencies, 0.5);
    row.p99_ms = percentile(interval_.latencies, 0.99);
    result_.rows.push_back(row);
    phase_limits_[phase_].push_back({now_, row.limit});
    interval_ = Interval{};
  }

  void summarise() {
    ns start = 0;
    for (std::size_t i = 0; i < s_.phases.size(); ++i) {
      const DependencyPhase& p = s_.phases[i];
      const double span = to_s(p.duration.count());
      PhaseSummary sum;
      sum.name = p.name;
      sum.capacity = p.capacity;
      sum.capacity_per_s = p.capacity / to_s(p.service_time.count());
      sum.offered_per_s = static_cast<double>(phase_totals_[i].offered) / span;
      sum.goodput_per_s = static_cast<double>(phase_totals_[i].good) / span;
      sum.dropped_per_s = static_cast<double>(phase_totals_[i].dropped) / span;
      sum.rejected_per_s = static_cast<double>(phase_totals_[i].rejected) / span;
      const double servable = std::min(sum.offered_per_s, sum.capacity_per_s);
      sum.goodput_share = servable > 0 ? sum.goodput_per_s / servable : 0;
      const auto& limits = phase_limits_[i];
      double total = 0;
      std::size_t n = 0;
      const ns half = start + p.duration.count() / 2;
      for (const auto& [t, l] : limits) {
        if (t < half) continue;
        total += l;
        ++n;
      }
      sum.mean_limit = n > 0 ? total / static_cast<double>(n) : 0;
      // From the first row of the last run of rows within ±20 % of `target` to the phase's end.
      const auto entered_for_good = [&](double target) {
        std::optional<double> since;
        for (const auto& [t, l] : limits) {
          if (std::abs(static_cast<double>(l) - target) > 0.2 * target) {
            since.reset();
          } else if (!since) {
            since = to_s(t - start);
          }
        }
        return since;
      };
      sum.converged_after_s = entered_for_good(p.capacity);
      if (sum.mean_limit > 0) sum.settled_after_s = entered_for_good(sum.mean_limit);
      sum.p99_ms = percentile(phase_latencies_[i], 0.99);
      result_.phases.push_back(std::move(sum));
      start += p.duration.count();
    }
  }

  const LimitScenario& s_;
  Limit limit_;
  std::mt19937_64 random_;
  std::vector<ns> phase_ends_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  ns now_ = 0;
  std::size_t phase_ = 0;
  std::vector<Call> calls_;
  std::uint32_t in_flight_ = 0;
  std::deque<std::size_t> waiting_;           // callers queued at the limiter
  std::deque<std::size_t> dependency_queue_;  // requests queued inside the dependency
  int busy_ = 0;
  Interval interval_;
  std::vector<Interval> phase_totals_;
  std::vector<std::vector<std::pair<ns, std::uint32_t>>> phase_limits_;
  std::vector<std::vector<ns>> phase_latencies_;
  LimitSimulation result_;
};

}  // namespace

void LimitSimulation::write_csv(std::ostream& out) const {
  out << "time_s,phase,capacity,limit,in_flight,offered_per_s,goodput_per_s,rejected_per_s,"
         "dropped_per_s,p50_ms,p99_ms\n";
  for (const LimitSimulationRow& r : rows) {
    out << r.time_s << ',' << r.phase << ',' << r.capacity << ',' << r.limit << ',' << r.in_flight
        << ',' << r.offered_per_s << ',' << r.goodput_per_s << ',' << r.rejected_per_s << ','
        << r.dropped_per_s << ',' << r.p50_ms << ',' << r.p99_ms << '\n';
  }
}

LimitSimulation LimitSimulator::run(const LimitScenario& scenario, int limit) {
  check(limit > 0, "the static limit must be positive");
  LimitSimulation r = Simulation(scenario, Limit{limit, nullptr}).run();
  r.limiter = "static(" + std::to_string(limit) + ")";
  return r;
}

LimitSimulation LimitSimulator::run(const LimitScenario& scenario,
                                    AdaptiveLimitController& controller) {
  LimitSimulation r = Simulation(scenario, Limit{0, &controller}).run();
  r.limiter = controller.algorithm().describe();
  return r;
}

}  // namespace kevlar::testing
