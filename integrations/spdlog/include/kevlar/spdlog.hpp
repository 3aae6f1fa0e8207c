// kevlar — logging every decision through spdlog (target kevlar::spdlog). This header does not
// include spdlog: the logger is only named here.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/observer.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}  // namespace spdlog

namespace kevlar {

/// Options of a SpdlogObserver.
struct SpdlogObserverOptions {
  /// Summarise repeated events (a rejection storm, an outage's failures): of the events of one
  /// kind from one shield (each shield the observer was announced; two shields of one name are
  /// two) and strategy, at most one line is written per `summary_window`; the
  /// others are counted and reported by one "N more" line when the window has ended (written
  /// with the next event logged after that, or by flush_summaries() or the destructor). Breaker
  /// transitions are always written.
  bool summarize = true;
  /// Length of a summary window (> 0, at most 24 h).
  Clock::duration summary_window = std::chrono::seconds(1);
  /// The clock windows are measured on; null: Clock::steady(). A ManualClock makes tests exact.
  std::shared_ptr<const Clock> clock;
};

/// An Observer that writes each event as one line to a spdlog logger the application owns, as
/// key=value pairs, at these levels:
///
/// | level | events |
/// |---|---|
/// | debug | attempt started, limiter state changed, execution succeeded |
/// | info | retry scheduled, fallback taken, breaker closing or half-opening |
/// | warn | timeout fired, rejection, breaker opening or isolated |
/// | error | execution failed (after every strategy) |
///
/// Fields: `event`, `shield` (when named), `strategy` and `strategy.index` (for a strategy's
/// events), then the event's own (`attempt`, `retry`, `delay`, `timeout`, `outcome`, `duration`,
/// `attempts`, `rejection.type`, `retry_after`, `from`, `to`, `running`, `queued`) and, for a
/// failure, `error.category`, `error.code` and `error.message`, or `exception`. Example:
///
///     kevlar event=retry_scheduled shield=api strategy="Retry(3, ...)" strategy.index=1 retry=1
///     delay=200ms error.category=system error.code=111 error.message="Connection refused"
///
/// An event below the logger's level costs one level test. The observer never touches spdlog's
/// registry or default logger. Thread-safety: on_event may run concurrently (spdlog's own sinks
/// decide how lines from several threads interleave).
class SpdlogObserver final : public Observer {
 public:
  /// Throws std::invalid_argument for a null logger or a non-positive summary_window.
  explicit SpdlogObserver(std::shared_ptr<spdlog::logger> logger,
                          SpdlogObserverOptions options = {});
  /// Writes the "N more" lines still pending.
  ~SpdlogObserver() override;
  SpdlogObserver(const SpdlogObserver&) = delete;
  SpdlogObserver& operator=(const SpdlogObserver&) = delete;

  /// Writes `event` as one line at its level, or counts it toward its window's summary (see the
  /// class comment). Thread-safe; a sink's exception propagates (the shield swallows and counts it).
  void on_event(const Event& event) override;
  /// Gives the shield an identity of its own for the summaries.
  void on_shield(ShieldInfo& shield) override;

  /// Writes the pending "N more" lines: of the windows that have ended, or of all of them (and
  /// closes those windows) with `all`.
  void flush_summaries(bool all = true);
  /// Lines summarised (not written) so far.
  [[nodiscard]] std::uint64_t suppressed() const noexcept;

  /// The logger lines are written to.
  [[nodiscard]] const std::shared_ptr<spdlog::logger>& logger() const noexcept { return logger_; }

 private:
  struct ShieldTag {
    char unused = 0;  ///< only its address matters
  };
  struct Window;
  struct Pending;
  void write_summaries(const std::vector<Pending>& pending);
  /// Under mutex_: moves the "N more" lines of the windows that ended before `now` to `pending`.
  void collect_due(Clock::time_point now, std::vector<Pending>& pending);

  std::shared_ptr<spdlog::logger> logger_;
  SpdlogObserverOptions options_;
  std::shared_ptr<const Clock> clock_;
  mutable std::mutex mutex_;
  std::vector<Window> windows_;      ///< under mutex_
  std::deque<ShieldTag> tags_;       ///< under mutex_: one per announced shield (stable addresses)
  Clock::time_point next_due_;       ///< under mutex_: earliest end of a window with suppressed lines
  std::uint64_t suppressed_ = 0;     ///< under mutex_
};

}  // namespace kevlar
