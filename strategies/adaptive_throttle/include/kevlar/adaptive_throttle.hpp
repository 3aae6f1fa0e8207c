// kevlar — client-side adaptive throttling: rejects a share of calls locally, with a probability
// that grows as the dependency refuses more of recent requests (the Google SRE book's formula,
// with Envoy's admission-control refinements).
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/strategy.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kevlar {

/// An adaptive throttle rejected a call locally (with `errc::throttled`). An event (Layer::emit,
/// Observer), emitted after the Rejected event of kind RejectionKind::throttle and before the
/// on_throttled hook. The counts are those of the window the decision was taken on, before the
/// rejected call was counted.
struct Throttled {
  static constexpr std::string_view kevlar_event = "Throttled";
  double probability = 0;      ///< the rejection probability in force
  std::uint64_t requests = 0;  ///< requests counted in the window
  std::uint64_t accepts = 0;   ///< of them, the calls the dependency accepted
};

/// What AdaptiveThrottleOptions::on_throttled receives for each local rejection.
struct ThrottleEvent {
  double probability = 0;          ///< the rejection probability in force
  std::uint64_t requests = 0;      ///< requests counted in the window (as Throttled::requests)
  std::uint64_t accepts = 0;       ///< accepts counted in the window (as Throttled::accepts)
  std::size_t strategy_index = 0;  ///< position of the throttle in the pipeline (0: outermost)
  Context& context;                ///< the rejected execution's context (do not keep it)
};

/// What an adaptive throttle counts over its window, and the rejection probability those counts
/// give (AdaptiveThrottleStrategy::snapshot).
struct AdaptiveThrottleSnapshot {
  std::uint64_t requests = 0;  ///< calls that reached the throttle, rejected ones included
  std::uint64_t accepts = 0;   ///< calls whose outcome the clause in force did not handle
  double probability = 0;      ///< the probability a call arriving now is rejected
};

/// Options of Shield::adaptive_throttle. The multiplier and the window follow the Google SRE
/// book's client-side throttling (K = 2 over two minutes); aggression, the rejection cap and the
/// traffic threshold are Envoy's admission-control refinements, the cap's default (0.9) is
/// failsafe-go's.
struct AdaptiveThrottleOptions {
  /// K: how many requests per accepted one the throttle lets through before it rejects any. The
  /// lowest success ratio that is never throttled is 1/K. Finite, at least 1. Default 2.
  double multiplier = 2.0;
  /// The sliding window over which requests and accepts are counted, from 1 s to 1 h. Default
  /// 2 minutes.
  Clock::duration window = std::chrono::minutes(2);
  /// The window is a ring of this many buckets of `window / buckets`, each forgotten as a whole
  /// when the clock leaves the window; 1 to 1000. Default 20 (6 s buckets).
  int buckets = 20;
  /// The exponent's inverse: p = x^(1 / aggression). 1 rises linearly with the refused share;
  /// more throttles harder at the same share. Finite, at least 1. Default 1.
  double aggression = 1.0;
  /// The largest rejection probability, in (0, 1]: some calls always go through, so that the
  /// throttle sees the dependency recover. Default 0.9.
  double max_rejection_probability = 0.9;
  /// While the window's requests per second (requests / window) are below this, nothing is
  /// rejected: a handful of failures at low traffic does not throttle. Finite, 0 or more.
  /// Default 0.
  double min_requests_per_second = 0;
  /// The outcomes the dependency refused (not accepted), instead of the ambient clause
  /// (Shield::when) in force where the throttle is added. E.g.
  /// `Clause().result<Response>([](auto& r) { return r.status == 503 || r.status == 429; })`.
  /// Unset: the ambient clause.
  std::optional<Clause> handles;
  /// The random source of the decision: returns a number in [0, 1); a call is rejected when it is
  /// below the rejection probability. Called only while the probability is above 0, from any
  /// thread that executes through the throttle (so it must be thread-safe). Unset (the default): a
  /// per-thread xorshift generator. For deterministic tests.
  std::function<double()> random;
  /// Called for each local rejection, on the rejected call's thread, after the Rejected and
  /// Throttled events. An exception it throws replaces the rejection as the call's outcome.
  std::function<void(const ThrottleEvent&)> on_throttled;
};

namespace detail {

/// An adaptive throttle's counts: requests and accepts over a sliding window kept as a ring of
/// buckets on the clock's timeline. Bucket `e` covers [e * width, (e + 1) * width), with `width`
/// the window divided by the number of buckets `B` (in whole nanoseconds); the window as of a time
/// point is that time point's bucket and the `B - 1` before it. The ring has `R` slots, `B` rounded
/// up to a power of two (so that no division is needed to place a bucket): bucket `e` lives in
/// slot `e mod R`, where it replaces bucket `e - R`.
///
/// Each slot holds two 64-bit words, one per count: the count in the low 32 bits, and in the high
/// 32 bits the generation of the bucket it belongs to (`floor(e / R)`, the number of whole rings
/// before it, modulo 2^32). Whoever first writes a slot's word in a new generation (or finds it
/// empty) resets it with a compare-and-swap: no lock, no allocation, and a count is never lost to
/// a reset (a writer that loses the race adds to the new bucket). A stale word is recognised by its
/// generation, so nothing sweeps the ring: a word left untouched for 2^32 rings (136 years of 1 s
/// windows) is the only one that could be mistaken for a current one. A writer whose reading of
/// the clock is a whole ring behind the word it writes counts in the word's newer bucket (time
/// never moves a count backwards). Each count saturates at 2^32 - 1 per bucket.
///
/// Reading the window costs a pass over its B slots (counts()). The strategy's decisions read it
/// through recent() instead: the current bucket's words, plus the sums of the B - 1 buckets before
/// it as the first reader in the current bucket found them, remembered under a version number
/// (a seqlock whose readers never wait: one that finds it being written, or remembering another
/// bucket, makes the pass itself). Those buckets are closed, so the sums stay exact but for what
/// is written to a closed bucket later, which recent() sees only from the next bucket on: a
/// request taken back (remove_request) after its bucket closed, or a writer whose reading of the
/// clock lagged the bucket's end.
///
/// Thread-safety: every member may be called from any thread at once. Counts are relaxed atomics:
/// a reader sees each word as some writer left it, so a snapshot taken while calls are counted
/// may include a request without its accept (or, across bucket ends, an accept without its
/// request).
class ThrottleWindow {
 public:
  /// The window's two sums.
  struct Counts {
    std::uint64_t requests = 0;  ///< requests counted in the window
    std::uint64_t accepts = 0;   ///< accepts counted in the window
  };
  /// Where a time point falls: its bucket, that bucket's slot and its generation's tag.
  struct Position {
    std::int64_t bucket = 0;  ///< floor(t / width)
    std::uint32_t slot = 0;   ///< bucket mod R
    std::uint32_t tag = 0;    ///< floor(bucket / R), modulo 2^32
  };

  /// An empty window of `buckets` (1 .. 1000) buckets of `window / buckets` each (`window` of
  /// at least one nanosecond per bucket). Allocates the ring once.
  ThrottleWindow(Clock::duration window, int buckets);
  ThrottleWindow(const ThrottleWindow&) = delete;
  ThrottleWindow& operator=(const ThrottleWindow&) = delete;

  /// The bucket of `t`, its slot and tag. The last bucket found is remembered, so that the common
  /// case (a time in it) is a multiplication and a compare, not a division.
  [[nodiscard]] Position position(Clock::time_point t) const noexcept {
    const std::int64_t n = t.time_since_epoch().count();
    std::int64_t b = closed_.last_bucket.load(std::memory_order_relaxed);
    std::int64_t start = 0;
    std::int64_t offset = 0;
    // Checked: a time far from the remembered bucket (the ends of the range) overflows here and
    // takes the division.
    if (__builtin_mul_overflow(b, width_, &start) || __builtin_sub_overflow(n, start, &offset) ||
        static_cast<std::uint64_t>(offset) >= static_cast<std::uint64_t>(width_)) [[unlikely]] {
      b = bucket_of(t);
      closed_.last_bucket.store(b, std::memory_order_relaxed);
    }
    return {b, static_cast<std::uint32_t>(static_cast<std::uint64_t>(b) & mask_),
            static_cast<std::uint32_t>(b >> shift_)};
  }

  /// Counts a request in `at`'s bucket; returns the bucket it was counted in (for remove_request).
  std::int64_t add_request(const Position& at) noexcept { return add(at, &Slot::requests); }
  /// Counts a request at `now`; returns the bucket it was counted in.
  std::int64_t add_request(Clock::time_point now) noexcept { return add_request(position(now)); }
  /// Counts an accept at `now`.
  void add_accept(Clock::time_point now) noexcept { (void)add(position(now), &Slot::accepts); }
  /// Counts an accept in `bucket`, the bucket its request was counted in (add_request's result):
  /// nothing if a newer bucket owns that slot already (the request has expired with it).
  void add_accept_in(std::int64_t bucket) noexcept;
  /// Takes back a request counted in bucket `bucket` (add_request's result), unless that bucket
  /// has left the ring since.
  void remove_request(std::int64_t bucket) noexcept;
  /// The sums of the window as of `at`: its bucket and the `B - 1` before it, read now (a pass
  /// over B slots). Buckets later than `at`'s (written by a thread whose clock read later) are
  /// left out.
  [[nodiscard]] Counts counts(const Position& at) const noexcept;
  /// The sums of the window as of `at` as a decision reads them: `at`'s bucket read now, and the
  /// remembered sums of the buckets before it (see the class comment); the first call in a bucket
  /// makes the pass and remembers it. Lock-free; a few loads when the sums are remembered.
  [[nodiscard]] Counts recent(const Position& at) const noexcept {
    const Slot& here = slots_[at.slot];
    const std::uint64_t want = static_cast<std::uint64_t>(at.tag) << 32;
    const std::uint64_t r = here.requests.load(std::memory_order_relaxed) ^ want;
    const std::uint64_t a = here.accepts.load(std::memory_order_relaxed) ^ want;
    Counts c{r <= count_mask ? r : 0, a <= count_mask ? a : 0};
    // A seqlock's read: the version, the sums (acquire loads, so that the version's second read
    // cannot move above them), the version again.
    const std::uint64_t version = closed_.version.load(std::memory_order_acquire);
    const std::int64_t bucket = closed_.bucket.load(std::memory_order_acquire);
    const std::uint64_t requests = closed_.requests.load(std::memory_order_acquire);
    const std::uint64_t accepts = closed_.accepts.load(std::memory_order_acquire);
    if (bucket == at.bucket && (version & 1) == 0 &&
        closed_.version.load(std::memory_order_relaxed) == version) [[likely]] {
      c.requests += requests;
      c.accepts += accepts;
      return c;
    }
    const Counts before = remember(at, version, bucket);
    c.requests += before.requests;
    c.accepts += before.accepts;
    return c;
  }
  /// The sums of the window as of `now`.
  [[nodiscard]] Counts counts(Clock::time_point now) const noexcept {
    return counts(position(now));
  }

  /// The length of a bucket.
  [[nodiscard]] Clock::duration bucket_width() const noexcept { return Clock::duration(width_); }
  /// The number of buckets in the window (B).
  [[nodiscard]] std::uint32_t buckets() const noexcept { return size_; }
  /// The number of slots in the ring (R: B rounded up to a power of two).
  [[nodiscard]] std::uint32_t slots() const noexcept { return mask_ + 1; }
  /// The window as counted: buckets() x bucket_width().
  [[nodiscard]] Clock::duration length() const noexcept {
    return Clock::duration(width_ * static_cast<std::int64_t>(size_));
  }

 private:
  /// One slot of the ring: a tagged word per count.
  struct Slot {
    std::atomic<std::uint64_t> requests{0};  ///< tag << 32 | requests
    std::atomic<std::uint64_t> accepts{0};   ///< tag << 32 | accepts
  };
  static constexpr std::uint64_t count_mask = 0xFFFF'FFFFu;
  /// Counts below this are incremented with one fetch_add; from it on, a CAS loop saturates them.
  static constexpr std::uint64_t fast_limit = std::uint64_t{1} << 31;

  /// floor(t / width): the division position() avoids.
  [[nodiscard]] std::int64_t bucket_of(Clock::time_point t) const noexcept {
    const std::int64_t n = t.time_since_epoch().count();
    return n / width_ - (n % width_ < 0 ? 1 : 0);
  }
  /// Counts one in the word `member` of `at`'s slot; returns the bucket it was counted in.
  std::int64_t add(const Position& at, std::atomic<std::uint64_t> Slot::*member) noexcept;
  /// recent() past its remembered sums: the pass over the buckets before `at`'s, remembered if
  /// `at`'s bucket is later than the one remembered (`bucket`, read at `version`) and nobody is
  /// writing. Out of line: once per bucket.
  [[gnu::noinline]] Counts remember(const Position& at, std::uint64_t version,
                                    std::int64_t bucket) const noexcept;

  /// The remembered sums of the buckets before `bucket` in the window, and the bucket position()
  /// found last: one cache line, read by every call and written about once per bucket.
  struct alignas(64) Remembered {
    std::atomic<std::uint64_t> version{0};  ///< odd while a reader writes the sums
    std::atomic<std::int64_t> bucket{std::numeric_limits<std::int64_t>::min()};  ///< none yet
    std::atomic<std::uint64_t> requests{0};    ///< requests in the buckets before `bucket`
    std::atomic<std::uint64_t> accepts{0};     ///< accepts in the buckets before `bucket`
    std::atomic<std::int64_t> last_bucket{0};  ///< position()'s
  };

  std::int64_t width_;  ///< nanoseconds per bucket
  std::uint32_t size_;  ///< B: buckets in the window
  std::uint32_t mask_;  ///< R - 1
  unsigned shift_;      ///< log2(R)
  mutable Remembered closed_;
  std::unique_ptr<Slot[]> slots_;
};

/// An adaptive throttle's per-execution state: where the call's request was counted, and whether
/// its inner part is still running (so that an abandoned execution takes its request back).
struct ThrottleFrame {
  std::int64_t bucket = 0;  ///< ThrottleWindow::add_request's result
  bool running = false;     ///< the inner part runs; its completion has not been counted yet
};

/// The default random source of adaptive throttles: a per-thread xorshift generator (seeded from
/// a process-wide Weyl sequence the first time a thread draws), in [0, 1).
[[nodiscard]] double next_throttle_draw() noexcept;

}  // namespace detail

/// Client-side adaptive throttling (the Google SRE book's, with Envoy's admission-control
/// refinements): every call that reaches the strategy is a request, counted before it is sent
/// (rejected ones included); a call whose outcome the clause in force does not handle is an
/// accept. A new call is rejected locally, without running the inner part, with probability
///
///     p = min(max_rejection_probability,
///             max(0, (requests - multiplier * accepts) / (requests + 1)) ^ (1 / aggression))
///
/// from the counts of the sliding window before it, and p = 0 while the window's requests per
/// second are below min_requests_per_second. A rejection completes the call with
/// `errc::throttled` (no retry-after): the Rejected event (RejectionKind::throttle: the metrics'
/// rejections count it), the Throttled event, then on_throttled, whose exception replaces the
/// rejection. A throttle that rejects keeps counting its rejections as requests, so the
/// probability keeps rising while the dependency accepts nothing, up to the cap; the calls still
/// let through find out when it recovers.
///
/// What counts as an accept, when the inner part completes (in the bucket of that moment), in this
/// order: a local refusal further in that never reached the dependency (`errc::circuit_open`,
/// `isolated`, `rate_limited`, `concurrency_limit_exceeded`, `throttled`, `queue_timeout`,
/// `closed`) takes the request back, neither accepted nor refused; an outcome the clause handles
/// (the dependency failed or refused it: an error, a timeout further in, an HTTP 503 or 429 a
/// result clause names) is no accept; the caller's cancellation (an unhandled cancellation, or
/// any unhandled failure after the caller, an outer timeout or a hedge cancelled the call) and a
/// clause's predicate that throws take the request back; anything else is an accept. An execution
/// abandoned before its inner part completed (its executor was destroyed) takes its request back.
///
/// Works in synchronous (Shield::execute), callback and coroutine executions: start() decides,
/// inner_complete() counts; it never waits, adds no hop and allocates nothing per call (the ring
/// is allocated once). A decision reads the clock (Clock::coarse_now) and the window through
/// ThrottleWindow::recent(): the current bucket, and the sums of the closed buckets remembered
/// once per bucket; a completion reads the clock again and counts with one atomic addition.
///
/// One instance is one window, shared by every shield containing it (stateful; once per chain);
/// the shields should use one clock. Thread-safety: any number of concurrent executions, on any
/// threads; the counts are lock-free atomics (see detail::ThrottleWindow), and every const member
/// may be called from anywhere.
class AdaptiveThrottleStrategy final
    : public BasicStrategy<AdaptiveThrottleStrategy, detail::ThrottleFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option). The window runs on the
  /// executions' clock (Shield::with_clock; a ManualClock in tests), read with
  /// Clock::coarse_now().
  explicit AdaptiveThrottleStrategy(AdaptiveThrottleOptions options);
  /// Creates a throttle to add with Shield::use (keep the pointer to read its counts).
  [[nodiscard]] static std::shared_ptr<AdaptiveThrottleStrategy> create(
      AdaptiveThrottleOptions options = {}) {
    return std::make_shared<AdaptiveThrottleStrategy>(std::move(options));
  }

  /// `AdaptiveThrottle(K=2, 2m)`, then `, buckets N`, `, aggression A`, `, max P` and
  /// `, min R/s` for the options that differ from their defaults.
  [[nodiscard]] std::string describe() const override;
  // BasicStrategy's callbacks, called by the engine on the execution's thread.
  /// Reactive (judges outcomes with the clause in force where it was added, or its own) and
  /// stateful (one instance per chain).
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Counts the request and admits the call (Step::run_inner) or rejects it with
  /// `errc::throttled` (Step::complete).
  Step start(Layer& layer, Frame& f) {
    const detail::ThrottleWindow::Position at = window_.position(layer.clock().coarse_now());
    const detail::ThrottleWindow::Counts c = window_.recent(at);
    f.bucket = window_.add_request(at);
    const double p = probability(c);
    if (p > 0 && draw() < p) [[unlikely]] {
      return reject(layer, p, c);
    }
    f.running = true;
    return Step::run_inner;
  }
  /// Counts the outcome: an accept, nothing (a refusal), or the request taken back (a local
  /// refusal further in, the caller's cancellation). The outcome passes on unchanged (unless a
  /// clause's predicate throws: then its exception).
  Step inner_complete(Layer& layer, Frame& f) {
    f.running = false;
    if (layer.plain_success()) [[likely]] {
      window_.add_accept_in(f.bucket);  // no clock read: the request's bucket
      return Step::complete;
    }
    return judge(layer, f);
  }
  /// An execution abandoned while its inner part ran takes its request back.
  void finish(Layer& /*layer*/, Frame& f) noexcept {
    if (f.running) [[unlikely]] {
      window_.remove_request(f.bucket);
    }
  }

  /// The probability that a call arriving at `now` (a reading of the shields' clock) is rejected,
  /// from the window as of `now`: the formula above, 0 below min_requests_per_second. Sans-I/O,
  /// from a pass over every bucket of the window (a decision reads the closed buckets' sums as
  /// remembered at the current bucket's start: see detail::ThrottleWindow). Thread-safe.
  [[nodiscard]] double rejection_probability(Clock::time_point now) const noexcept {
    return probability(window_.counts(now));
  }
  /// The window's counts as of `now`, and the probability they give (as rejection_probability).
  /// Thread-safe.
  [[nodiscard]] AdaptiveThrottleSnapshot snapshot(Clock::time_point now) const noexcept;
  /// snapshot() at `clock.coarse_now()`: pass the clock of the shields the throttle serves (the
  /// steady clock by default). Thread-safe.
  [[nodiscard]] AdaptiveThrottleSnapshot snapshot(
      const Clock& clock = *Clock::steady()) const noexcept {
    return snapshot(clock.coarse_now());
  }
  /// The formula alone, for given counts: min(cap, max(0, (requests - K x accepts) / (requests +
  /// 1)) ^ (1 / aggression)), without the traffic threshold. Thread-safe.
  [[nodiscard]] double probability_of(std::uint64_t requests, std::uint64_t accepts) const noexcept;
  /// The options it was built with.
  [[nodiscard]] const AdaptiveThrottleOptions& options() const noexcept { return options_; }
  /// The window the counts are kept in (its bucket width and length as counted).
  [[nodiscard]] const detail::ThrottleWindow& window() const noexcept { return window_; }

 private:
  /// The probability for the window's counts `c`, the traffic threshold included. Inline: the
  /// common answer (more than 1/K of the requests accepted) is a multiply and a compare.
  [[nodiscard]] double probability(const detail::ThrottleWindow::Counts& c) const noexcept {
    const double requests = static_cast<double>(c.requests);
    if (requests <= options_.multiplier * static_cast<double>(c.accepts)) [[likely]] {
      return 0;
    }
    if (requests < min_requests_) return 0;
    return probability_of(c.requests, c.accepts);
  }
  /// A number in [0, 1): options_.random, or the per-thread generator.
  [[nodiscard]] double draw() const {
    return options_.random ? options_.random() : detail::next_throttle_draw();
  }
  /// The call is rejected: events, hook, `errc::throttled`. Out of line.
  [[gnu::noinline]] Step reject(Layer& layer, double p, const detail::ThrottleWindow::Counts& c);
  /// inner_complete past a plain success: asks the clause, counts what it says. Out of line.
  [[gnu::noinline]] Step judge(Layer& layer, Frame& f);

  AdaptiveThrottleOptions options_;
  double inverse_aggression_;                 ///< 1 / aggression
  double min_requests_;                       ///< min_requests_per_second x the window in seconds
  std::shared_ptr<const Clause> own_clause_;  ///< options_.handles, shared with the pipeline
  detail::ThrottleWindow window_;
};

/// An adaptive throttle configured by `options` (std::invalid_argument names an invalid option).
/// Add it with BasicShield::use, or with kevlar::Shield::adaptive_throttle; keep the pointer to
/// read its counts.
[[nodiscard]] std::shared_ptr<AdaptiveThrottleStrategy> adaptive_throttle(
    AdaptiveThrottleOptions options = {});

}  // namespace kevlar
