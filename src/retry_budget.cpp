// RetryBudget: the three admission rules, each on lock-free words.
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/diagnostics.hpp>
#include <kevlar/retry_budget.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace kevlar {

namespace {

// A rate slice packs its epoch's low 24 bits over a signed 40-bit sum of units.
constexpr int value_bits = 40;
constexpr std::uint64_t value_mask = (std::uint64_t{1} << value_bits) - 1;
constexpr std::uint64_t tag_mask = (std::uint64_t{1} << 24) - 1;

std::uint64_t tag_of(std::int64_t epoch) noexcept {
  return static_cast<std::uint64_t>(epoch) & tag_mask;
}
std::uint64_t pack(std::int64_t epoch, std::int64_t value) noexcept {
  return (tag_of(epoch) << value_bits) | (static_cast<std::uint64_t>(value) & value_mask);
}
std::int64_t value_of(std::uint64_t word) noexcept {
  // Sign-extends the low 40 bits.
  return static_cast<std::int64_t>(word << (64 - value_bits)) >> (64 - value_bits);
}
/// How many slices `tag` lies behind `epoch` (0: the current one), modulo the tag's width.
std::uint64_t age(std::uint64_t tag, std::int64_t epoch) noexcept {
  return (tag_of(epoch) - tag) & tag_mask;
}
/// The largest sum a slice holds (its 40 bits, signed): additions saturate there.
constexpr std::int64_t value_limit = (std::int64_t{1} << (value_bits - 1)) - 1;

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("kevlar::RetryBudget: " + what);
}

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

void check_range(const char* option, double value, double low, double high) {
  if (!(value >= low && value <= high)) {  // also refuses NaN
    invalid(std::string(option) + " must be in [" + number(low) + ", " + number(high) + "] (got " +
            number(value) + ")");
  }
}

}  // namespace

const char* to_string(RetryBudgetMode mode) noexcept {
  switch (mode) {
    case RetryBudgetMode::tokens:
      return "tokens";
    case RetryBudgetMode::rate:
      return "rate";
    case RetryBudgetMode::concurrency:
      return "concurrency";
  }
  return "unknown";
}

RetryBudget::RetryBudget(Private, RetryBudgetMode mode) noexcept : mode_(mode) {}

RetryBudget::~RetryBudget() = default;

std::shared_ptr<RetryBudget> RetryBudget::tokens(TokenBudgetOptions options) {
  check_range("TokenBudgetOptions::max_tokens", options.max_tokens, 1, 1000000);
  check_range("TokenBudgetOptions::token_ratio", options.token_ratio, 0.001, options.max_tokens);
  auto b = std::make_shared<RetryBudget>(Private{}, RetryBudgetMode::tokens);
  b->max_tokens_ = options.max_tokens;
  b->capacity_ = std::int64_t{options.max_tokens} * scale;
  // Three decimals, rounded down (1e-9 absorbs the binary representation of e.g. 0.1).
  b->refund_ = static_cast<std::int64_t>(std::floor(options.token_ratio * scale + 1e-9));
  b->tokens_.store(b->capacity_, std::memory_order_relaxed);
  return b;
}

std::shared_ptr<RetryBudget> RetryBudget::rate(RateBudgetOptions options,
                                               std::shared_ptr<const Clock> clock) {
  if (!clock) invalid("the clock must not be null");
  if (options.ttl < std::chrono::seconds(1) || options.ttl > std::chrono::seconds(60)) {
    invalid("RateBudgetOptions::ttl must be in [1s, 60s] (got " +
            detail::format_duration(options.ttl) + ")");
  }
  check_range("RateBudgetOptions::min_retries_per_second", options.min_retries_per_second, 0,
              1000000);
  check_range("RateBudgetOptions::retry_ratio", options.retry_ratio, 0, 1000);
  auto b = std::make_shared<RetryBudget>(Private{}, RetryBudgetMode::rate);
  b->clock_ = std::move(clock);
  b->rate_options_ = options;
  b->slice_ns_ = std::max<std::int64_t>(1, options.ttl.count() / static_cast<std::int64_t>(slices));
  b->origin_ns_ = b->clock_->coarse_now().time_since_epoch().count();
  b->deposit_ = static_cast<std::int64_t>(std::floor(options.retry_ratio * scale + 1e-9));
  // The minimum per second, over the whole window (a fractional second rounds down).
  b->reserve_ = static_cast<std::int64_t>(options.min_retries_per_second) *
                std::chrono::duration_cast<std::chrono::milliseconds>(options.ttl).count() *
                scale / 1000;
  return b;
}

std::shared_ptr<RetryBudget> RetryBudget::concurrency(ConcurrencyBudgetOptions options) {
  check_range("ConcurrencyBudgetOptions::max_ratio", options.max_ratio, 0, 1000);
  check_range("ConcurrencyBudgetOptions::min_concurrency", options.min_concurrency, 0, 1000000);
  auto b = std::make_shared<RetryBudget>(Private{}, RetryBudgetMode::concurrency);
  b->max_ratio_ = options.max_ratio;
  b->min_concurrency_ = options.min_concurrency;
  return b;
}

// ---- tokens ---------------------------------------------------------------------------------------

void RetryBudget::adjust_tokens(std::int64_t delta) noexcept {
  std::int64_t current = tokens_.load(std::memory_order_relaxed);
  for (;;) {
    const std::int64_t updated = std::clamp<std::int64_t>(current + delta, 0, capacity_);
    if (updated == current ||
        tokens_.compare_exchange_weak(current, updated, std::memory_order_relaxed)) {
      return;
    }
  }
}

void RetryBudget::record(OutcomeRef outcome, bool handled) noexcept {
  if (mode_ != RetryBudgetMode::tokens) return;
  if (!handled) {
    if (outcome.kind() == OutcomeKind::value) record_success();
    return;
  }
  if (outcome.is_cancellation()) return;
  const boost::system::error_code ec =
      outcome.has_error() ? outcome.error() : detail::error_of_exception(outcome.exception());
  // Refused on this side (a rejection, or a closed limiter): the dependency saw nothing.
  if (rejection_kind(ec) || ec == errc::closed) return;
  record_failure();
}

// ---- rate -----------------------------------------------------------------------------------------

std::int64_t RetryBudget::epoch_now() const noexcept {
  // Slices of a tenth of the ttl (a second by default): the coarse clock's few milliseconds of lag
  // do not matter, and on a VM it costs a fraction of a precise reading.
  // Counted from the budget's creation, so that the 24-bit tags start small whatever the clock's
  // epoch and a never-written slice (the word 0) is an old one. The clock is monotonic: `since`
  // is not negative (clamped, should a clock of the user's step back).
  const std::int64_t since =
      std::max<std::int64_t>(0, clock_->coarse_now().time_since_epoch().count() - origin_ns_);
  return since / slice_ns_ + static_cast<std::int64_t>(slices);
}

void RetryBudget::add_to_window(std::int64_t units, std::int64_t epoch) noexcept {
  std::atomic<std::uint64_t>& slot = window_[static_cast<std::uint64_t>(epoch) % slices];
  std::uint64_t word = slot.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint64_t tag = word >> value_bits;
    std::uint64_t updated;
    if (word != 0 && tag == tag_of(epoch)) {
      updated = pack(epoch, std::clamp(value_of(word) + units, -value_limit, value_limit));
    } else if (word != 0 && ((tag - tag_of(epoch)) & tag_mask) < slices) {
      return;  // a later epoch owns the slice already (this thread was delayed a whole window)
    } else {
      updated = pack(epoch, units);  // an expired or never-written slice: this epoch starts it
    }
    if (slot.compare_exchange_weak(word, updated, std::memory_order_relaxed)) return;
  }
}

std::int64_t RetryBudget::window_sum(std::int64_t epoch) const noexcept {
  std::int64_t sum = 0;
  for (const std::atomic<std::uint64_t>& slot : window_) {
    const std::uint64_t word = slot.load(std::memory_order_relaxed);
    if (word != 0 && age(word >> value_bits, epoch) < slices) sum += value_of(word);
  }
  return sum;
}

void RetryBudget::started_slow() noexcept {
  if (mode_ == RetryBudgetMode::rate) {
    if (deposit_ != 0) add_to_window(deposit_, epoch_now());
  } else {
    executions_in_flight_.fetch_add(1, std::memory_order_relaxed);
  }
}

bool RetryBudget::acquire_rate() noexcept {
  const std::int64_t epoch = epoch_now();
  if (window_sum(epoch) + reserve_ < scale) return false;
  add_to_window(-scale, epoch);
  return true;
}

// ---- concurrency ----------------------------------------------------------------------------------

namespace {
std::int64_t allowed_in_flight(double ratio, std::int64_t minimum, std::int64_t executions) {
  const auto share = static_cast<std::int64_t>(ratio * static_cast<double>(std::max<std::int64_t>(
                                                           executions, 0)));
  return std::max(minimum, share);
}
}  // namespace

bool RetryBudget::acquire_concurrency() noexcept {
  const std::int64_t allowed = allowed_in_flight(
      max_ratio_, min_concurrency_, executions_in_flight_.load(std::memory_order_relaxed));
  std::int64_t current = attempts_in_flight_.load(std::memory_order_relaxed);
  do {
    if (current + 1 > allowed) return false;
  } while (!attempts_in_flight_.compare_exchange_weak(current, current + 1,
                                                       std::memory_order_relaxed));
  return true;
}

// ---- shared -------------------------------------------------------------------------------------

bool RetryBudget::try_acquire() noexcept {
  bool admitted = false;
  switch (mode_) {
    case RetryBudgetMode::tokens:
      admitted = tokens_.load(std::memory_order_relaxed) > capacity_ / 2;
      break;
    case RetryBudgetMode::rate:
      admitted = acquire_rate();
      break;
    case RetryBudgetMode::concurrency:
      admitted = acquire_concurrency();
      break;
  }
  (admitted ? admitted_ : exhausted_).fetch_add(1, std::memory_order_relaxed);
  return admitted;
}

double RetryBudget::balance() const noexcept {
  switch (mode_) {
    case RetryBudgetMode::tokens:
      return static_cast<double>(tokens_.load(std::memory_order_relaxed)) / scale;
    case RetryBudgetMode::rate: {
      const std::int64_t units = window_sum(epoch_now()) + reserve_;
      return units <= 0 ? 0.0 : std::floor(static_cast<double>(units) / scale);
    }
    case RetryBudgetMode::concurrency: {
      const std::int64_t allowed = allowed_in_flight(
          max_ratio_, min_concurrency_, executions_in_flight_.load(std::memory_order_relaxed));
      const std::int64_t left = allowed - attempts_in_flight_.load(std::memory_order_relaxed);
      return left <= 0 ? 0.0 : static_cast<double>(left);
    }
  }
  return 0;
}

bool RetryBudget::allows_additional_attempt() const noexcept {
  if (mode_ == RetryBudgetMode::tokens) {
    return tokens_.load(std::memory_order_relaxed) > capacity_ / 2;
  }
  return balance() >= 1.0;
}

RetryBudgetState RetryBudget::state() const noexcept {
  RetryBudgetState s;
  s.mode = mode_;
  s.balance = balance();
  s.admitted = admitted_.load(std::memory_order_relaxed);
  s.exhausted = exhausted_.load(std::memory_order_relaxed);
  if (mode_ == RetryBudgetMode::concurrency) {
    s.attempts_in_flight = attempts_in_flight_.load(std::memory_order_relaxed);
    s.executions_in_flight = executions_in_flight_.load(std::memory_order_relaxed);
  }
  return s;
}

std::string RetryBudget::describe() const {
  switch (mode_) {
    case RetryBudgetMode::tokens:
      return "RetryBudget(tokens " + std::to_string(max_tokens_) + ", ratio " +
             number(static_cast<double>(refund_) / scale) + ")";
    case RetryBudgetMode::rate:
      return "RetryBudget(rate " + number(rate_options_.retry_ratio * 100) + "% +" +
             std::to_string(rate_options_.min_retries_per_second) + "/s over " +
             detail::format_duration(rate_options_.ttl) + ")";
    case RetryBudgetMode::concurrency:
      return "RetryBudget(concurrency " + number(max_ratio_ * 100) + "% min " +
             std::to_string(min_concurrency_) + ")";
  }
  return "RetryBudget";
}

}  // namespace kevlar
