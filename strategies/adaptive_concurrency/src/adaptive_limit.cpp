#include <kevlar/adaptive_limit.hpp>
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/duration_format.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kevlar {
namespace {

[[noreturn]] void invalid(const char* owner, const char* name, const char* rule, double got) {
  std::ostringstream msg;
  msg << "kevlar::" << owner << "::" << name << " must be " << rule << " (got " << got << ")";
  throw std::invalid_argument(msg.str());
}

void check_range(const char* owner, const char* name, double v, double lo, bool lo_open, double hi,
                 bool hi_open, const char* rule) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok) invalid(owner, name, rule, v);
}

constexpr double inf = std::numeric_limits<double>::infinity();

double ns(Clock::duration d) noexcept { return static_cast<double>(d.count()); }

/// Netflix's lg(L) for Vegas's thresholds: max(1, floor(log10 L)).
double lg(double limit) noexcept { return std::max(1.0, std::floor(std::log10(std::max(limit, 1.0)))); }

// The floor rule, shared by AIMD and the gradient: at the floor there is nothing left to shed, so
// latency that stays high there for `needed` congested windows in a row is the dependency's own
// and replaces the baseline; the replaced one is kept (the lower of two), and comes back at the
// first window as fast as it allowed.

/// Counts a congested window (at the floor or not) and says whether the baseline is to be
/// replaced now: `needed` of them in a row at the floor (0: never), and `allowed`.
bool floor_reached(int& streak, int needed, double limit, double min_limit, bool allowed) noexcept {
  streak = limit <= min_limit + 0.5 ? streak + 1 : 0;
  if (needed == 0 || streak < needed || !allowed) return false;
  streak = 0;
  return true;
}

/// Keeps `baseline` as the one to restore (the lower, when one is kept already).
void keep_replaced(double& kept, double baseline) noexcept {
  kept = kept > 0 ? std::min(kept, baseline) : baseline;
}

/// Restores the kept baseline once `rtt` is within `tolerance` of it; true if it did.
bool restore_replaced(double& kept, double& baseline, double rtt, double tolerance) noexcept {
  if (kept == 0 || rtt > tolerance * kept) return false;
  baseline = std::min(baseline, kept);  // the slow spell is over
  kept = 0;
  return true;
}

std::string format(const char* name, std::initializer_list<double> values) {
  std::ostringstream out;
  out << name << '(';
  bool first = true;
  for (double v : values) {
    if (!first) out << ", ";
    out << v;
    first = false;
  }
  out << ')';
  return out.str();
}

}  // namespace

std::string_view to_string(LimitChangeReason reason) noexcept {
  switch (reason) {
    case LimitChangeReason::healthy:
      return "healthy";
    case LimitChangeReason::latency:
      return "latency";
    case LimitChangeReason::dropped:
      return "dropped";
    case LimitChangeReason::probe:
      return "probe";
  }
  return "unknown";
}

// --- AIMD ------------------------------------------------------------------------------------

AimdLimit::AimdLimit(AimdOptions options) : options_(options) {
  check_range("AimdOptions", "decrease_factor", options_.decrease_factor, 0.5, false, 1.0, true,
              "in [0.5, 1)");
  check_range("AimdOptions", "latency_tolerance", options_.latency_tolerance, 1.0, false, inf,
              true, "at least 1");
  check_range("AimdOptions", "reference_weight", options_.reference_weight, 0.0, true, 1.0, false,
              "in (0, 1]");
  check_range("AimdOptions", "increase", options_.increase, 0.0, true, inf, true, "positive");
  if (options_.floor_windows < 0) {
    invalid("AimdOptions", "floor_windows", "non-negative", options_.floor_windows);
  }
}

LimitDecision AimdLimit::update(const LimitWindow& window, double limit, double min_limit,
                                double /*max_limit*/) {
  if (window.dropped > 0 || window.samples == 0) {
    floor_windows_ = 0;  // the floor rule counts consecutive windows congested by latency alone
    if (window.dropped > 0) return {limit * options_.decrease_factor, LimitChangeReason::dropped};
    return {limit, LimitChangeReason::healthy};
  }
  const double rtt = ns(window.average_rtt);
  double reference = ns(reference_);
  // Netflix's app-limited guard: a window that used less than half the limit says nothing about
  // capacity; its latency, which the limiter did not cause, is the dependency's own.
  const bool app_limited = 2.0 * window.max_in_flight < limit;
  const bool congested = reference > 0 && rtt > options_.latency_tolerance * reference;
  (void)restore_replaced(before_, reference, rtt, options_.latency_tolerance);
  if (reference == 0) {
    reference = rtt;
  } else if (rtt < reference) {
    // Faster than the reference: it falls, halfway at once when the window is faster than the
    // tolerance can explain (the dependency recovered from a slow spell).
    const double w = rtt * options_.latency_tolerance < reference ? 0.5 : options_.reference_weight;
    reference += w * (rtt - reference);
  } else if (app_limited) {
    // It rises only on windows that used less than half the limit: one the limiter itself loaded
    // would teach it its own queueing.
    reference += options_.reference_weight * (rtt - reference);
  }
  reference_ = Clock::duration(static_cast<Clock::duration::rep>(reference));
  if (app_limited) {
    floor_windows_ = 0;
    return {limit, LimitChangeReason::healthy};
  }
  if (congested) {
    if (floor_reached(floor_windows_, options_.floor_windows, limit, min_limit, true)) {
      keep_replaced(before_, reference);
      reference_ = window.average_rtt;
      return {limit, LimitChangeReason::probe};
    }
    return {limit * options_.decrease_factor, LimitChangeReason::latency};
  }
  floor_windows_ = 0;
  return {limit + options_.increase, LimitChangeReason::healthy};
}

std::string AimdLimit::describe() const {
  return format("aimd", {options_.decrease_factor, options_.latency_tolerance});
}

// --- Vegas -----------------------------------------------------------------------------------

VegasLimit::VegasLimit(VegasOptions options)
    : options_(options),
      random_(options.seed != 0 ? options.seed : std::random_device{}()) {
  check_range("VegasOptions", "probe_multiplier", options_.probe_multiplier, 1.0, false, inf, true,
              "at least 1");
  check_range("VegasOptions", "smoothing", options_.smoothing, 0.0, true, 1.0, false, "in (0, 1]");
}

void VegasLimit::schedule_probe(double limit) {
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  probe_at_ = jitter(random_) * options_.probe_multiplier * std::max(limit, 1.0);
  windows_since_probe_ = 0;
}

LimitDecision VegasLimit::update(const LimitWindow& window, double limit, double min_limit,
                                 double max_limit) {
  if (probe_at_ == 0) schedule_probe(limit);
  const double step = lg(limit);
  const auto next = [&](double target, LimitChangeReason reason) {
    target = std::clamp(target, min_limit, max_limit);
    return LimitDecision{(1 - options_.smoothing) * limit + options_.smoothing * target, reason};
  };
  if (++windows_since_probe_ >= probe_at_) {
    // Forget the no-load latency and take this window's mean as the new one: a baseline measured
    // long ago (or on a lucky run) would otherwise hold forever.
    schedule_probe(limit);
    no_load_ = window.samples > 0 ? window.average_rtt : Clock::duration{};
    previous_ = no_load_;
    return {limit, LimitChangeReason::probe};
  }
  if (window.samples == 0) {
    if (window.dropped > 0) return next(limit - step, LimitChangeReason::dropped);
    return {limit, LimitChangeReason::healthy};
  }
  const Clock::duration rtt = window.average_rtt;
  // A window lowers the no-load latency only as far as the slower of it and the window before
  // it: one lucky window (a burst of cache hits) cannot set a baseline the dependency never
  // holds, which would shrink the limit until the next probe.
  const Clock::duration candidate = previous_.count() > 0 ? std::max(rtt, previous_) : rtt;
  previous_ = rtt;
  if (no_load_.count() == 0 || candidate < no_load_) {
    no_load_ = candidate;
    if (window.dropped == 0) return {limit, LimitChangeReason::healthy};
  }
  if (window.dropped > 0) return next(limit - step, LimitChangeReason::dropped);
  if (2.0 * window.max_in_flight < limit) return {limit, LimitChangeReason::healthy};
  const double queue = std::ceil(limit * (1.0 - ns(no_load_) / ns(rtt)));
  const double alpha = 3 * step;
  const double beta = 6 * step;
  if (queue <= step) return next(limit + beta, LimitChangeReason::healthy);
  if (queue < alpha) return next(limit + step, LimitChangeReason::healthy);
  if (queue > beta) return next(limit - step, LimitChangeReason::latency);
  return {limit, LimitChangeReason::healthy};
}

std::string VegasLimit::describe() const {
  return format("vegas", {options_.probe_multiplier, options_.smoothing});
}

// --- Gradient --------------------------------------------------------------------------------

GradientLimit::GradientLimit(GradientOptions options) : options_(options) {
  check_range("GradientOptions", "rtt_tolerance", options_.rtt_tolerance, 1.0, false, inf, true,
              "at least 1");
  if (options_.long_window < 1) invalid("GradientOptions", "long_window", "at least 1", options_.long_window);
  check_range("GradientOptions", "queue_size", options_.queue_size, 0.0, true, inf, true,
              "positive");
  check_range("GradientOptions", "smoothing", options_.smoothing, 0.0, true, 1.0, false,
              "in (0, 1]");
  check_range("GradientOptions", "backoff_ratio", options_.backoff_ratio, 0.5, false, 1.0, true,
              "in [0.5, 1)");
  if (options_.floor_windows < 0) {
    invalid("GradientOptions", "floor_windows", "non-negative", options_.floor_windows);
  }
  if (options_.max_healthy_rtt.count() < 0) {
    invalid("GradientOptions", "max_healthy_rtt", "non-negative",
            static_cast<double>(options_.max_healthy_rtt.count()));
  }
}

LimitDecision GradientLimit::update(const LimitWindow& window, double limit, double min_limit,
                                    double max_limit) {
  const auto smoothed = [&](double target, LimitChangeReason reason) {
    target = std::clamp(target, min_limit, max_limit);
    return LimitDecision{(1 - options_.smoothing) * limit + options_.smoothing * target, reason};
  };
  // Drops lower the limit at once (Gradient2 ignores them and waits for their latency).
  if (window.dropped > 0 || window.samples == 0) {
    floor_windows_ = 0;  // the floor rule counts consecutive windows congested by latency alone
    if (window.dropped > 0) return {limit * options_.backoff_ratio, LimitChangeReason::dropped};
    return {limit, LimitChangeReason::healthy};
  }
  const double rtt = ns(window.average_rtt);
  const double ceiling = ns(options_.max_healthy_rtt);
  const auto capped = [&](double v) { return ceiling > 0 ? std::min(v, ceiling) : v; };
  if (baseline_ns_ == 0) {
    baseline_ns_ = capped(rtt);
    warmup_ = 1;
    return {limit, LimitChangeReason::healthy};
  }
  double gradient = std::clamp(options_.rtt_tolerance * baseline_ns_ / rtt, 0.5, 1.0);
  if (ceiling > 0 && rtt > ceiling) gradient = std::min(gradient, std::max(0.5, ceiling / rtt));
  const bool app_limited = 2.0 * window.max_in_flight < limit;
  // The baseline. It learns during the warm-up (an arithmetic mean). Then it falls with any
  // faster window (an exponential average; halfway at once when the window is faster than the
  // tolerance can explain: the dependency recovered from a slow spell) but rises only on
  // windows that used less than half the limit: one the limiter itself loaded would teach it its
  // own queueing, window after window, and an overload incident would become the norm.
  const double weight = 2.0 / (options_.long_window + 1.0);
  if (restore_replaced(before_, baseline_ns_, rtt, options_.rtt_tolerance)) {
    gradient = std::clamp(options_.rtt_tolerance * baseline_ns_ / rtt, 0.5, 1.0);
    if (ceiling > 0 && rtt > ceiling) gradient = std::min(gradient, std::max(0.5, ceiling / rtt));
  }
  if (warmup_ < 10 && gradient == 1.0) {
    baseline_ns_ = (baseline_ns_ * warmup_ + rtt) / (warmup_ + 1);
    ++warmup_;
  } else if (rtt < baseline_ns_) {
    baseline_ns_ += (rtt - baseline_ns_) * (rtt * options_.rtt_tolerance < baseline_ns_ ? 0.5 : weight);
  } else if (app_limited) {
    baseline_ns_ += (rtt - baseline_ns_) * weight;
  }
  baseline_ns_ = capped(baseline_ns_);
  // As Gradient2: a window that used less than half the limit changes nothing.
  if (app_limited) {
    floor_windows_ = 0;
    return {limit, LimitChangeReason::healthy};
  }
  if (gradient < 1.0) {
    // Queueing: the limit shrinks with the gradient; nothing is added, so that a steady gradient
    // below 1 cannot make it creep upward. The floor rule replaces the baseline only within
    // max_healthy_rtt.
    if (floor_reached(floor_windows_, options_.floor_windows, limit, min_limit,
                      ceiling == 0 || rtt <= ceiling)) {
      keep_replaced(before_, baseline_ns_);
      baseline_ns_ = rtt;
      return {limit, LimitChangeReason::probe};
    }
    return smoothed(limit * gradient, LimitChangeReason::latency);
  }
  floor_windows_ = 0;
  return smoothed(limit + options_.queue_size, LimitChangeReason::healthy);
}

std::string GradientLimit::describe() const {
  return format("gradient", {options_.rtt_tolerance, static_cast<double>(options_.long_window),
                             options_.queue_size});
}

// --- The controller --------------------------------------------------------------------------

AdaptiveLimitController::AdaptiveLimitController(AdaptiveLimitSettings settings,
                                                 std::unique_ptr<LimitAlgorithm> algorithm)
    : settings_(settings), algorithm_(std::move(algorithm)) {
  const auto fail = [](const char* name, const char* rule, double got) {
    invalid("AdaptiveLimitOptions", name, rule, got);
  };
  if (algorithm_ == nullptr) {
    throw std::invalid_argument("kevlar::AdaptiveLimitOptions::algorithm must not be null");
  }
  if (settings_.min_limit < 1 || settings_.min_limit > 0x3fffffff) {
    fail("min_limit", "positive and at most 2^30 - 1", settings_.min_limit);
  }
  if (settings_.max_limit < settings_.min_limit || settings_.max_limit > 0x3fffffff) {
    fail("max_limit", "at least min_limit and at most 2^30 - 1", settings_.max_limit);
  }
  if (settings_.initial_limit < settings_.min_limit ||
      settings_.initial_limit > settings_.max_limit) {
    fail("initial_limit", "in [min_limit, max_limit]", settings_.initial_limit);
  }
  // The house message for a duration out of range; then the window's own floor of 1 ms.
  constexpr std::string_view window_name = "kevlar::AdaptiveLimitOptions::window";
  detail::check_duration(settings_.window, max_duration, detail::DurationFloor::positive,
                         window_name);
  if (settings_.window < std::chrono::milliseconds(1)) {
    throw std::invalid_argument(std::string(window_name) + " must be at least 1ms (got " +
                                detail::format_duration(settings_.window) + ")");
  }
  if (settings_.min_window_samples < 1) {
    fail("min_window_samples", "at least 1", settings_.min_window_samples);
  }
  limit_.store(static_cast<std::uint32_t>(settings_.initial_limit), std::memory_order_relaxed);
  estimate_.store(settings_.initial_limit, std::memory_order_relaxed);
}

void AdaptiveLimitController::lower_min(std::uint64_t us) noexcept {
  std::uint64_t seen = min_rtt_us_.load(std::memory_order_relaxed);
  while (us < seen && !min_rtt_us_.compare_exchange_weak(seen, us, std::memory_order_relaxed)) {
  }
}

void AdaptiveLimitController::raise_max(std::uint32_t in_flight) noexcept {
  std::uint32_t seen = max_in_flight_.load(std::memory_order_relaxed);
  while (in_flight > seen &&
         !max_in_flight_.compare_exchange_weak(seen, in_flight, std::memory_order_relaxed)) {
  }
}

std::optional<LimitChange> AdaptiveLimitController::close_window(Clock::time_point now,
                                                                 ApplyChange apply,
                                                                 void* context) {
  if (!due(now)) return std::nullopt;
  if (closing_.test_and_set(std::memory_order_acquire)) return std::nullopt;
  struct Unlock {
    std::atomic_flag& flag;
    ~Unlock() { flag.clear(std::memory_order_release); }
  } unlock{closing_};
  if (!due(now)) return std::nullopt;  // another thread closed it since this one looked
  if (window_end_.load(std::memory_order_relaxed) ==
      std::numeric_limits<Clock::duration::rep>::min()) {
    window_end_.store((now + settings_.window).time_since_epoch().count(),
                      std::memory_order_relaxed);
    return std::nullopt;  // the first window starts: the samples so far count in it
  }
  const std::uint64_t held = (measured_.load(std::memory_order_relaxed) & count_mask) +
                             dropped_.load(std::memory_order_relaxed);
  if (held < static_cast<std::uint64_t>(settings_.min_window_samples)) {
    return std::nullopt;  // too few samples yet: the window keeps collecting
  }
  // One exchange takes the measured samples' count and time together. A drop or an in-flight
  // count racing this close may land in either window.
  const std::uint64_t measured = measured_.exchange(0, std::memory_order_relaxed);
  const std::uint64_t min_us = min_rtt_us_.exchange(UINT64_MAX, std::memory_order_relaxed);
  LimitWindow w;
  w.end = now;
  w.samples = static_cast<std::uint32_t>(measured & count_mask);
  w.dropped = dropped_.exchange(0, std::memory_order_relaxed);
  w.max_in_flight = max_in_flight_.exchange(0, std::memory_order_relaxed);
  if (w.samples > 0) {
    const std::uint64_t sum_us = measured >> count_bits;
    w.average_rtt = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::micro>(static_cast<double>(sum_us) / w.samples));
    w.min_rtt = min_us == UINT64_MAX
                    ? w.average_rtt
                    : Clock::duration(std::chrono::microseconds(static_cast<std::int64_t>(min_us)));
  }
  window_end_.store((now + settings_.window).time_since_epoch().count(),
                    std::memory_order_relaxed);
  windows_.fetch_add(1, std::memory_order_relaxed);
  success_total_.fetch_add(w.samples, std::memory_order_relaxed);
  dropped_total_.fetch_add(w.dropped, std::memory_order_relaxed);

  const double lo = settings_.min_limit;
  const double hi = settings_.max_limit;
  const LimitDecision d = algorithm_->update(w, estimate_.load(std::memory_order_relaxed), lo, hi);
  if (!std::isfinite(d.limit)) return std::nullopt;  // a user algorithm's NaN keeps the limit
  const double estimate = std::clamp(d.limit, lo, hi);
  estimate_.store(estimate, std::memory_order_relaxed);
  // floor, with a little slack so that 9.999999 (0.9 × 11.11111) counts as 10
  const auto next = static_cast<std::uint32_t>(std::clamp(std::floor(estimate + 1e-9), lo, hi));
  const std::uint32_t old = limit_.load(std::memory_order_relaxed);
  if (next == old) return std::nullopt;
  limit_.store(next, std::memory_order_relaxed);
  const LimitChange change{old, next, d.reason, w};
  if (apply != nullptr) apply(context, change);
  return change;
}

std::uint64_t AdaptiveLimitController::total(LimitSample kind) const noexcept {
  switch (kind) {
    case LimitSample::success:
      return success_total_.load(std::memory_order_relaxed);
    case LimitSample::dropped:
      return dropped_total_.load(std::memory_order_relaxed);
    case LimitSample::ignored:
      return ignored_total_.load(std::memory_order_relaxed);
  }
  return 0;
}

}  // namespace kevlar
