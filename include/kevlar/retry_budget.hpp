// kevlar — RetryBudget: one allowance of additional attempts (retries and hedges) shared by the
// strategies, and the shields, that hold it, so that stacked retries cannot multiply a struggling
// dependency's load.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/outcome.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kevlar {

/// How a RetryBudget decides whether one more retry or hedge may start.
enum class RetryBudgetMode : unsigned char {
  /// Token feedback (gRPC's retry throttling, Kevlar's RetryBudget): handled failures take a
  /// token, successes give back a fraction of one; additional attempts only above half capacity.
  tokens,
  /// A rate over a sliding window (Finagle's and tower's budgets): each execution deposits a
  /// share of a retry, each retry withdraws one, deposits and withdrawals expire after `ttl`, and
  /// a reserve allows a minimum number of retries per second.
  rate,
  /// A share of the executions in flight (Envoy's retry budget, failsafe-go's budget): retries and
  /// hedges in flight stay within a ratio of the executions in flight, or a minimum.
  concurrency,
};

/// `tokens`, `rate` or `concurrency`.
[[nodiscard]] const char* to_string(RetryBudgetMode mode) noexcept;

/// Options of RetryBudget::tokens.
struct TokenBudgetOptions {
  /// The capacity, and the starting balance. Kevlar's default is 100; gRPC requires (0, 1000] and
  /// its example is 10. In [1, 1000000].
  int max_tokens = 100;
  /// Tokens a success gives back (a handled failure takes one). Kept to three decimals, as gRPC
  /// and Kevlar do. In [0.001, max_tokens].
  double token_ratio = 0.1;
};

/// Options of RetryBudget::rate (Finagle's defaults).
struct RateBudgetOptions {
  /// How long a deposit (an execution) or a withdrawal (a retry) counts. In [1 s, 60 s].
  Clock::duration ttl = std::chrono::seconds(10);
  /// Retries allowed per second whatever the traffic, so that a quiet client may still retry.
  /// In [0, 1000000].
  int min_retries_per_second = 10;
  /// Retries allowed per execution within `ttl` (0.2: one retry per five executions). 0 allows
  /// only the minimum. In [0, 1000].
  double retry_ratio = 0.2;
};

/// Options of RetryBudget::concurrency (Envoy's defaults).
struct ConcurrencyBudgetOptions {
  /// The largest share of the executions in flight that may be retries or hedges in flight (0.2:
  /// one in five). In [0, 1000].
  double max_ratio = 0.2;
  /// Retries and hedges in flight allowed whatever the share: a client with little traffic may
  /// still retry. In [0, 1000000].
  int min_concurrency = 3;
};

/// A snapshot of a budget, for metrics and tests.
struct RetryBudgetState {
  RetryBudgetMode mode = RetryBudgetMode::tokens;
  /// tokens: the token balance (0 ..= max_tokens). rate: the retries the window allows now.
  /// concurrency: the retries and hedges that may still start now.
  double balance = 0;
  /// Retries and hedges admitted, and refused, since the budget was made.
  std::uint64_t admitted = 0;
  std::uint64_t exhausted = 0;
  /// concurrency: retries and hedges in flight, and executions in flight (0 in other modes).
  std::int64_t attempts_in_flight = 0;
  std::int64_t executions_in_flight = 0;
};

/// One allowance of additional attempts shared by retries and hedges: give the same budget to
/// RetryOptions::budget and HedgeOptions::budget, of one shield or of several, and their retries
/// and hedges together stay within it. The first attempt of an execution is never refused; a
/// refused retry ends the execution with its last real failure (never a failure of the budget's
/// own), a refused hedge is simply not launched; either emits RetryBudgetExhausted and counts
/// in `exhausted`.
///
/// Three modes (RetryBudgetMode), chosen by the factory. The strategies call the hooks below;
/// a strategy of the user's own may call them too.
///
/// Thread-safety: every member may be called from any number of threads at once. The hooks are
/// lock-free and allocate nothing: tokens and concurrency are one atomic word each (a
/// concurrency admission is one compare-and-swap: exact), the rate mode a ring of ten tagged words
/// over `ttl` (a withdrawal checks the window and then takes from it, so threads racing for the
/// last retries may overdraw it by at most one retry per racing thread).
class RetryBudget {
 public:
  /// A token-feedback budget (RetryBudgetMode::tokens). Throws std::invalid_argument naming the
  /// option out of range.
  [[nodiscard]] static std::shared_ptr<RetryBudget> tokens(TokenBudgetOptions options = {});
  /// A rate budget (RetryBudgetMode::rate) whose window runs on `clock` (the steady clock unless
  /// given: a ManualClock in tests). Throws std::invalid_argument naming the option out of range
  /// or a null clock.
  [[nodiscard]] static std::shared_ptr<RetryBudget> rate(
      RateBudgetOptions options = {}, std::shared_ptr<const Clock> clock = Clock::steady());
  /// A concurrency budget (RetryBudgetMode::concurrency). Throws std::invalid_argument naming the
  /// option out of range.
  [[nodiscard]] static std::shared_ptr<RetryBudget> concurrency(ConcurrencyBudgetOptions options = {});

  RetryBudget(const RetryBudget&) = delete;
  RetryBudget& operator=(const RetryBudget&) = delete;
  ~RetryBudget();

  [[nodiscard]] RetryBudgetMode mode() const noexcept { return mode_; }
  /// A snapshot (each field read on its own: not one consistent instant under load).
  [[nodiscard]] RetryBudgetState state() const noexcept;
  /// state().balance.
  [[nodiscard]] double balance() const noexcept;
  /// True if an additional attempt would be admitted now (a snapshot, not a reservation).
  [[nodiscard]] bool allows_additional_attempt() const noexcept;
  /// `RetryBudget(tokens 100, ratio 0.1)`, `RetryBudget(rate 20% +10/s over 10s)`,
  /// `RetryBudget(concurrency 20% min 3)`.
  [[nodiscard]] std::string describe() const;

  // ---- the hooks the strategies call ----------------------------------------------------------

  /// An execution entered a strategy holding the budget: rate deposits its share, concurrency
  /// counts it in flight. Pair with execution_finished (concurrency) — every call, also when the
  /// execution fails or is cancelled.
  void execution_started() noexcept {
    if (mode_ == RetryBudgetMode::tokens) return;
    started_slow();
  }
  /// The execution left the strategy (concurrency: no longer in flight).
  void execution_finished() noexcept {
    if (mode_ == RetryBudgetMode::concurrency) {
      executions_in_flight_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  /// An attempt's outcome, for the tokens mode: a success the clause accepts gives back
  /// token_ratio, a handled failure takes one token. Not for unhandled failures nor for the
  /// caller's cancellations (they say nothing about the dependency). Other modes ignore it.
  void record_success() noexcept {
    if (mode_ != RetryBudgetMode::tokens) return;
    // At capacity (nearly always when nothing goes wrong) a success changes nothing: one load.
    if (tokens_.load(std::memory_order_relaxed) >= capacity_) return;
    adjust_tokens(refund_);
  }
  void record_failure() noexcept {
    if (mode_ == RetryBudgetMode::tokens) adjust_tokens(-scale);
  }
  /// An attempt's outcome as the strategies feed it (tokens mode; others ignore it), `handled`
  /// being the clause's verdict: an accepted result gives back, a handled failure takes one token
  /// unless it never reached the dependency (a kevlar rejection further in: circuit_open,
  /// isolated, rate or concurrency limit, throttled, queue_timeout, closed) or is a cancellation; an
  /// unhandled failure counts nothing.
  void record(OutcomeRef outcome, bool handled) noexcept;
  /// Asks for one additional attempt (a retry, a hedge). True: admitted (concurrency: it counts in
  /// flight until release_attempt). False: refused, and counted in `exhausted`.
  [[nodiscard]] bool try_acquire() noexcept;
  /// An admitted attempt ended (concurrency: no longer in flight; other modes: nothing).
  void release_attempt() noexcept {
    if (mode_ == RetryBudgetMode::concurrency) {
      attempts_in_flight_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

 private:
  static constexpr std::int64_t scale = 1000;  ///< units per token, per retry
  static constexpr std::size_t slices = 10;    ///< the rate window's ring
  struct Private {};

 public:
  /// Use the factories.
  RetryBudget(Private, RetryBudgetMode mode) noexcept;

 private:
  void started_slow() noexcept;
  void adjust_tokens(std::int64_t delta) noexcept;
  /// rate: adds `units` to the current slice; the window's sum (unexpired slices).
  void add_to_window(std::int64_t units, std::int64_t epoch) noexcept;
  [[nodiscard]] std::int64_t window_sum(std::int64_t epoch) const noexcept;
  [[nodiscard]] std::int64_t epoch_now() const noexcept;
  [[nodiscard]] bool acquire_rate() noexcept;
  [[nodiscard]] bool acquire_concurrency() noexcept;

  RetryBudgetMode mode_;
  // tokens
  std::int64_t capacity_ = 0;  ///< max_tokens x scale
  std::int64_t refund_ = 0;    ///< token_ratio x scale
  int max_tokens_ = 0;
  // rate
  std::shared_ptr<const Clock> clock_;
  std::int64_t slice_ns_ = 0;
  std::int64_t origin_ns_ = 0;  ///< the clock's coarse reading when the budget was made
  std::int64_t deposit_ = 0;   ///< units an execution deposits (retry_ratio x scale)
  std::int64_t reserve_ = 0;   ///< min_retries_per_second x ttl x scale
  RateBudgetOptions rate_options_{};
  // concurrency
  double max_ratio_ = 0;
  std::int64_t min_concurrency_ = 0;

  alignas(64) std::atomic<std::int64_t> tokens_{0};
  /// rate: each slice packs its epoch (high 24 bits) and its signed sum of units (low 40 bits).
  alignas(64) std::array<std::atomic<std::uint64_t>, slices> window_{};
  alignas(64) std::atomic<std::int64_t> executions_in_flight_{0};
  alignas(64) std::atomic<std::int64_t> attempts_in_flight_{0};
  alignas(64) std::atomic<std::uint64_t> admitted_{0};
  std::atomic<std::uint64_t> exhausted_{0};
};

/// A retry or a hedge wanted one more attempt and its RetryBudget refused it: the retry ended with
/// its last failure, or the hedge did not launch (an event: Layer::emit, Observer).
struct RetryBudgetExhausted {
  static constexpr std::string_view kevlar_event = "RetryBudgetExhausted";
  RetryBudgetMode mode = RetryBudgetMode::tokens;
  bool hedge = false;          ///< a hedge not launched (false: a retry refused)
  std::uint32_t attempt = 0;   ///< the attempt refused: 2 for the first retry or hedge
  double balance = 0;          ///< the budget's balance when it refused (RetryBudgetState)
};

}  // namespace kevlar
