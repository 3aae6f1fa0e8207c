// The metrics observer: sharded counters, fixed-bucket histograms, gauges read from strategies.
#include <kevlar/chaos.hpp>
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/fallback.hpp>
#include <kevlar/hedging.hpp>
#include <kevlar/metrics.hpp>
#include <kevlar/rate_limit.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/timeout.hpp>

#include <algorithm>
#include <bit>
#include <new>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <type_traits>

namespace kevlar {

// ---- Series, MetricsSnapshot --------------------------------------------------------------------

std::optional<std::string_view> Series::tag(std::string_view key) const noexcept {
  for (const SeriesTag& t : tags) {
    if (t.key == key) return std::string_view(t.value);
  }
  return std::nullopt;
}

const Series* MetricsSnapshot::find(std::string_view name, TagFilter tags) const noexcept {
  for (const Series& s : series) {
    if (s.name != name) continue;
    const bool all = std::all_of(tags.begin(), tags.end(), [&](const auto& want) {
      const std::optional<std::string_view> have = s.tag(want.first);
      return have && *have == want.second;
    });
    if (all) return &s;
  }
  return nullptr;
}

double MetricsSnapshot::value(std::string_view name, TagFilter tags) const noexcept {
  const Series* s = find(name, tags);
  return s != nullptr ? s->value : 0.0;
}

// ---- ShardedCounters ------------------------------------------------------------------------------

namespace detail {
namespace {
std::atomic<std::size_t> next_thread_slot{0};
}  // namespace

ShardedCounters::ShardedCounters(std::size_t counters, std::size_t shards)
    : stride_(([&] {
        constexpr std::size_t per_line = line / sizeof(std::atomic<std::uint64_t>);
        return (counters + per_line - 1) / per_line * per_line;
      })()),
      mask_(shards - 1),
      size_(stride_ * shards),
      data_(static_cast<std::atomic<std::uint64_t>*>(
          ::operator new(size_ * sizeof(std::atomic<std::uint64_t>), std::align_val_t{line}))) {
  for (std::size_t i = 0; i < size_; ++i) ::new (data_ + i) std::atomic<std::uint64_t>(0);
}

ShardedCounters::~ShardedCounters() {
  static_assert(std::is_trivially_destructible_v<std::atomic<std::uint64_t>>);
  ::operator delete(data_, std::align_val_t{line});
}

std::size_t ShardedCounters::shard() const noexcept {
  // Each thread takes the next slot once; consecutive threads land on different shards.
  static thread_local const std::size_t slot =
      next_thread_slot.fetch_add(1, std::memory_order_relaxed);
  return slot & mask_;
}

std::uint64_t ShardedCounters::sum(std::size_t counter) const noexcept {
  std::uint64_t total = 0;
  for (std::size_t s = 0; s <= mask_; ++s) {
    total += data_[s * stride_ + counter].load(std::memory_order_relaxed);
  }
  return total;
}

}  // namespace detail

// ---- MetricsObserver --------------------------------------------------------------------------

namespace {

// Counter slots of a group; the two outcome histograms follow (buckets..., +Inf, sum in ticks).
enum Slot : std::size_t {
  retries,
  timeouts,
  fallbacks,
  hedges,
  budget_exhausted,  // + 0 retry, 1 hedge
  rejections = budget_exhausted + 2,  // + RejectionKind
  histograms = rejections + 6,
};
constexpr std::size_t rejection_kinds = 6;
static_assert(static_cast<std::size_t>(RejectionKind::queue_timeout) + 1 == rejection_kinds);
constexpr std::size_t chaos_kinds = 4;

std::size_t default_shards() {
  const std::size_t hw = std::max(1U, std::thread::hardware_concurrency());
  return std::min<std::size_t>(std::bit_ceil(hw), 64);
}

struct Instrument {
  const char* name;
  InstrumentKind kind;
  const char* unit;
  const char* description;
};

constexpr Instrument executions{"kevlar.executions", InstrumentKind::counter, "{execution}",
                                "Public executions of the shield that completed, by final outcome."};
constexpr Instrument duration{"kevlar.execution.duration", InstrumentKind::histogram, "s",
                              "Time from entering the shield to the final outcome."};
constexpr Instrument retries_i{"kevlar.retries", InstrumentKind::counter, "{retry}",
                               "Retries decided, counted before their backoff."};
constexpr Instrument timeouts_i{"kevlar.timeouts", InstrumentKind::counter, "{timeout}",
                                "Timeouts whose budget elapsed."};
constexpr Instrument fallbacks_i{"kevlar.fallbacks", InstrumentKind::counter, "{fallback}",
                                 "Handled failures a fallback replaced."};
constexpr Instrument hedges_i{"kevlar.hedges", InstrumentKind::counter, "{hedge}",
                              "Hedged attempts launched (the first attempt is not one)."};
constexpr Instrument budget_exhausted_i{
    "kevlar.retry_budget.exhausted", InstrumentKind::counter, "{attempt}",
    "Retries and hedges a retry budget refused, by kind of attempt."};
constexpr Instrument budget_balance{"kevlar.retry_budget.balance", InstrumentKind::gauge, "{attempt}",
                                    "What a retry budget allows now: its tokens (tokens mode), or "
                                    "the retries and hedges it would admit (rate, concurrency)."};
constexpr Instrument throttle_probability{
    "kevlar.throttle.probability", InstrumentKind::gauge, "1",
    "The probability an adaptive throttle rejects a call arriving now."};
constexpr Instrument throttle_requests{
    "kevlar.throttle.requests", InstrumentKind::gauge, "{request}",
    "Requests an adaptive throttle counts in its window, and of them the accepted ones."};
constexpr Instrument rejections_i{"kevlar.rejections", InstrumentKind::counter, "{rejection}",
                                  "Calls refused without running, by the kind of refusal."};
constexpr Instrument chaos_i{"kevlar.chaos.injections", InstrumentKind::counter, "{injection}",
                             "Chaos injections, by kind, operation and environment."};
constexpr Instrument transitions_i{"kevlar.circuit_breaker.transitions", InstrumentKind::counter,
                                   "{transition}", "Circuit breaker state changes."};
constexpr Instrument breaker_state{
    "kevlar.circuit_breaker.state", InstrumentKind::gauge, "{state}",
    "Circuit breaker state: 0 closed, 1 open, 2 half-open, 3 isolated."};
constexpr Instrument limiter_inflight{"kevlar.concurrency_limit.inflight", InstrumentKind::gauge,
                                      "{execution}", "Concurrency limit permits in use."};
constexpr Instrument limiter_queued{"kevlar.concurrency_limit.queued", InstrumentKind::gauge,
                                    "{execution}", "Calls waiting for a concurrency limit permit."};
constexpr Instrument limiter_capacity{"kevlar.concurrency_limit.capacity", InstrumentKind::gauge,
                                      "{execution}",
                                      "Concurrency limit permits (max_concurrency)."};
constexpr Instrument limiter_limit{"kevlar.concurrency_limit.limit", InstrumentKind::gauge,
                                   "{execution}",
                                   "The limit an adaptive concurrency limit has set itself."};
constexpr Instrument limiter_samples{"kevlar.concurrency_limit.samples", InstrumentKind::counter,
                                     "{sample}",
                                     "Completed calls an adaptive concurrency limit counted, by "
                                     "kind (measured and dropped ones once their window closes)."};
constexpr Instrument rate_available{"kevlar.rate_limit.available", InstrumentKind::gauge,
                                    "{permit}", "Rate limit permits a call could take now."};
constexpr Instrument rate_queued{"kevlar.rate_limit.queued", InstrumentKind::gauge,
                                 "{execution}", "Calls waiting for a reserved rate limit permit."};

Series make_series(const Instrument& i) {
  Series s;
  s.name = i.name;
  s.kind = i.kind;
  s.unit = i.unit;
  s.description = i.description;
  return s;
}

void add_name_tag(Series& s, const std::optional<std::string>& name) {
  if (name) s.tags.push_back({"kevlar.shield.name", *name});
}

constexpr const char* circuit_names[] = {"closed", "open", "half_open", "isolated"};

/// The retry budget a retry or a hedge holds, or nullptr.
const RetryBudget* budget_of(const Strategy& s) noexcept {
  if (const auto* r = dynamic_cast<const RetryStrategy*>(&s)) return r->options().budget.get();
  if (const auto* h = dynamic_cast<const HedgeStrategy*>(&s)) return h->options().budget.get();
  return nullptr;
}

}  // namespace

struct MetricsObserver::Group {
  Group(const std::string* shield_name, std::size_t counters, std::size_t shards)
      : counters(counters, shards) {
    if (shield_name != nullptr) name = *shield_name;
  }
  [[nodiscard]] bool is(const std::string* shield_name) const noexcept {
    return shield_name == nullptr ? !name : name && *name == *shield_name;
  }
  std::optional<std::string> name;
  detail::ShardedCounters counters;
  Group* next = nullptr;  ///< set before the group is published, never changed
};

struct MetricsObserver::Gauge {
  enum class Kind : unsigned char { breaker, limiter, rate_limit, adaptive_limiter, budget, throttle };
  Kind kind;
  std::optional<std::string> name;
  std::size_t index;
  std::weak_ptr<const Strategy> strategy;
  const Strategy* identity;  ///< for deduplication only (never dereferenced)
};

std::size_t MetricsObserver::validated_shards(const MetricsOptions& options) {
  if (options.shards != 0 && (!std::has_single_bit(options.shards) || options.shards > 1024)) {
    throw std::invalid_argument(
        "kevlar::MetricsOptions::shards must be 0 or a power of two at most 1024");
  }
  return options.shards == 0 ? default_shards() : options.shards;
}

MetricsObserver::MetricsObserver(MetricsOptions options)
    : options_(std::move(options)),
      shards_(validated_shards(options_)),
      transitions_(16, shards_) {
  if (options_.duration_buckets.empty() || options_.duration_buckets.size() > 64) {
    throw std::invalid_argument(
        "kevlar::MetricsOptions::duration_buckets must hold 1 to 64 upper bounds");
  }
  double previous = 0;
  for (const double b : options_.duration_buckets) {
    if (!std::isfinite(b) || b <= previous) {
      throw std::invalid_argument(
          "kevlar::MetricsOptions::duration_buckets must be finite, positive and strictly "
          "ascending");
    }
    previous = b;
    bounds_ns_.push_back(std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(b))
                             .count());
  }
}

MetricsObserver::~MetricsObserver() {
  Group* g = groups_.load(std::memory_order_acquire);
  while (g != nullptr) {
    Group* next = g->next;
    delete g;
    g = next;
  }
}

MetricsObserver::Group* MetricsObserver::find_group(const std::string* name) const noexcept {
  for (Group* g = groups_.load(std::memory_order_acquire); g != nullptr; g = g->next) {
    if (g->is(name)) return g;
  }
  return nullptr;
}

MetricsObserver::Group& MetricsObserver::add_group(const std::string* name) {
  const std::lock_guard lock(groups_mutex_);
  if (Group* g = find_group(name)) return *g;
  const std::size_t histogram_slots = bounds_ns_.size() + 2;  // buckets, +Inf, sum
  auto g = std::make_unique<Group>(name, histograms + 2 * histogram_slots, shards_);
  g->next = groups_.load(std::memory_order_relaxed);
  groups_.store(g.get(), std::memory_order_release);
  return *g.release();
}

MetricsObserver::Group* MetricsObserver::group(const std::string* name) noexcept {
  if (Group* g = find_group(name)) return g;
  try {
    return &add_group(name);
  } catch (...) {
    return nullptr;
  }
}

EventKinds MetricsObserver::interests() const {
  return event_kinds<ExecutionFinished, RetryScheduled, TimeoutFired, FallbackTaken, Rejected,
                     BreakerTransition, HedgeLaunched, ChaosInjected, RetryBudgetExhausted>();
}

void MetricsObserver::on_shield(ShieldInfo& shield) {
  shield.observer_state = &add_group(shield.name);
  const std::lock_guard lock(gauges_mutex_);
  for (std::size_t i = 0; i < shield.strategies.size(); ++i) {
    const std::shared_ptr<Strategy>& s = shield.strategies[i];
    Gauge::Kind kind;
    if (dynamic_cast<const CircuitBreaker*>(s.get()) != nullptr) {
      kind = Gauge::Kind::breaker;
    } else if (dynamic_cast<const ConcurrencyLimitStrategy*>(s.get()) != nullptr) {
      kind = Gauge::Kind::limiter;
    } else if (dynamic_cast<const AdaptiveConcurrencyLimitStrategy*>(s.get()) != nullptr) {
      kind = Gauge::Kind::adaptive_limiter;
    } else if (dynamic_cast<const RateLimitStrategy*>(s.get()) != nullptr) {
      kind = Gauge::Kind::rate_limit;
    } else if (dynamic_cast<const AdaptiveThrottleStrategy*>(s.get()) != nullptr) {
      kind = Gauge::Kind::throttle;
    } else if (budget_of(*s) != nullptr) {
      kind = Gauge::Kind::budget;
    } else {
      continue;
    }
    // One series per (name, index): a strategy newly announced there replaces the previous one
    // (two shields of one name, each with its own breaker, would otherwise give two samples with
    // the same labels, which Prometheus refuses).
    const auto same_alias = [&](const Gauge& g) {
      const bool same_name = shield.name == nullptr ? !g.name : g.name && *g.name == *shield.name;
      return same_name && g.index == i;
    };
    std::erase_if(gauges_, [&](const Gauge& g) {
      return g.strategy.expired() || (same_alias(g) && g.identity != s.get());
    });
    std::size_t aliases = 0;
    bool known = false;
    for (const Gauge& g : gauges_) {
      if (g.identity != s.get()) continue;
      ++aliases;
      known = known || same_alias(g);
    }
    if (known || aliases >= options_.max_aliases_per_strategy) continue;
    std::optional<std::string> name;
    if (shield.name != nullptr) name = *shield.name;
    gauges_.push_back(Gauge{kind, std::move(name), i, s, s.get()});
  }
}

void MetricsObserver::on_event(const Event& event) noexcept {
  if (const auto* t = event.get_if<BreakerTransition>()) {
    transitions_.add(static_cast<std::size_t>(t->from) * 4 + static_cast<std::size_t>(t->to), 1);
    return;
  }
  if (const auto* c = event.get_if<ChaosInjected>()) {
    count_injection(event.source.shield_name, *c);
    return;
  }
  // The shield's series, found when it was announced (looked up only for an event that raced the
  // announcement).
  Group* g = static_cast<Group*>(event.source.observer_state);
  if (g == nullptr && (g = group(event.source.shield_name)) == nullptr) return;
  std::size_t slot;
  if (const auto* e = event.get_if<ExecutionFinished>()) {
    const std::int64_t ticks = std::max<std::int64_t>(e->duration.count(), 0);
    const std::size_t nb = bounds_ns_.size();
    // Linear from the smallest bound: most calls land in the first buckets.
    std::size_t bucket = 0;
    while (bucket < nb && bounds_ns_[bucket] < ticks) ++bucket;
    std::atomic<std::uint64_t>* h = g->counters.local() + histograms + (e->success ? 0 : nb + 2);
    h[bucket].fetch_add(1, std::memory_order_relaxed);
    h[nb + 1].fetch_add(static_cast<std::uint64_t>(ticks), std::memory_order_relaxed);
    return;
  }
  if (event.is<RetryScheduled>()) {
    slot = retries;
  } else if (event.is<TimeoutFired>()) {
    slot = timeouts;
  } else if (event.is<FallbackTaken>()) {
    slot = fallbacks;
  } else if (const auto* r = event.get_if<Rejected>()) {
    slot = rejections + static_cast<std::size_t>(r->kind);
  } else if (event.is<HedgeLaunched>()) {
    slot = hedges;
  } else if (const auto* b = event.get_if<RetryBudgetExhausted>()) {
    slot = budget_exhausted + (b->hedge ? 1 : 0);
  } else {  // AttemptStarted, LimiterStateChanged (the gauges are read from the strategies), and
            // kinds this observer does not know
    return;
  }
  g->counters.add(slot, 1);
}

void MetricsObserver::count_injection(const std::string* shield_name,
                                      const ChaosInjected& c) noexcept {
  const auto kind = static_cast<std::size_t>(c.kind);
  if (kind >= chaos_kinds) return;
  const std::lock_guard lock(chaos_mutex_);
  for (ChaosSeries& s : chaos_) {
    const bool same_name = shield_name == nullptr ? !s.name : s.name && *s.name == *shield_name;
    if (same_name && s.kind == kind && s.operation == c.operation &&
        s.environment == c.environment) {
      ++s.count;
      return;
    }
  }
  try {  // the first injection of a combination allocates its series, once
    ChaosSeries s;
    if (shield_name != nullptr) s.name = *shield_name;
    s.kind = kind;
    s.operation = c.operation;
    s.environment = c.environment;
    s.count = 1;
    chaos_.push_back(std::move(s));
  } catch (...) {  // out of memory: the injection goes uncounted
  }
}

MetricsSnapshot MetricsObserver::snapshot() const {
  // Groups ordered by name (the unnamed one first), so that the output is stable.
  std::vector<const Group*> groups;
  for (const Group* g = groups_.load(std::memory_order_acquire); g != nullptr; g = g->next) {
    groups.push_back(g);
  }
  std::sort(groups.begin(), groups.end(),
            [](const Group* a, const Group* b) { return a->name < b->name; });

  MetricsSnapshot out;
  const std::size_t nb = bounds_ns_.size();
  const auto seconds = [](std::uint64_t ticks) {
    return std::chrono::duration<double>(Clock::duration(static_cast<Clock::duration::rep>(ticks))).count();
  };
  const char* const outcomes[] = {"success", "failure"};
  // kevlar.executions and kevlar.execution.duration, from the outcome histograms.
  std::vector<Series> histograms_out;
  for (const Group* g : groups) {
    for (std::size_t o = 0; o < 2; ++o) {
      const std::size_t base = histograms + o * (nb + 2);
      Series h = make_series(duration);
      add_name_tag(h, g->name);
      h.tags.push_back({"kevlar.execution.outcome", outcomes[o]});
      h.bounds = options_.duration_buckets;
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b <= nb; ++b) {
        cumulative += g->counters.sum(base + b);
        h.buckets.push_back(cumulative);
      }
      h.count = cumulative;
      h.value = seconds(g->counters.sum(base + nb + 1));
      Series c = make_series(executions);
      c.tags = h.tags;
      c.value = static_cast<double>(cumulative);
      out.series.push_back(std::move(c));
      histograms_out.push_back(std::move(h));
    }
  }
  for (Series& h : histograms_out) out.series.push_back(std::move(h));
  const auto counters = [&](const Instrument& i, std::size_t slot) {
    for (const Group* g : groups) {
      Series s = make_series(i);
      add_name_tag(s, g->name);
      s.value = static_cast<double>(g->counters.sum(slot));
      out.series.push_back(std::move(s));
    }
  };
  counters(retries_i, retries);
  counters(timeouts_i, timeouts);
  counters(fallbacks_i, fallbacks);
  counters(hedges_i, hedges);
  for (const Group* g : groups) {
    for (std::size_t k = 0; k < 2; ++k) {
      Series s = make_series(budget_exhausted_i);
      add_name_tag(s, g->name);
      s.tags.push_back({"kevlar.attempt.kind", k == 0 ? "retry" : "hedge"});
      s.value = static_cast<double>(g->counters.sum(budget_exhausted + k));
      out.series.push_back(std::move(s));
    }
  }
  for (const Group* g : groups) {
    for (std::size_t k = 0; k < rejection_kinds; ++k) {
      Series s = make_series(rejections_i);
      add_name_tag(s, g->name);
      s.tags.push_back({"kevlar.rejection.type", to_string(static_cast<RejectionKind>(k))});
      s.value = static_cast<double>(g->counters.sum(rejections + k));
      out.series.push_back(std::move(s));
    }
  }
  {
    // Chaos injections: one series per shield name, kind, operation and environment seen.
    const std::lock_guard lock(chaos_mutex_);
    std::vector<const ChaosSeries*> sorted;
    for (const ChaosSeries& c : chaos_) sorted.push_back(&c);
    std::sort(sorted.begin(), sorted.end(), [](const ChaosSeries* a, const ChaosSeries* b) {
      return std::tie(a->name, a->kind, a->operation, a->environment) <
             std::tie(b->name, b->kind, b->operation, b->environment);
    });
    for (const ChaosSeries* c : sorted) {
      Series s = make_series(chaos_i);
      add_name_tag(s, c->name);
      s.tags.push_back({"kevlar.chaos.kind", to_string(static_cast<ChaosKind>(c->kind))});
      if (!c->operation.empty()) s.tags.push_back({"kevlar.chaos.operation", c->operation});
      if (!c->environment.empty()) s.tags.push_back({"kevlar.chaos.environment", c->environment});
      s.value = static_cast<double>(c->count);
      out.series.push_back(std::move(s));
    }
  }
  for (std::size_t from = 0; from < 4; ++from) {
    for (std::size_t to = 0; to < 4; ++to) {
      const std::uint64_t n = transitions_.sum(from * 4 + to);
      if (n == 0) continue;  // only the changes that happened
      Series s = make_series(transitions_i);
      s.tags.push_back({"kevlar.circuit_breaker.state.from", circuit_names[from]});
      s.tags.push_back({"kevlar.circuit_breaker.state.to", circuit_names[to]});
      s.value = static_cast<double>(n);
      out.series.push_back(std::move(s));
    }
  }

  // Gauges, read from the live strategies; aliases of destroyed ones are dropped.
  std::vector<Series> breaker, inflight, queued, capacity, limit, samples, available, rate_waiting,
      balance, throttle;
  const Clock& clock = options_.clock ? *options_.clock : *Clock::steady();
  {
    const std::lock_guard lock(gauges_mutex_);
    std::erase_if(gauges_, [](const Gauge& g) { return g.strategy.expired(); });
    std::sort(gauges_.begin(), gauges_.end(), [](const Gauge& a, const Gauge& b) {
      return std::tie(a.name, a.index) < std::tie(b.name, b.index);
    });
    for (const Gauge& g : gauges_) {
      const std::shared_ptr<const Strategy> s = g.strategy.lock();
      if (!s) continue;
      const auto tagged = [&](const Instrument& i, double v) {
        Series series = make_series(i);
        add_name_tag(series, g.name);
        series.tags.push_back({"kevlar.strategy.index", std::to_string(g.index)});
        series.value = v;
        return series;
      };
      if (g.kind == Gauge::Kind::throttle) {
        const AdaptiveThrottleSnapshot t =
            static_cast<const AdaptiveThrottleStrategy&>(*s).snapshot(clock);
        throttle.push_back(tagged(throttle_probability, t.probability));
        for (const bool accepted : {false, true}) {
          Series series = tagged(throttle_requests, static_cast<double>(
                                                        accepted ? t.accepts : t.requests));
          series.tags.push_back({"kevlar.throttle.count", accepted ? "accepts" : "requests"});
          throttle.push_back(std::move(series));
        }
      } else if (g.kind == Gauge::Kind::budget) {
        const RetryBudget* b = budget_of(*s);
        Series series = tagged(budget_balance, b->balance());
        series.tags.push_back({"kevlar.retry_budget.mode", to_string(b->mode())});
        balance.push_back(std::move(series));
      } else if (g.kind == Gauge::Kind::breaker) {
        const auto& b = static_cast<const CircuitBreaker&>(*s);
        breaker.push_back(tagged(breaker_state, static_cast<double>(b.state())));
      } else if (g.kind == Gauge::Kind::rate_limit) {
        const RateLimitState st = static_cast<const RateLimitStrategy&>(*s).state(clock);
        available.push_back(tagged(rate_available, st.available));
        rate_waiting.push_back(tagged(rate_queued, st.queued));
      } else {
        const auto* a = g.kind == Gauge::Kind::adaptive_limiter
                            ? static_cast<const AdaptiveConcurrencyLimitStrategy*>(s.get())
                            : nullptr;
        const ConcurrencyLimitStrategy& l =
            a != nullptr ? a->limiter() : static_cast<const ConcurrencyLimitStrategy&>(*s);
        const ConcurrencyLimitState st = l.state();
        inflight.push_back(tagged(limiter_inflight, st.running));
        queued.push_back(tagged(limiter_queued, st.queued));
        capacity.push_back(tagged(limiter_capacity, l.max_concurrency()));
        if (a != nullptr) {
          limit.push_back(tagged(limiter_limit, a->limit()));
          for (const LimitSample k : {LimitSample::success, LimitSample::dropped, LimitSample::ignored}) {
            Series series = tagged(limiter_samples, static_cast<double>(a->controller().total(k)));
            series.tags.push_back({"kevlar.sample.kind", k == LimitSample::success   ? "success"
                                                         : k == LimitSample::dropped ? "dropped"
                                                                                     : "ignored"});
            samples.push_back(std::move(series));
          }
        }
      }
    }
  }
  for (std::vector<Series>* v :
       {&breaker, &inflight, &queued, &capacity, &limit, &samples, &available, &rate_waiting,
        &balance, &throttle}) {
    for (Series& s : *v) out.series.push_back(std::move(s));
  }
  return out;
}

}  // namespace kevlar
