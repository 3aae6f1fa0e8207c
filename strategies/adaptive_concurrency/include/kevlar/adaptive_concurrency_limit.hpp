// kevlar — the adaptive concurrency limit: a concurrency limit whose maximum follows the
// dependency's measured latency and drops (AIMD, Vegas or a gradient), window by window.
#pragma once

#include <kevlar/adaptive_limit.hpp>
#include <kevlar/clause.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace kevlar {

/// An adaptive concurrency limit moved its maximum at the end of a sampling window. An event
/// (Layer::emit, Observer), emitted through the shield whose execution closed the window.
struct LimitChanged {
  static constexpr std::string_view kevlar_event = "LimitChanged";
  std::uint32_t old_limit = 0;
  std::uint32_t new_limit = 0;
  LimitChangeReason reason = LimitChangeReason::healthy;
  Clock::duration average_rtt{};  ///< the window's mean round-trip time (0: no measured sample)
  std::uint32_t samples = 0;      ///< measured samples in the window
  std::uint32_t dropped = 0;      ///< dropped samples in the window
};

/// Options of Shield::adaptive_concurrency_limit. Bounds and window follow Kevlar's (.NET)
/// adaptive limit (initial 10 in [1, 100], 1 s windows); the minimum sample count per window
/// follows Netflix's WindowedLimit (10).
struct AdaptiveLimitOptions {
  /// The algorithm and its options: AimdOptions (default), VegasOptions or GradientOptions.
  std::variant<AimdOptions, VegasOptions, GradientOptions> algorithm = AimdOptions{};
  /// A custom algorithm instead (called once, by the constructor); must not return null.
  std::function<std::unique_ptr<LimitAlgorithm>()> custom_algorithm;
  /// Starting limit, in [min_limit, max_limit]. Default 10.
  int initial_limit = 10;
  /// Floor of the limit (positive). Default 1.
  int min_limit = 1;
  /// Ceiling of the limit (at least min_limit, at most 2^30 - 1). Default 100.
  int max_limit = 100;
  /// Calls allowed to wait for a permit, as ConcurrencyLimitOptions::max_queue. Default 0.
  int max_queue = 0;
  /// Sampling window: the limit moves at most once per window, by the first completion after its
  /// end. At least 1 ms. Default 1 s.
  Clock::duration window = std::chrono::seconds(1);
  /// Samples (measured and dropped) a window needs before it closes; a window with fewer keeps
  /// collecting past its end. At least 1. Default 10.
  int min_window_samples = 10;
  /// Times one call in this many, drawn at random (a power of two, 1 to 1024); the others are
  /// admitted and released without reading the clock. Drops and ignored outcomes are counted on
  /// every call. 1 (default) times every call; at thousands of calls per second per thread, 8 or
  /// 16 keep each window well fed and take the clock off most calls' path.
  int sample_one_in = 1;
  /// Outcomes that mean the dependency is overloaded (dropped samples), beside the built-in ones:
  /// kevlar timeouts, rate limit and concurrency limit rejections and an open or isolated circuit
  /// further in.
  /// E.g. `Clause().result<Response>([](auto& r) { return r.status == 503 || r.status == 429; })`.
  std::optional<Clause> dropped;
  /// Outcomes that say nothing about the dependency (ignored samples), beside the caller's
  /// cancellation and kevlar's own errors other than overload (`errc::closed`, misuse). Tested
  /// first; then `dropped`; the cancellation is ignored unless `dropped` names it.
  std::optional<Clause> ignored;
  /// Called after each change of the limit, by the thread whose completion closed the window,
  /// after the limiter was resized; two changes close together may be reported concurrently and
  /// out of order (LimitChange::new_limit of the last call is not always limit()). Exceptions it
  /// throws are swallowed.
  std::function<void(const LimitChanged&)> on_limit_changed;
  /// As ConcurrencyLimitOptions::on_rejected: a function, or a coroutine the limit awaits.
  Hook<void(const ConcurrencyLimitRejectedEvent&)> on_rejected;
};

namespace detail {

/// An adaptive limiter's per-execution state: the static limiter's frame first (its rejection
/// path finds it at the frame's address), then when and at what load the call started.
struct AdaptiveLimiterFrame {
  LimiterFrame base;
  Clock::time_point started{};
  std::uint32_t in_flight = 0;
  bool timed = false;  ///< started and in_flight were taken (see sample_one_in)
};

/// The sampling draw of adaptive limiters on this thread (xorshift32; 0 until first used): each
/// admitted call draws, and a call is timed when the draw's low bits are zero. A draw, not a
/// stride, so that limiters called in a fixed interleaving (nested, or alternating on one thread)
/// are each timed one call in N.
inline thread_local std::uint32_t adaptive_limit_draw = 0;
[[gnu::cold]] std::uint32_t seed_adaptive_limit_draw() noexcept;
inline std::uint32_t next_adaptive_limit_draw() noexcept {
  std::uint32_t x = adaptive_limit_draw;
  if (x == 0) [[unlikely]] x = seed_adaptive_limit_draw();
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  adaptive_limit_draw = x;
  return x;
}

}  // namespace detail

/// A concurrency limit whose maximum moves by itself: every completed call is a sample (its
/// round-trip time and the in-flight count at its start; dropped for overload; ignored for the
/// caller's cancellation), samples gather in windows, and at a window's end one completing call
/// (under a try-lock, never on the admission path) hands the window to the algorithm and resizes
/// the limiter (ConcurrencyLimitStrategy::set_max_concurrency: growth grants queued calls, a
/// shrink retires permits as they return). Everything else is the static concurrency limit's:
/// lock-free admission, a FIFO queue of max_queue, `errc::concurrency_limit_exceeded`,
/// cancellation and close().
///
/// The round-trip time runs from the permit's grant to the inner part's completion (queueing
/// here is not the dependency's latency). Place timeouts inside this strategy so that their
/// `errc::timeout` counts as a drop; a timeout outside it cancels the call, which is ignored.
///
/// One instance is one set of permits, shared by every shield containing it (stateful; once per
/// chain). Thread-safety: any number of concurrent executions, on any threads and executors.
class AdaptiveConcurrencyLimitStrategy final
    : public BasicStrategy<AdaptiveConcurrencyLimitStrategy, detail::AdaptiveLimiterFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option). Samples and windows are
  /// timed on the executions' clock (Shield::with_clock; a ManualClock in tests): the first window
  /// starts with the first completion.
  explicit AdaptiveConcurrencyLimitStrategy(AdaptiveLimitOptions options);
  /// Creates a limiter to add with Shield::use (keep the pointer to observe or close it).
  [[nodiscard]] static std::shared_ptr<AdaptiveConcurrencyLimitStrategy> create(
      AdaptiveLimitOptions options) {
    return std::make_shared<AdaptiveConcurrencyLimitStrategy>(std::move(options));
  }

  [[nodiscard]] std::string describe() const override;
  /// Proactive and stateful (one instance per chain).
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept { return limiter_.strategy_traits(); }
  /// As ConcurrencyLimitStrategy::start; a call that gets a permit starts its sample.
  Step start(Layer& layer, Frame& f) {
    const Step step = limiter_.start(layer, f.base);
    if (step == Step::run_inner) stamp(layer, f);
    return step;
  }
  /// Records the sample, returns the permit, and closes the window if it is due.
  Step inner_complete(Layer& layer, Frame& f) {
    const bool plain = !judges_results_ && !layer.outcome().failed();
    if (!f.timed) [[unlikely]] {  // not timed (sample_one_in): only a drop or an ignore counts
      if (!plain) record_untimed(layer);
      return limiter_.inner_complete(layer, f.base);
    }
    const Clock::time_point now = layer.clock().now();
    const LimitSample kind = plain ? LimitSample::success : classify(layer);
    controller_.record(kind, now - f.started, f.in_flight);
    const Step step = limiter_.inner_complete(layer, f.base);
    if (controller_.due(now)) [[unlikely]] close_window(layer, now);
    return step;
  }
  /// As ConcurrencyLimitStrategy::wait_complete; a granted call starts its sample.
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec) {
    const Step step = limiter_.wait_complete(layer, f.base, ec);
    if (step == Step::run_inner) stamp(layer, f);
    return step;
  }

  /// The limit in force. Thread-safe.
  [[nodiscard]] std::uint32_t limit() const noexcept { return controller_.limit(); }
  /// {running, queued, available, closed}, as ConcurrencyLimitStrategy::state(). Thread-safe.
  [[nodiscard]] ConcurrencyLimitState state() const noexcept { return limiter_.state(); }
  /// The windowed controller (totals by sample kind, windows closed, the algorithm).
  [[nodiscard]] const AdaptiveLimitController& controller() const noexcept { return controller_; }
  /// The static limiter underneath, whose maximum the controller moves.
  [[nodiscard]] const ConcurrencyLimitStrategy& limiter() const noexcept { return limiter_; }
  /// Fails every queued call with `errc::closed` and refuses new ones. Thread-safe, idempotent.
  void close() noexcept { limiter_.close(); }
  [[nodiscard]] const AdaptiveLimitOptions& options() const noexcept { return options_; }

 private:
  void stamp(Layer& layer, Frame& f) const noexcept {
    if (sample_mask_ != 0 && (detail::next_adaptive_limit_draw() & sample_mask_) != 0) return;
    f.timed = true;
    f.started = layer.clock().now();
    f.in_flight = limiter_.state().running;
  }
  /// A call that was not timed failed (or a clause judges results): counts a drop or an ignore.
  void record_untimed(Layer& layer) noexcept;
  /// The outcome's sample kind when a clause must be asked or the call failed. Out of line.
  LimitSample classify(Layer& layer) const noexcept;
  /// The window is due: close it, resize, report. Out of line.
  void close_window(Layer& layer, Clock::time_point now) noexcept;

  AdaptiveLimitOptions options_;
  bool judges_results_;
  std::uint32_t sample_mask_;  ///< sample_one_in - 1
  AdaptiveLimitController controller_;  // first: it validates the bounds the limiter starts with
  ConcurrencyLimitStrategy limiter_;
};

/// An adaptive concurrency limit configured by `options` (std::invalid_argument names an invalid
/// option). Add it with BasicShield::use, or with kevlar::Shield::adaptive_concurrency_limit.
[[nodiscard]] std::shared_ptr<AdaptiveConcurrencyLimitStrategy> adaptive_concurrency_limit(
    AdaptiveLimitOptions options = {});

}  // namespace kevlar
