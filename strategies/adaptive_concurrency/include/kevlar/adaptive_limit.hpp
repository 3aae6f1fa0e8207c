// kevlar — adaptive limit algorithms and the windowed controller that feeds them: sans-I/O, driven
// by explicit time points, shared by the adaptive concurrency limit and the limit simulator.
#pragma once

#include <kevlar/clock.hpp>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace kevlar {

/// How a completed call is counted by an adaptive limit.
enum class LimitSample : unsigned char {
  success,  ///< measured: its round-trip time and the in-flight count at its start are kept
  dropped,  ///< overload: a timeout, a rejection further in, an outcome named as overload
  ignored,  ///< not the dependency's doing: the caller's cancellation, a caller error
};

/// Why an adaptive limit moved.
enum class LimitChangeReason : unsigned char {
  healthy,  ///< latency at its baseline and the limit in use: probing upward
  latency,  ///< the window's latency rose above the baseline's tolerance
  dropped,  ///< the window held dropped calls
  probe,    ///< the algorithm re-measures its no-load latency
};

/// The name of a reason ("healthy", "latency", "dropped", "probe").
[[nodiscard]] std::string_view to_string(LimitChangeReason reason) noexcept;

/// What one closed window of samples tells an algorithm.
struct LimitWindow {
  Clock::time_point end{};          ///< when the window closed
  Clock::duration average_rtt{};    ///< mean round-trip time of its measured samples (0: none)
  Clock::duration min_rtt{};        ///< shortest round-trip time among them (0: none)
  std::uint32_t samples = 0;        ///< measured samples
  std::uint32_t dropped = 0;        ///< dropped samples
  std::uint32_t max_in_flight = 0;  ///< the largest in-flight count a sample started with
};

/// An algorithm's answer to a window: the next limit (before the controller's clamp) and why.
struct LimitDecision {
  double limit = 0;
  LimitChangeReason reason = LimitChangeReason::healthy;
};

/// A limit algorithm: turns each closed window into the next limit. Called by one thread at a
/// time (the controller's window lock), never on the admission path; implementations keep their
/// own state (baselines, counters) without synchronisation.
class LimitAlgorithm {
 public:
  virtual ~LimitAlgorithm() = default;
  /// The next limit after `window`, given `limit` (the one in force during it) and the bounds
  /// [min_limit, max_limit] the controller clamps to.
  [[nodiscard]] virtual LimitDecision update(const LimitWindow& window, double limit,
                                             double min_limit, double max_limit) = 0;
  /// A short description with the parameters, e.g. "aimd(0.9, 2)".
  [[nodiscard]] virtual std::string describe() const = 0;
};

/// Options of AimdLimit: additive increase, multiplicative decrease on drops or latency.
/// Defaults follow Kevlar's (.NET) adaptive concurrency limit; the app-limited guard follows
/// Netflix's AIMDLimit.
struct AimdOptions {
  /// Multiplier applied to the limit after a congested window, in [0.5, 1). Default 0.9.
  double decrease_factor = 0.9;
  /// A window whose mean latency exceeds this multiple of the reference latency is congested;
  /// at least 1. The reference is the first measured window's mean (without drops); then it falls
  /// toward any faster window by reference_weight (by half when the window is faster than the
  /// tolerance can explain), and rises by reference_weight only on windows that used less than
  /// half the limit. Default 2.
  double latency_tolerance = 2.0;
  /// Weight of a window in the reference latency's moving average, in (0, 1]. Default 0.1.
  double reference_weight = 0.1;
  /// Added to the limit after an uncongested window in which at least half the limit was in use.
  /// Positive. Default 1.
  double increase = 1.0;
  /// Congested windows at the floor (min_limit) after which their latency becomes the reference:
  /// with nothing left to shed, it is the dependency's own. 0: never. Default 5 (as Envoy's
  /// re-measure after 5 updates at its minimum).
  int floor_windows = 5;
};

/// AIMD: +increase after a healthy window that used at least half the limit, × decrease_factor
/// after a window with drops or with latency above latency_tolerance × reference. The reference
/// never learns the queueing the limiter itself causes (see AimdOptions::latency_tolerance).
class AimdLimit final : public LimitAlgorithm {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit AimdLimit(AimdOptions options = {});
  [[nodiscard]] LimitDecision update(const LimitWindow& window, double limit, double min_limit,
                                     double max_limit) override;
  [[nodiscard]] std::string describe() const override;
  /// The reference latency (0 until the first uncongested window).
  [[nodiscard]] Clock::duration reference() const noexcept { return reference_; }

 private:
  AimdOptions options_;
  Clock::duration reference_{};
  double before_ = 0;  ///< the reference a floor reset replaced (ns; 0: none)
  int floor_windows_ = 0;
};

/// Options of VegasLimit. Defaults follow Netflix's VegasLimit.
struct VegasOptions {
  /// The no-load latency is forgotten and re-measured every `probe_multiplier × limit × U[0.5, 1)`
  /// windows. At least 1. Default 30.
  double probe_multiplier = 30;
  /// Weight of the new limit against the old one, in (0, 1]. Default 1 (no smoothing).
  double smoothing = 1.0;
  /// Seed of the probe's jitter (fixed seeds make runs reproducible). Default 0: from the device.
  std::uint64_t seed = 0;
};

/// Vegas: estimates the queue inside the dependency as `limit × (1 − no_load_rtt / rtt)` and
/// grows while it is below alpha = 3·lg(limit), shrinks above beta = 6·lg(limit) (lg(L) =
/// max(1, floor(log10 L))), jumps by beta while it is at most lg(limit). The no-load latency is the
/// smallest, since the last probe, of max(a window's mean, the previous window's mean): one lucky
/// window cannot set it.
class VegasLimit final : public LimitAlgorithm {
 public:
  explicit VegasLimit(VegasOptions options = {});
  [[nodiscard]] LimitDecision update(const LimitWindow& window, double limit, double min_limit,
                                     double max_limit) override;
  [[nodiscard]] std::string describe() const override;
  /// The no-load latency (0 until measured; a probe replaces it with its window's mean).
  [[nodiscard]] Clock::duration no_load_rtt() const noexcept { return no_load_; }

 private:
  VegasOptions options_;
  Clock::duration no_load_{};
  Clock::duration previous_{};  ///< the last window's mean
  double windows_since_probe_ = 0;
  double probe_at_ = 0;
  std::mt19937_64 random_;
  void schedule_probe(double limit);
};

/// Options of GradientLimit. Response after Netflix's Gradient2; the guards are kevlar's.
struct GradientOptions {
  /// Latency up to this multiple of the baseline counts as no queueing; at least 1. Default 1.5.
  double rtt_tolerance = 1.5;
  /// Windows averaged by the baseline (an exponential average of factor 2 / (n + 1) after an
  /// arithmetic warm-up of 10 windows). At least 1. Default 60.
  int long_window = 60;
  /// Added to the limit after a healthy window that used at least half of it. Positive. Default 4.
  double queue_size = 4;
  /// Weight of the new limit against the old one, in (0, 1]. Default 0.2.
  double smoothing = 0.2;
  /// Multiplier after a window with drops, in [0.5, 1). Default 0.9.
  double backoff_ratio = 0.9;
  /// A window mean above this latency is congested whatever the baseline says, and the baseline
  /// never exceeds it. 0: no ceiling (default).
  Clock::duration max_healthy_rtt{};
  /// Congested windows at the floor (min_limit) after which their latency becomes the baseline
  /// (unless above max_healthy_rtt): with nothing left to shed, it is the dependency's own. 0:
  /// never. Default 5 (as Envoy's re-measure after 5 updates at its minimum).
  int floor_windows = 5;
};

/// Gradient without creep: the limit follows `limit × clamp(tolerance × baseline / rtt, 0.5, 1)`.
/// Unlike Gradient2 it adds queue_size only when the gradient is 1 (no queueing seen) and the
/// limit is in use, so a steady gradient below 1 can only lower the limit; the baseline learns
/// upward only from windows that used less than half the limit (the limiter's own queueing, or an
/// overload incident, cannot teach it the degraded latency), falls with any faster window, and
/// max_healthy_rtt caps it.
class GradientLimit final : public LimitAlgorithm {
 public:
  explicit GradientLimit(GradientOptions options = {});
  [[nodiscard]] LimitDecision update(const LimitWindow& window, double limit, double min_limit,
                                     double max_limit) override;
  [[nodiscard]] std::string describe() const override;
  /// The baseline latency (0 until the first window with samples).
  [[nodiscard]] Clock::duration baseline() const noexcept {
    return Clock::duration(static_cast<Clock::duration::rep>(baseline_ns_));
  }

 private:
  GradientOptions options_;
  double baseline_ns_ = 0;
  int warmup_ = 0;
  double before_ = 0;  ///< the baseline a floor reset replaced (ns; 0: none)
  int floor_windows_ = 0;
};

/// The bounds and windowing of an AdaptiveLimitController.
struct AdaptiveLimitSettings {
  /// Starting limit, in [min_limit, max_limit]. Default 10.
  int initial_limit = 10;
  /// Floor, positive. Default 1.
  int min_limit = 1;
  /// Ceiling, at least min_limit. Default 100.
  int max_limit = 100;
  /// Duration of a sampling window (at least 1 ms). Default 1 s.
  Clock::duration window = std::chrono::seconds(1);
  /// A window closes only once it holds this many samples (measured and dropped); until then it
  /// keeps collecting past its end, so that a decision never rests on a handful of calls. At least
  /// 1. Default 10.
  int min_window_samples = 10;
};

/// A change of limit, as the controller reports it.
struct LimitChange {
  std::uint32_t old_limit = 0;
  std::uint32_t new_limit = 0;
  LimitChangeReason reason = LimitChangeReason::healthy;
  LimitWindow window;
};

/// Collects samples into windows and, at a window's end, asks the algorithm for the next limit.
/// Sans-I/O: every call takes the time it happens at.
///
/// Thread-safety: record() and due() from any number of threads, lock-free (a few relaxed atomic
/// adds). close_window() runs under a try-lock: one caller closes a due window, others return at
/// once. The algorithm is only ever called under that lock.
class AdaptiveLimitController {
 public:
  /// Validates `settings` (std::invalid_argument naming the setting); `algorithm` must not be
  /// null. The first window starts at the first close_window() (its samples count in it), so
  /// that windows run on the clock of whoever reports: the steady clock, or a ManualClock.
  AdaptiveLimitController(AdaptiveLimitSettings settings,
                          std::unique_ptr<LimitAlgorithm> algorithm);

  /// Adds a sample: `rtt` (kept to the microsecond) and `in_flight` (the in-flight count at the
  /// call's start, itself included) count for success; dropped counts the drop and the in-flight
  /// count; ignored counts nothing here. A measured sample is one atomic add (its count and its
  /// time together, so that a window's close can never split them); a window holds at most
  /// 2^24 - 1 of them (use sample_one_in beyond 16 million calls a window).
  void record(LimitSample kind, Clock::duration rtt, std::uint32_t in_flight) noexcept {
    if (kind == LimitSample::ignored) {
      ignored_total_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (kind == LimitSample::success) {
      const std::uint64_t us = micros(rtt);
      measured_.fetch_add((us << count_bits) + 1, std::memory_order_relaxed);
      if (us < min_rtt_us_.load(std::memory_order_relaxed)) lower_min(us);
    } else {
      dropped_.fetch_add(1, std::memory_order_relaxed);
    }
    if (in_flight > max_in_flight_.load(std::memory_order_relaxed)) raise_max(in_flight);
  }
  /// True once the current window's end has passed (it closes when it also holds enough samples),
  /// and before the first window has started.
  [[nodiscard]] bool due(Clock::time_point now) const noexcept {
    return now.time_since_epoch().count() >= window_end_.load(std::memory_order_relaxed);
  }
  /// What close_window calls with a change while it still holds the window lock (so that changes
  /// are applied in the order they were decided): `context` and the change.
  using ApplyChange = void (*)(void* context, const LimitChange& change) noexcept;

  /// Closes the current window if it is due and holds min_window_samples, feeds it to the
  /// algorithm, and returns the change of the (integer) limit, if any, after calling
  /// `apply(context, change)` under the window lock (when `apply` is not null). Returns nothing
  /// when the window is not ready or another thread is closing it. May throw what the algorithm
  /// throws (the window is then lost; the limit stays).
  std::optional<LimitChange> close_window(Clock::time_point now, ApplyChange apply = nullptr,
                                          void* context = nullptr);

  /// The limit in force. Thread-safe.
  [[nodiscard]] std::uint32_t limit() const noexcept {
    return limit_.load(std::memory_order_relaxed);
  }
  /// The algorithm's estimate before rounding (changed only under the window lock).
  [[nodiscard]] double estimate() const noexcept {
    return estimate_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] const AdaptiveLimitSettings& settings() const noexcept { return settings_; }
  /// The algorithm (read it only while no window can close).
  [[nodiscard]] const LimitAlgorithm& algorithm() const noexcept { return *algorithm_; }

  /// Totals over every closed window (and ignored samples as they come), by kind.
  [[nodiscard]] std::uint64_t total(LimitSample kind) const noexcept;
  /// Windows closed so far.
  [[nodiscard]] std::uint64_t windows() const noexcept {
    return windows_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr unsigned count_bits = 24;
  static constexpr std::uint64_t count_mask = (std::uint64_t{1} << count_bits) - 1;
  /// `rtt` in whole microseconds, within the 40 bits a measured sample's time has.
  static std::uint64_t micros(Clock::duration rtt) noexcept {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(rtt).count();
    constexpr std::int64_t top = (std::int64_t{1} << (64 - count_bits)) - 1;
    return static_cast<std::uint64_t>(us <= 0 ? 0 : (us > top ? top : us));
  }
  void lower_min(std::uint64_t us) noexcept;
  void raise_max(std::uint32_t in_flight) noexcept;

  AdaptiveLimitSettings settings_;
  std::unique_ptr<LimitAlgorithm> algorithm_;
  // The window being filled. measured_: the measured samples' count in the low count_bits, the
  // sum of their times in microseconds above.
  alignas(64) std::atomic<std::uint64_t> measured_{0};
  std::atomic<std::uint32_t> dropped_{0};
  std::atomic<std::uint64_t> min_rtt_us_{UINT64_MAX};
  std::atomic<std::uint32_t> max_in_flight_{0};
  /// The current window's end; the lowest value until the first window starts.
  std::atomic<Clock::duration::rep> window_end_{std::numeric_limits<Clock::duration::rep>::min()};
  // The limit and the closing side.
  alignas(64) std::atomic<std::uint32_t> limit_{0};
  std::atomic<double> estimate_{0};
  std::atomic_flag closing_;
  std::atomic<std::uint64_t> windows_{0};
  std::atomic<std::uint64_t> success_total_{0};
  std::atomic<std::uint64_t> dropped_total_{0};
  std::atomic<std::uint64_t> ignored_total_{0};
};

}  // namespace kevlar
