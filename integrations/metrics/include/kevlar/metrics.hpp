// kevlar — metrics: an observer that counts every decision under stable instrument names, and the
// snapshot it returns.
#pragma once

#include <kevlar/observer.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kevlar {

/// What an instrument measures.
enum class InstrumentKind : unsigned char {
  counter,    ///< a monotonic total
  histogram,  ///< a distribution over fixed buckets
  gauge,      ///< a value read when the snapshot is taken
};

/// One tag of a series, e.g. {"kevlar.execution.outcome", "success"}.
struct SeriesTag {
  std::string key;
  std::string value;
  friend bool operator==(const SeriesTag&, const SeriesTag&) = default;
};

/// One time series of a snapshot: an instrument and one combination of its tags.
struct Series {
  std::string name;         ///< the instrument, e.g. "kevlar.executions"
  InstrumentKind kind = InstrumentKind::counter;
  std::string unit;         ///< UCUM-style, e.g. "{execution}" or "s"
  std::string description;  ///< one sentence
  std::vector<SeriesTag> tags;
  /// Counter: the total. Gauge: the value. Histogram: the sum of the observations (seconds).
  double value = 0;
  /// Histogram only: number of observations.
  std::uint64_t count = 0;
  /// Histogram only: the buckets' upper bounds (seconds), ascending; +Inf is implied after them.
  std::vector<double> bounds;
  /// Histogram only: cumulative counts, one per bound and a last one for +Inf (== count).
  std::vector<std::uint64_t> buckets;

  /// The value of tag `key`, if the series has it.
  [[nodiscard]] std::optional<std::string_view> tag(std::string_view key) const noexcept;
};

/// Every series of a MetricsObserver at one moment. Series of one instrument are contiguous, in
/// the order of the table in docs/observability.md, then ordered by their tags.
struct MetricsSnapshot {
  using TagFilter = std::initializer_list<std::pair<std::string_view, std::string_view>>;

  std::vector<Series> series;

  /// The series of instrument `name` that has every tag in `tags` (and possibly others); nullptr
  /// if none. With several matches, the first.
  [[nodiscard]] const Series* find(std::string_view name, TagFilter tags = {}) const noexcept;
  /// find(name, tags)->value, or 0 when there is no such series.
  [[nodiscard]] double value(std::string_view name, TagFilter tags = {}) const noexcept;
};

/// Options of a MetricsObserver.
struct MetricsOptions {
  /// Upper bounds of kevlar.execution.duration's buckets, in seconds: finite, positive and
  /// strictly ascending (at most 64). +Inf is always added.
  std::vector<double> duration_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                       0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  /// Counter shards (each a cache line per 8 counters); threads are spread over them so that
  /// counting never contends across cores. 0: the hardware's thread count rounded up to a power
  /// of two, at most 64. Otherwise a power of two, at most 1024.
  std::size_t shards = 0;
  /// Gauge aliases per stateful strategy: a breaker or limiter shared by many observed shields
  /// (named and indexed differently) gets a gauge series for each, up to this many.
  std::size_t max_aliases_per_strategy = 64;
  /// The clock a rate limit's `kevlar.rate_limit.available` gauge is read on (its permits refill
  /// with time): null for the steady clock. Give it the observed shields' clock when they use
  /// another one (Shield::with_clock, a ManualClock in tests).
  std::shared_ptr<const Clock> clock;
};

namespace detail {

/// Counters spread over per-thread shards, each shard a whole number of cache lines (so that two
/// threads never write the same line), summed on read.
class ShardedCounters {
 public:
  ShardedCounters(std::size_t counters, std::size_t shards);
  ~ShardedCounters();
  ShardedCounters(const ShardedCounters&) = delete;
  ShardedCounters& operator=(const ShardedCounters&) = delete;

  void add(std::size_t counter, std::uint64_t n) noexcept {
    local()[counter].fetch_add(n, std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t sum(std::size_t counter) const noexcept;
  /// The calling thread's shard: counter i is element i.
  [[nodiscard]] std::atomic<std::uint64_t>* local() noexcept { return data_ + shard() * stride_; }

 private:
  static constexpr std::size_t line = 64;
  [[nodiscard]] std::size_t shard() const noexcept;
  std::size_t stride_;  ///< counters per shard, rounded up to whole cache lines
  std::size_t mask_;    ///< shards - 1
  std::size_t size_;    ///< stride_ * shards
  std::atomic<std::uint64_t>* data_;  ///< one 64-byte aligned block
};

}  // namespace detail

/// An Observer that turns events into metrics under Kevlar's instrument names and tags:
///
/// | instrument | kind | unit | tags |
/// |---|---|---|---|
/// | kevlar.executions | counter | {execution} | name*, kevlar.execution.outcome |
/// | kevlar.execution.duration | histogram | s | name*, kevlar.execution.outcome |
/// | kevlar.retries | counter | {retry} | name* |
/// | kevlar.timeouts | counter | {timeout} | name* |
/// | kevlar.fallbacks | counter | {fallback} | name* |
/// | kevlar.hedges | counter | {hedge} | name* |
/// | kevlar.rejections | counter | {rejection} | name*, kevlar.rejection.type |
/// | kevlar.circuit_breaker.transitions | counter | {transition} | ...state.from, ...state.to |
/// | kevlar.circuit_breaker.state | gauge | {state} | name*, kevlar.strategy.index |
/// | kevlar.concurrency_limit.inflight / .queued / .capacity | gauge | {execution} | same |
/// | kevlar.concurrency_limit.limit (adaptive only) | gauge | {execution} | same |
/// | kevlar.concurrency_limit.samples (adaptive only) | counter | {sample} | same, kevlar.sample.kind |
/// | kevlar.rate_limit.available / .queued | gauge | {permit} / {execution} | same |
/// | kevlar.chaos.injections | counter | {injection} | name*, kevlar.chaos.kind, kevlar.chaos.operation**, kevlar.chaos.environment** |
///
/// (** only when the execution's chaos scope has one.)
///
/// (* kevlar.shield.name, only for a named shield.) Counting: one kevlar.executions per public
/// call (a fallback's recovery is a success; retries add none), one count per decision event.
/// Gauges are read from the strategies themselves when the snapshot is taken (so a breaker shared
/// by several shields shows its current state under each); the observer keeps only weak
/// references to them.
///
/// Recording allocates nothing and takes no lock: counters are sharded per thread, the histogram
/// has fixed buckets. A shield's first event (ShieldInfo) allocates its series once. Chaos
/// injections are the exception, deliberate and rare: they are counted under a mutex, and the
/// first injection of each (name, kind, operation, environment) allocates its series.
/// Thread-safety: on_event, on_shield and snapshot may run concurrently from any threads.
struct ChaosInjected;

class MetricsObserver final : public Observer {
 public:
  /// Throws std::invalid_argument naming the option for invalid `options`.
  explicit MetricsObserver(MetricsOptions options = {});
  ~MetricsObserver() override;
  MetricsObserver(const MetricsObserver&) = delete;
  MetricsObserver& operator=(const MetricsObserver&) = delete;

  /// Counts `event` on the calling thread's shard (a relaxed add; the duration also a bucket
  /// search). No lock, no allocation except creating the series of a shield seen for the first time
  /// without an announcement. Thread-safe.
  void on_event(const Event& event) noexcept override;
  /// Registers the shield's series and gauges; its events then find their series directly.
  void on_shield(ShieldInfo& shield) override;
  /// Executions, retries, timeouts, fallbacks, rejections, breaker transitions and chaos
  /// injections: attempts and
  /// limiter accounting are not needed (gauges are read from the strategies), so an observed
  /// shield does not build them.
  [[nodiscard]] EventKinds interests() const override;

  /// Every series, summed over the shards; gauges read now. Allocates; takes the gauge lock.
  [[nodiscard]] MetricsSnapshot snapshot() const;

  [[nodiscard]] const MetricsOptions& options() const noexcept { return options_; }

 private:
  struct Group;
  struct Gauge;
  /// The series group of a shield name, created on first use (never removed); nullptr only when
  /// creating it failed for lack of memory (the event is then not counted).
  Group* group(const std::string* name) noexcept;
  [[nodiscard]] Group* find_group(const std::string* name) const noexcept;
  Group& add_group(const std::string* name);
  static std::size_t validated_shards(const MetricsOptions& options);
  void count_injection(const std::string* shield_name, const ChaosInjected& c) noexcept;

  /// The kevlar.chaos.injections series of one shield name, kind, operation and environment.
  struct ChaosSeries {
    std::optional<std::string> name;
    std::size_t kind = 0;
    std::string operation;
    std::string environment;
    std::uint64_t count = 0;
  };

  MetricsOptions options_;
  std::vector<std::int64_t> bounds_ns_;  ///< duration_buckets in Clock ticks
  std::size_t shards_;
  std::atomic<Group*> groups_{nullptr};  ///< append-only list, newest first
  std::mutex groups_mutex_;              ///< serialises appends
  detail::ShardedCounters transitions_;  ///< from * 4 + to
  mutable std::mutex gauges_mutex_;
  mutable std::vector<Gauge> gauges_;
  mutable std::mutex chaos_mutex_;
  std::vector<ChaosSeries> chaos_;
};

}  // namespace kevlar
