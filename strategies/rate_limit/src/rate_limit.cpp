#include <kevlar/detail/duration_format.hpp>
#include <kevlar/detail/rejection_hooks.hpp>
#include <kevlar/rate_limit.hpp>

#include <boost/asio/error.hpp>
#include <boost/assert.hpp>

#include <algorithm>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace kevlar {
namespace {

using Frame = detail::RateLimitFrame;
// A synchronous execution keeps its layers' frames on the stack up to a fixed size: a pointer and
// two flags keep this one at 16 bytes.
static_assert(sizeof(Frame) <= 16);
// The queue deadline's room behind the frame (limiters with a queue timeout only).
constexpr std::size_t frame_with_deadline =
    detail::frame_extension_offset<Frame> + sizeof(detail::QueueWaitDeadline);
using Kind = RateLimitLedger::Decision::Kind;

/// The furthest a schedule may run ahead of now: a quarter of the nanosecond range (73 years),
/// so that `now + (burst + queue_limit) * T` cannot overflow for any clock reading in use.
constexpr std::int64_t max_schedule = std::numeric_limits<std::int64_t>::max() / 4;

/// a / b rounded up, for a >= 0 and b > 0.
std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept {
  return a / b + (a % b != 0 ? 1 : 0);
}

/// window / permits, rounded up to the nanosecond (the limiter never runs faster than asked).
std::int64_t interval_of(Clock::duration window, std::int64_t permits) noexcept {
  return ceil_div(window.count(), permits);
}

/// True if `slots` reservations of `interval` each fit in the schedule the ledger can count.
bool schedule_fits(std::int64_t slots, std::int64_t interval) noexcept {
  return slots <= max_schedule / interval;
}

std::uint32_t checked_count(int value, int min, const char* name) {
  if (value < min || static_cast<long long>(value) > RateLimitLedger::max_count) {
    std::ostringstream msg;
    msg << "kevlar::RateLimitOptions::" << name << " must be "
        << (min == 1 ? "positive" : "non-negative") << " and at most " << RateLimitLedger::max_count
        << " (got " << value << ")";
    throw std::invalid_argument(msg.str());
  }
  return static_cast<std::uint32_t>(value);
}

/// Checks every option, in declaration order, so that the first invalid one is named.
RateLimitOptions validated(RateLimitOptions o) {
  (void)checked_count(o.permits, 1, "permits");
  if (o.window <= Clock::duration::zero()) {
    throw std::invalid_argument("kevlar::RateLimitOptions::window must be positive (got " +
                                detail::format_duration(o.window) + ")");
  }
  if (o.burst) (void)checked_count(*o.burst, 1, "burst");
  (void)checked_count(o.queue_limit, 0, "queue_limit");
  const std::int64_t slots = static_cast<std::int64_t>(o.burst.value_or(o.permits)) + o.queue_limit;
  if (!schedule_fits(slots, interval_of(o.window, o.permits))) {
    throw std::invalid_argument(
        "kevlar::RateLimitOptions: (burst + queue_limit) x window / permits must be at most 73 "
        "years (a schedule the limiter can count in nanoseconds)");
  }
  detail::validate_queue_timeout(o.queue_timeout, "kevlar::RateLimitOptions::");
  if (o.queue_timeout.enabled() && o.queue_limit == 0) {
    throw std::invalid_argument(
        "kevlar::RateLimitOptions::queue_timeout needs a queue (queue_limit is 0: nothing waits)");
  }
  return o;
}

/// True if the execution must not go on waiting: its caller or an outer strategy cancelled it, or
/// its deadline (an outer timeout's) has passed.
bool leaving(Layer& layer) noexcept {
  if (layer.cancelled_from_outside()) return true;
  const Clock::time_point deadline = layer.context().deadline();
  return deadline != Clock::time_point::max() && layer.clock().now() >= deadline;
}

Clock::duration emission_interval(const RateLimitOptions& o) {
  return Clock::duration(interval_of(o.window, o.permits));
}

}  // namespace

// ---- RateLimitLedger --------------------------------------------------------------------------

RateLimitLedger::RateLimitLedger(Clock::duration emission_interval, std::uint32_t burst,
                                 std::uint32_t queue_limit)
    : interval_(emission_interval.count()),
      tolerance_(0),
      burst_(burst),
      queue_limit_(queue_limit) {
  if (interval_ <= 0) {
    throw std::invalid_argument("kevlar::RateLimitLedger: the emission interval must be positive");
  }
  if (burst < 1 || burst > max_count || queue_limit > max_count) {
    throw std::invalid_argument(
        "kevlar::RateLimitLedger: the burst must be in 1 .. 2^31-1 and the queue limit at most "
        "2^31-1");
  }
  if (!schedule_fits(static_cast<std::int64_t>(burst) + queue_limit, interval_)) {
    throw std::invalid_argument(
        "kevlar::RateLimitLedger: (burst + queue limit) x the emission interval exceeds 73 years");
  }
  tolerance_ = static_cast<rep>(burst - 1) * interval_;
}

RateLimitLedger::Decision RateLimitLedger::acquire_contended(const Clock& clock) noexcept {
  rep tat = tat_.load(std::memory_order_acquire);
  Decision d;
  // Each try reads the clock after the load (or the failed exchange) it compares against.
  while (!try_gcra(tat, clock.now().time_since_epoch().count(), d)) {
  }
  return d;
}

RateLimitLedger::Decision RateLimitLedger::acquire_queued(rep now) noexcept {
  const std::lock_guard lock(mutex_);
  return admit_locked(now);
}

RateLimitLedger::Decision RateLimitLedger::acquire_queued(const Clock& clock) noexcept {
  const std::lock_guard lock(mutex_);
  // Read under the mutex, which serialises every change of the schedule in queue mode: the
  // reading is never older than the state it is compared with.
  return admit_locked(clock.now().time_since_epoch().count());
}

RateLimitLedger::Decision RateLimitLedger::admit_locked(rep now) noexcept {
  const rep tat = tat_.load(std::memory_order_relaxed);
  const rep lead = ahead(tat, now);
  const rep next = (tat > now ? tat : now) + interval_;
  if (queued_ == 0 && lead <= tolerance_) {
    tat_.store(next, std::memory_order_relaxed);
    return {};
  }
  if (queued_ >= queue_limit_) {
    // The queued debt is in TAT: the wait until a newcomer could be served at all.
    return {Decision::Kind::rejected, Clock::duration(lead > tolerance_ ? lead - tolerance_ : 0)};
  }
  ++queued_;
  tat_.store(next, std::memory_order_relaxed);
  return {Decision::Kind::queued, {}};
}

Clock::time_point RateLimitLedger::head_due() const noexcept {
  const std::lock_guard lock(mutex_);
  // The reservations are T apart at the end of the schedule: the oldest of `queued_` is due
  // queued_ intervals before the next free slot (TAT - tau).
  const rep tat = tat_.load(std::memory_order_relaxed);
  rep due = 0;
  // Saturates for a clock read near the bottom of the nanosecond range.
  if (__builtin_sub_overflow(tat, tolerance_ + static_cast<rep>(queued_) * interval_, &due)) {
    due = never;
  }
  return Clock::time_point(Clock::duration(due));
}

void RateLimitLedger::consume_head() noexcept {
  const std::lock_guard lock(mutex_);
  BOOST_ASSERT(queued_ > 0);
  --queued_;
}

bool RateLimitLedger::reserve_displacing(const Clock& clock, bool (*displace)(void*) noexcept,
                                         void* arg) noexcept {
  const std::lock_guard lock(mutex_);
  // The displaced call gives its reservation back through cancel_reservation, which waits for
  // this mutex: nobody else can take the place it leaves before this call has taken it.
  if (!displace(arg)) return false;
  const rep now = clock.now().time_since_epoch().count();
  const rep tat = tat_.load(std::memory_order_relaxed);
  ++queued_;
  tat_.store((tat > now ? tat : now) + interval_, std::memory_order_relaxed);
  return true;
}

Clock::duration RateLimitLedger::queued_debt(Clock::time_point now) const noexcept {
  const std::lock_guard lock(mutex_);
  const rep lead = ahead(tat_.load(std::memory_order_relaxed), now.time_since_epoch().count());
  return Clock::duration(lead > tolerance_ ? lead - tolerance_ : 0);
}

void RateLimitLedger::cancel_reservation() noexcept {
  const std::lock_guard lock(mutex_);
  BOOST_ASSERT(queued_ > 0);
  --queued_;
  tat_.store(tat_.load(std::memory_order_relaxed) - interval_, std::memory_order_relaxed);
}

void RateLimitLedger::hold_for(Clock::time_point now, Clock::duration hold) noexcept {
  const rep d = hold < Clock::duration::zero() ? 0 : std::min(hold, max_hold).count();
  // TAT - tau is when the next permit is due; with q reservations queued, the oldest is due q
  // intervals before that. Saturating below the top of the range by a whole schedule, so that
  // acquire's TAT + T never overflows (only a clock read far outside any real one gets there).
  const auto target = [&](std::uint32_t queued) {
    constexpr rep top = std::numeric_limits<rep>::max() - max_schedule;
    rep t = 0;
    if (__builtin_add_overflow(now.time_since_epoch().count(), d, &t) ||
        __builtin_add_overflow(t, tolerance_ + static_cast<rep>(queued) * interval_, &t) ||
        t > top) {
      return top;
    }
    return t;
  };
  if (queue_limit_ == 0) {
    const rep t = target(0);
    rep tat = tat_.load(std::memory_order_relaxed);
    // Release, as an admission's write (acquire_unqueued reads the clock after its load).
    while (tat < t && !tat_.compare_exchange_weak(tat, t, std::memory_order_release,
                                                  std::memory_order_relaxed)) {
    }
    return;
  }
  const std::lock_guard lock(mutex_);
  const rep t = target(queued_);
  if (tat_.load(std::memory_order_relaxed) < t) tat_.store(t, std::memory_order_relaxed);
}

std::uint32_t RateLimitLedger::available(rep tat, rep now) const noexcept {
  if (tat == never) return burst_;
  const rep lead = ahead(tat, now);
  const rep consumed = ceil_div(lead, interval_);
  return consumed >= static_cast<rep>(burst_) ? 0 : burst_ - static_cast<std::uint32_t>(consumed);
}

RateLimitState RateLimitLedger::snapshot(Clock::time_point now) const noexcept {
  const rep t = now.time_since_epoch().count();
  if (queue_limit_ == 0) return {available(tat_.load(std::memory_order_relaxed), t), 0};
  const std::lock_guard lock(mutex_);
  if (queued_ > 0) return {0, queued_};
  return {available(tat_.load(std::memory_order_relaxed), t), 0};
}

std::uint32_t RateLimitLedger::queued() const noexcept {
  if (queue_limit_ == 0) return 0;
  const std::lock_guard lock(mutex_);
  return queued_;
}

// ---- RateLimitStrategy ------------------------------------------------------------------------

RateLimitStrategy::RateLimitStrategy(RateLimitOptions options)
    : options_(validated(std::move(options))),
      queue_timeout_(options_.queue_timeout),
      ledger_(emission_interval(options_),
              static_cast<std::uint32_t>(options_.burst.value_or(options_.permits)),
              static_cast<std::uint32_t>(options_.queue_limit)),
      turn_(1u, LimiterLedger::max_count) {}

std::string RateLimitStrategy::describe() const {
  std::string s = "RateLimit(" + std::to_string(options_.permits) + "/" +
                  detail::format_duration(options_.window);
  if (ledger_.burst() != static_cast<std::uint32_t>(options_.permits)) {
    s += ", burst " + std::to_string(ledger_.burst());
  }
  if (options_.queue_limit > 0) s += ", queue " + std::to_string(options_.queue_limit);
  if (queue_timeout_.enabled()) {
    s += ", queue timeout " + detail::describe_queue_timeout(options_.queue_timeout);
  }
  return s + ")";
}

StrategyTraits RateLimitStrategy::strategy_traits() const noexcept {
  StrategyTraits t;
  t.stateful = true;
  t.waits_in_queue = true;  // queued executions park inside themselves (Step::queue)
  if (queue_timeout_.enabled()) {
    t.frame_size = frame_with_deadline;
    t.needs_executor = true;  // the queue deadline's expiry runs on the call's executor
  }
  return t;
}

Step RateLimitStrategy::start(Layer& layer, Frame& f) {
  const RateLimitLedger::Decision d = ledger_.acquire(layer.clock());
  if (d.kind == Kind::admitted) [[likely]] {
    return Step::run_inner;
  }
  // Out of line, so that the admission stays small enough to inline where the engine calls it.
  return contend(layer, f, d.retry_after, d.kind == Kind::queued);
}

[[gnu::noinline]] Step RateLimitStrategy::contend(Layer& layer, Frame& f,
                                                  Clock::duration retry_after, bool queued) {
  if (ledger_.queue_limit() == 0) return reject(layer, f, retry_after);  // never queues
  Context& context = layer.context();
  if (options_.priority_generator) {
    try {
      context.set_priority(options_.priority_generator(context));
    } catch (...) {
      if (queued) ledger_.cancel_reservation();  // the call never queued after all
      throw;
    }
  }
  if (!queued && !displace(layer)) return reject(layer, f, retry_after);
  f.hold.reserve(*this);  // from here on, the frame gives the reservation back
  if (queue_timeout_.enabled()) {
    auto* d = ::new (static_cast<void*>(&detail::queue_wait_deadline(f))) detail::QueueWaitDeadline;
    f.queue_deadline = true;
    const std::uint32_t waiting = ledger_.queued();  // this call's reservation included
    d->begin(layer, queue_timeout_.deadline(layer.clock().now(), waiting > 0 ? waiting - 1 : 0),
             queue_timeout_.same_duration());
  }
  return take_turn(layer, f);
}

bool RateLimitStrategy::displace(Layer& layer) {
  struct Displace {
    QueueSemaphore<LimiterLedger>* turn;
    std::int32_t priority;
    static bool run(void* self) noexcept {
      auto* d = static_cast<Displace*>(self);
      return d->turn->evict_below(d->priority, make_error_code(errc::rate_limited));
    }
  };
  Displace d{&turn_, layer.context().priority()};
  if (d.priority <= turn_.lowest_queued_priority()) return false;  // nobody lower waits
  return ledger_.reserve_displacing(layer.clock(), &Displace::run, &d);
}

Step RateLimitStrategy::inner_complete(Layer& layer, Frame& /*f*/) {
  if (!options_.hold_from_outcome) [[likely]] {
    return Step::complete;
  }
  const std::optional<Clock::duration> hold = options_.hold_from_outcome(layer.outcome());
  if (hold) ledger_.hold_for(layer.clock().now(), *hold);
  return Step::complete;
}

Step RateLimitStrategy::take_turn(Layer& layer, Frame& f) {
  if (f.hold.try_take_turn()) return at_head(layer, f);
  // The engine waits in the same FIFO once this returns: on an io_context the wait lives in the
  // execution (parking allocates nothing), a synchronous execution blocks until the turn, the
  // caller's stop or the context's deadline (at_head checks the deadline again before anything
  // runs). A decision the semaphore makes at once comes back through wait_complete (without a hop
  // for the embedded wait).
  return Step::queue(turn_);
}

Step RateLimitStrategy::at_head(Layer& layer, Frame& f) {
  if (leaving(layer)) {
    // Cancelled, or past its deadline (its queue deadline, in a synchronous execution), while
    // the turn was on its way (the semaphore ignores a cancellation once it has granted), or an
    // outer timeout expired: it never runs.
    return leave(layer, f, boost::asio::error::operation_aborted);
  }
  const Clock::time_point now = layer.clock().now();
  const Clock::time_point due = ledger_.head_due();
  if (now < due) {
    if (f.queue_deadline && detail::queue_wait_deadline(f).expired(now)) [[unlikely]] {
      // Its queue deadline has passed before its due time (the expiry is on its way).
      return leave(layer, f, boost::asio::error::operation_aborted, true);
    }
    return layer.wait_until(due);  // cancellable, like any wait
  }
  if (f.queue_deadline) [[unlikely]] {
    (void)detail::queue_wait_deadline(f).end(layer, false);  // started in time
    f.end_queue_deadline();
  }
  f.hold.start();  // the reservation is used, and the next queued call becomes the head
  return Step::run_inner;
}

Step RateLimitStrategy::leave(Layer& layer, Frame& f, const boost::system::error_code& ec,
                              bool expired) {
  bool timed_out = expired;
  if (f.queue_deadline) {
    timed_out |=
        detail::queue_wait_deadline(f).end(layer, ec == boost::asio::error::operation_aborted);
    f.end_queue_deadline();
  }
  f.hold.leave();  // the reservation (and the turn) go back
  if (timed_out) return reject(layer, f, Clock::duration::zero(), errc::queue_timeout);
  if (ec == errc::rate_limited) {
    // Displaced by a call of higher priority: rejected as a full queue rejects a newcomer.
    return reject(layer, f, ledger_.queued_debt(layer.clock().now()));
  }
  layer.outcome().set_error(ec);
  return Step::complete;
}

Step RateLimitStrategy::wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec) {
  if (f.rejecting) return Step::complete;  // the asynchronous rejection hook set the outcome
  if (!ec && f.hold.reserved()) {
    // The turn was granted (it is this call's from now on), or, at the head, the due-time wait
    // ended.
    if (!f.hold.has_turn()) f.hold.adopt_turn();
    return at_head(layer, f);
  }
  // Cancelled while queued (operation_aborted), timed out in the queue, displaced by a call of
  // higher priority (rate_limited), or the limiter is being destroyed (closed).
  return leave(layer, f, ec);
}

void detail::RateLimitFrame::leave_queue() noexcept {
  if (queue_deadline) end_queue_deadline();
  hold.leave();
}

void detail::RateLimitFrame::end_queue_deadline() noexcept {
  QueueWaitDeadline& d = queue_wait_deadline(*this);
  d.drop();
  d.~QueueWaitDeadline();
  queue_deadline = false;
}

void detail::RateLimitHold::leave_queue() noexcept {
  RateLimitStrategy* limiter = std::exchange(limiter_, nullptr);
  limiter->ledger_.cancel_reservation();
  if (std::exchange(turn_, false)) (void)limiter->turn_.release();
}

Step RateLimitStrategy::reject(Layer& layer, Frame& f, Clock::duration retry_after, errc reason) {
  const bool timed_out = reason == errc::queue_timeout;
  const std::optional<Clock::duration> after =
      timed_out ? std::nullopt : std::optional<Clock::duration>(retry_after);
  if (layer.observed()) {
    layer.emit(
        Rejected{timed_out ? RejectionKind::queue_timeout : RejectionKind::rate_limit, after});
  }
  const RateLimitRejectedEvent event{
      retry_after,           static_cast<std::uint32_t>(options_.permits),
      options_.window,       ledger_.burst(),
      ledger_.queue_limit(), layer.strategy_index(),
      layer.context(),       reason};
  return detail::run_rejection_hooks(layer, event, options_.on_rejected, make_error_code(reason),
                                     after, [&f] { f.rejecting = true; });
}

std::shared_ptr<RateLimitStrategy> rate_limit(int permits, Clock::duration window) {
  RateLimitOptions options;
  options.permits = permits;
  options.window = window;
  return std::make_shared<RateLimitStrategy>(std::move(options));
}

std::shared_ptr<RateLimitStrategy> rate_limit(RateLimitOptions options) {
  return std::make_shared<RateLimitStrategy>(std::move(options));
}

}  // namespace kevlar
