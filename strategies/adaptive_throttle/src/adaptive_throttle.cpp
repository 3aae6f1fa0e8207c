// The adaptive throttle: a lock-free ring of tagged counters (detail::ThrottleWindow), the SRE
// formula over it, and the strategy's admission and accounting.
#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/diagnostics.hpp>
#include <kevlar/error.hpp>
#include <kevlar/observer.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace kevlar {
namespace {

using Frame = detail::ThrottleFrame;
// A synchronous execution keeps its layers' frames on the stack up to a fixed size.
static_assert(sizeof(Frame) <= 16);

constexpr Clock::duration min_window = std::chrono::seconds(1);
constexpr Clock::duration max_window = std::chrono::hours(1);
constexpr int max_buckets = 1000;

[[noreturn]] void refuse(const char* option, const std::string& rule, double got) {
  std::ostringstream msg;
  msg << "kevlar::AdaptiveThrottleOptions::" << option << " must be " << rule << " (got " << got
      << ")";
  throw std::invalid_argument(msg.str());
}

/// Checks every option, in declaration order, so that the first invalid one is named.
AdaptiveThrottleOptions validated(AdaptiveThrottleOptions o) {
  if (!std::isfinite(o.multiplier) || o.multiplier < 1) {
    refuse("multiplier", "a finite number, at least 1", o.multiplier);
  }
  if (o.window < min_window || o.window > max_window) {
    throw std::invalid_argument(
        "kevlar::AdaptiveThrottleOptions::window must be from 1s to 1h (got " +
        detail::format_duration(o.window) + ", " + std::to_string(o.window.count()) + " ns)");
  }
  if (o.buckets < 1 || o.buckets > max_buckets) {
    throw std::invalid_argument("kevlar::AdaptiveThrottleOptions::buckets must be from 1 to " +
                                std::to_string(max_buckets) + " (got " + std::to_string(o.buckets) +
                                ")");
  }
  if (!std::isfinite(o.aggression) || o.aggression < 1) {
    refuse("aggression", "a finite number, at least 1", o.aggression);
  }
  if (!(o.max_rejection_probability > 0 && o.max_rejection_probability <= 1)) {
    refuse("max_rejection_probability", "in (0, 1]", o.max_rejection_probability);
  }
  if (!std::isfinite(o.min_requests_per_second) || o.min_requests_per_second < 0) {
    refuse("min_requests_per_second", "a finite number, 0 or more", o.min_requests_per_second);
  }
  return o;
}

/// True for a failure a strategy further in produced without sending the call: a local refusal
/// (a breaker, a limiter, another throttle, a queue-wait timeout) or a closed primitive. Such a
/// call never reached the dependency, so it says nothing about whether the dependency accepts.
bool never_sent(const OutcomeRef& o) noexcept {
  const boost::system::error_code ec =
      o.has_error() ? o.error() : detail::error_of_exception(o.exception());
  if (ec.category() != error_category()) return false;
  return rejection_kind(ec).has_value() || ec.value() == static_cast<int>(errc::closed);
}

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

// ---- detail::ThrottleWindow -------------------------------------------------------------------

namespace detail {

ThrottleWindow::ThrottleWindow(Clock::duration window, int buckets)
    : width_(0), size_(0), mask_(0), shift_(0) {
  if (buckets < 1 || buckets > max_buckets || window.count() < buckets) {
    throw std::invalid_argument(
        "kevlar::detail::ThrottleWindow: 1 to 1000 buckets of at least one nanosecond each");
  }
  size_ = static_cast<std::uint32_t>(buckets);
  width_ = window.count() / buckets;
  const std::uint32_t ring = std::bit_ceil(size_);
  mask_ = ring - 1;
  shift_ = static_cast<unsigned>(std::countr_zero(ring));
  slots_ = std::make_unique<Slot[]>(ring);
}

std::int64_t ThrottleWindow::add(const Position& at,
                                 std::atomic<std::uint64_t> Slot::*member) noexcept {
  std::atomic<std::uint64_t>& word = slots_[at.slot].*member;
  std::uint64_t w = word.load(std::memory_order_relaxed);
  // The common case: the slot is this bucket's, far from saturation. A reset racing the addition
  // makes it count in the newer bucket.
  if (static_cast<std::uint32_t>(w >> 32) == at.tag && (w & count_mask) < fast_limit) [[likely]] {
    // A reset between the load and the addition moved the word to another bucket: the request
    // counts there, and that is the bucket to take it back from.
    const std::uint64_t before = word.fetch_add(1, std::memory_order_relaxed);
    const auto ahead = static_cast<std::int32_t>(static_cast<std::uint32_t>(before >> 32) - at.tag);
    return at.bucket + static_cast<std::int64_t>(ahead) * (std::int64_t{mask_} + 1);
  }
  for (;;) {
    const auto held = static_cast<std::uint32_t>(w >> 32);
    const std::uint64_t count = w & count_mask;
    const auto ahead = static_cast<std::int32_t>(held - at.tag);  // rings the word is ahead
    std::uint64_t next = 0;
    std::int64_t counted = at.bucket;
    if (count != 0 && ahead >= 0) {
      // This bucket's, or a newer one's (this thread's reading of the clock is a whole ring
      // behind): add to it, saturating.
      counted = at.bucket + static_cast<std::int64_t>(ahead) * (std::int64_t{mask_} + 1);
      if (count == count_mask) return counted;
      next = w + 1;
    } else {
      // An older bucket's, or an empty word (never written, or every request taken back): this
      // call is the first of its bucket in this slot, and resets it.
      next = (static_cast<std::uint64_t>(at.tag) << 32) | 1u;
    }
    if (word.compare_exchange_weak(w, next, std::memory_order_relaxed, std::memory_order_relaxed)) {
      return counted;
    }
  }
}

void ThrottleWindow::add_accept_in(std::int64_t bucket) noexcept {
  const auto slot = static_cast<std::uint32_t>(static_cast<std::uint64_t>(bucket) & mask_);
  const auto tag = static_cast<std::uint32_t>(bucket >> shift_);
  std::atomic<std::uint64_t>& word = slots_[slot].accepts;
  std::uint64_t w = word.load(std::memory_order_relaxed);
  if (static_cast<std::uint32_t>(w >> 32) == tag && (w & count_mask) < fast_limit) [[likely]] {
    word.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (;;) {
    const std::uint64_t count = w & count_mask;
    const auto ahead = static_cast<std::int32_t>(static_cast<std::uint32_t>(w >> 32) - tag);
    std::uint64_t next = 0;
    if (count != 0 && ahead > 0) return;  // a newer bucket's: this request has expired
    if (count != 0 && ahead == 0) {
      if (count == count_mask) return;  // saturated
      next = w + 1;
    } else {
      next = (static_cast<std::uint64_t>(tag) << 32) | 1u;  // the bucket's first accept here
    }
    if (word.compare_exchange_weak(w, next, std::memory_order_relaxed, std::memory_order_relaxed)) {
      return;
    }
  }
}

void ThrottleWindow::remove_request(std::int64_t bucket) noexcept {
  const auto slot = static_cast<std::uint32_t>(static_cast<std::uint64_t>(bucket) & mask_);
  const auto tag = static_cast<std::uint32_t>(bucket >> shift_);
  std::atomic<std::uint64_t>& word = slots_[slot].requests;
  std::uint64_t w = word.load(std::memory_order_relaxed);
  // Only while the slot still holds that bucket (a request whose bucket left the ring has left
  // the window already), and never below zero.
  while (static_cast<std::uint32_t>(w >> 32) == tag && (w & count_mask) != 0) {
    if (word.compare_exchange_weak(w, w - 1, std::memory_order_relaxed,
                                   std::memory_order_relaxed)) {
      return;
    }
  }
}

namespace {

/// Adds the counts of `slots[from, to)` whose tag is `tag` to `c`: two loads and two
/// conditional additions per slot, no branch on the data.
template <class Slot, class Counts>
void add_tagged(const Slot* slots, std::uint32_t from, std::uint32_t to, std::uint32_t tag,
                Counts& c) noexcept {
  const std::uint64_t want = static_cast<std::uint64_t>(tag) << 32;
  std::uint64_t requests = 0;
  std::uint64_t accepts = 0;
  for (std::uint32_t s = from; s < to; ++s) {
    // A word of the wanted tag XORs to its count alone.
    const std::uint64_t r = slots[s].requests.load(std::memory_order_relaxed) ^ want;
    const std::uint64_t a = slots[s].accepts.load(std::memory_order_relaxed) ^ want;
    requests += r <= 0xFFFF'FFFFu ? r : 0;
    accepts += a <= 0xFFFF'FFFFu ? a : 0;
  }
  c.requests += requests;
  c.accepts += accepts;
}

}  // namespace

ThrottleWindow::Counts ThrottleWindow::counts(const Position& at) const noexcept {
  // The window is buckets `at.bucket - B + 1 .. at.bucket`: the slots up to `at.slot` in `at`'s
  // generation, then (when B > at.slot + 1) the last slots of the ring in the generation before.
  Counts c;
  const std::uint32_t here = at.slot + 1;
  const std::uint32_t first = here > size_ ? here - size_ : 0;
  add_tagged(slots_.get(), first, here, at.tag, c);
  if (size_ > here) {
    const std::uint32_t ring = mask_ + 1;
    add_tagged(slots_.get(), ring - (size_ - here), ring, at.tag - 1, c);
  }
  return c;
}

ThrottleWindow::Counts ThrottleWindow::remember(const Position& at, std::uint64_t version,
                                                std::int64_t bucket) const noexcept {
  // The B - 1 buckets before `at`'s: the slots before `at.slot` in its generation, then (when
  // there are fewer than B - 1 of those) the last slots of the ring in the generation before.
  Counts c;
  const std::uint32_t here = at.slot;  // `at`'s own slot is left out
  const std::uint32_t span = size_ - 1;
  const std::uint32_t first = here > span ? here - span : 0;
  add_tagged(slots_.get(), first, here, at.tag, c);
  if (span > here) {
    const std::uint32_t ring = mask_ + 1;
    add_tagged(slots_.get(), ring - (span - here), ring, at.tag - 1, c);
  }
  // Only forwards, and only one writer: the others (and readers meanwhile) make the pass.
  if ((version & 1) == 0 && at.bucket > bucket &&
      closed_.version.compare_exchange_strong(version, version + 1, std::memory_order_relaxed,
                                              std::memory_order_relaxed)) {
    std::atomic_thread_fence(std::memory_order_release);
    closed_.bucket.store(at.bucket, std::memory_order_relaxed);
    closed_.requests.store(c.requests, std::memory_order_relaxed);
    closed_.accepts.store(c.accepts, std::memory_order_relaxed);
    closed_.version.store(version + 2, std::memory_order_release);
  }
  return c;
}

double next_throttle_draw() noexcept {
  // xorshift64 per thread, seeded the first time a thread draws from a Weyl sequence of
  // golden-ratio steps (never 0), so that threads draw different sequences.
  thread_local std::uint64_t state = 0;
  std::uint64_t x = state;
  if (x == 0) [[unlikely]] {
    static std::atomic<std::uint64_t> seeds{0x9e3779b97f4a7c15ULL};
    x = seeds.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed);
    if (x == 0) x = 0x2545f4914f6cdd1dULL;
  }
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  state = x;
  // The top 53 bits, as a double in [0, 1).
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

}  // namespace detail

// ---- AdaptiveThrottleStrategy -----------------------------------------------------------------

AdaptiveThrottleStrategy::AdaptiveThrottleStrategy(AdaptiveThrottleOptions options)
    : options_(validated(std::move(options))),
      inverse_aggression_(1.0 / options_.aggression),
      min_requests_(options_.min_requests_per_second *
                    std::chrono::duration<double>(options_.window).count()),
      own_clause_(options_.handles ? std::make_shared<const Clause>(*options_.handles) : nullptr),
      window_(options_.window, options_.buckets) {}

std::string AdaptiveThrottleStrategy::describe() const {
  const AdaptiveThrottleOptions defaults;
  std::string s = "AdaptiveThrottle(K=" + number(options_.multiplier) + ", " +
                  detail::format_duration(options_.window);
  if (options_.buckets != defaults.buckets) s += ", buckets " + std::to_string(options_.buckets);
  if (options_.aggression != defaults.aggression) {
    s += ", aggression " + number(options_.aggression);
  }
  if (options_.max_rejection_probability != defaults.max_rejection_probability) {
    s += ", max " + number(options_.max_rejection_probability);
  }
  if (options_.min_requests_per_second != defaults.min_requests_per_second) {
    s += ", min " + number(options_.min_requests_per_second) + "/s";
  }
  return s + ")";
}

StrategyTraits AdaptiveThrottleStrategy::strategy_traits() const noexcept {
  StrategyTraits t;
  t.role = StrategyRole::reactive;
  t.stateful = true;
  t.clause = own_clause_;
  return t;
}

double AdaptiveThrottleStrategy::probability_of(std::uint64_t requests,
                                                std::uint64_t accepts) const noexcept {
  const double r = static_cast<double>(requests);
  const double excess = r - options_.multiplier * static_cast<double>(accepts);
  if (!(excess > 0)) return 0;
  double p = excess / (r + 1);
  if (inverse_aggression_ != 1.0) p = std::pow(p, inverse_aggression_);
  return std::min(p, options_.max_rejection_probability);
}

AdaptiveThrottleSnapshot AdaptiveThrottleStrategy::snapshot(Clock::time_point now) const noexcept {
  const detail::ThrottleWindow::Counts c = window_.counts(now);
  return {c.requests, c.accepts, probability(c)};
}

Step AdaptiveThrottleStrategy::reject(Layer& layer, double p,
                                      const detail::ThrottleWindow::Counts& c) {
  if (layer.observed()) {
    layer.emit(Rejected{RejectionKind::throttle, std::nullopt});
    layer.emit(Throttled{p, c.requests, c.accepts});
  }
  if (options_.on_throttled) {
    options_.on_throttled(
        ThrottleEvent{p, c.requests, c.accepts, layer.strategy_index(), layer.context()});
  }
  layer.outcome().set_rejection(make_error_code(errc::throttled), std::nullopt);
  return Step::complete;
}

Step AdaptiveThrottleStrategy::judge(Layer& layer, Frame& f) {
  const OutcomeRef o = layer.outcome();
  if (o.failed() && never_sent(o)) {
    window_.remove_request(f.bucket);  // a local refusal further in: never sent
    return Step::complete;
  }
  const OutcomeKind before = o.kind();
  const std::exception_ptr thrown = before == OutcomeKind::exception ? o.exception() : nullptr;
  if (layer.handled()) return Step::complete;  // refused: the request stays, without an accept
  if (o.kind() != before || (before == OutcomeKind::exception && o.exception() != thrown)) {
    // A clause's predicate threw: its exception is the outcome now, and the call says nothing.
    window_.remove_request(f.bucket);
    return Step::complete;
  }
  if (o.failed() && (o.is_cancellation() || detail::cancelled_meanwhile(layer))) {
    window_.remove_request(f.bucket);  // the caller's cancellation: neither accepted nor refused
    return Step::complete;
  }
  window_.add_accept_in(f.bucket);
  return Step::complete;
}

std::shared_ptr<AdaptiveThrottleStrategy> adaptive_throttle(AdaptiveThrottleOptions options) {
  return std::make_shared<AdaptiveThrottleStrategy>(std::move(options));
}

}  // namespace kevlar
