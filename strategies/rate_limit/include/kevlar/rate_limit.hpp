// kevlar — the rate limit strategy: a GCRA schedule in one atomic word, queued reservations when
// queueing is allowed.
#pragma once

#include <kevlar/basic_shield.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/error.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/limiter_ledger.hpp>
#include <kevlar/queue_timeout.hpp>
#include <kevlar/queue_wait.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace kevlar {

/// Permits available now and calls waiting for a reserved permit, as a rate limit reports them.
struct RateLimitState {
  /// Permits a call could take now: `burst - ceil(debt / emission_interval)`, clamped at 0; the
  /// whole burst when the limiter was never used; 0 while anyone is queued.
  std::uint32_t available = 0;
  std::uint32_t queued = 0;  ///< calls holding a reservation and waiting for its due time
};

/// The decisions of a rate limit, without I/O: the generic cell rate algorithm (GCRA) over a
/// caller-supplied time, and the accounting of queued reservations. RateLimitStrategy drives it
/// with its clock; tests drive it with any time they like.
///
/// GCRA keeps one value, the theoretical arrival time (TAT) of the next call, starting at minus
/// infinity (the full burst is available at once). With emission interval `T` and burst tolerance
/// `tau = (burst - 1) * T`, a call at `now` is admitted iff `TAT - now <= tau`, and then
/// `TAT = max(now, TAT) + T`. That is a token bucket of `burst` tokens refilled continuously, one
/// every `T`, without the bucket's bookkeeping: idle time never accumulates beyond the burst, and
/// nothing is ever refunded (a failed call has consumed its permit).
///
/// Without a queue (`queue_limit == 0`) acquire() is one CAS loop on one atomic 64-bit word: no
/// lock, no allocation. A rejection's retry-after is exact: `TAT - now - tau`, the first moment a
/// call would be admitted.
///
/// With a queue, acquire() runs under a mutex. A call that finds no permit (or anyone queued)
/// reserves one if fewer than `queue_limit` calls are queued: the reservation advances TAT by `T`
/// like an admission, and its call may start at its due time. Reservations are FIFO, so the
/// oldest one is due at `TAT - tau - queued * T` (head_due()); when it starts, consume_head()
/// removes it. A queued call that leaves (cancellation, a failure while waiting) gives its
/// reservation back with cancel_reservation(): TAT moves back by `T` and every later reservation
/// becomes due `T` earlier, so no cancel/requeue sequence leaves debt behind. An overflow
/// rejection's retry-after includes the queued debt: `max(0, TAT - now - tau)`.
///
/// Times are nanosecond counts of Clock::time_point; `T` is `window / permits` rounded up to the
/// nanosecond, so the limiter never admits more than `permits` per `window` over time (it may
/// admit very slightly fewer when the window is not a multiple of the permits).
///
/// Thread-safety: every member may be called from any thread at once.
class RateLimitLedger {
 public:
  /// What acquire() decided.
  struct Decision {
    enum class Kind : unsigned char {
      admitted,  ///< a permit was taken: the call runs now
      queued,    ///< a reservation was taken: the call runs at its turn (queue mode only)
      rejected,  ///< no permit and no queue place: see retry_after
    };
    Kind kind = Kind::admitted;
    /// For a rejection: how long until a call would be admitted (or, for a full queue, until the
    /// queued debt is paid); zero otherwise.
    Clock::duration retry_after{};
  };

  /// The largest burst, and the largest queue limit, the ledger counts.
  static constexpr std::uint32_t max_count = 0x7FFF'FFFFu;

  /// `emission_interval` is `T` (> 0); `burst` (>= 1) the bucket's capacity; `queue_limit` the
  /// calls that may hold a reservation. Throws std::invalid_argument if a value is out of range or
  /// `(burst + queue_limit) * T` does not fit in a signed 64-bit nanosecond count.
  RateLimitLedger(Clock::duration emission_interval, std::uint32_t burst,
                  std::uint32_t queue_limit);
  RateLimitLedger(const RateLimitLedger&) = delete;
  RateLimitLedger& operator=(const RateLimitLedger&) = delete;

  /// Takes a permit, reserves one (queue mode), or rejects with a retry-after, at the time
  /// `clock` reads: what RateLimitStrategy calls. No call is rejected, nor given a retry-after, on
  /// a reading older than the schedule it is compared with: without a queue, a rejection reads
  /// the clock again after its last load of the schedule (a call whose first reading predates a
  /// concurrent admission, or that lost a compare-exchange to one, is judged at the time it is
  /// judged); with a queue, the clock is read under the ledger's mutex. So a rejection's
  /// retry-after is at most one emission interval past the last admission (without a hold).
  /// Lock-free without a queue; under the ledger's mutex with one. Never allocates, never throws.
  Decision acquire(const Clock& clock) noexcept {
    if (queue_limit_ != 0) return acquire_queued(clock);
    // The uncontended admission: one reading, one load, one compare-exchange. An admission may be
    // decided on a reading taken before the load (an older reading only makes the lead look
    // longer, and the admission counts from it); anything else goes to acquire_contended, which
    // reads the clock again after each load.
    const rep now = clock.now().time_since_epoch().count();
    rep tat = tat_.load(std::memory_order_acquire);
    if (ahead(tat, now) <= tolerance_) [[likely]] {
      if (tat_.compare_exchange_strong(tat, (tat > now ? tat : now) + interval_,
                                       std::memory_order_release, std::memory_order_relaxed)) {
        return {};
      }
    }
    return acquire_contended(clock);
  }
  /// acquire(clock) at a fixed time `now` (every reading of the clock answers `now`): for tests
  /// and callers that drive the ledger with times of their own.
  Decision acquire(Clock::time_point now) noexcept {
    if (queue_limit_ == 0) return acquire_unqueued(now.time_since_epoch().count());
    return acquire_queued(now.time_since_epoch().count());
  }

  /// Queue mode: when the oldest reservation is due (meaningful while queued() > 0).
  [[nodiscard]] Clock::time_point head_due() const noexcept;
  /// Queue mode: the oldest reservation's call starts; the reservation leaves the queue.
  void consume_head() noexcept;
  /// Queue mode: a queued call gives its reservation back (it was cancelled, or failed while
  /// waiting): TAT moves back by T, later reservations become due T earlier.
  void cancel_reservation() noexcept;
  /// Queue mode, a full queue: under the ledger's mutex, calls `displace(arg)`, which takes a
  /// waiting call of lower priority out of the queue; if it did, reserves a permit for the
  /// newcomer, whatever the queue limit says, at `clock.now()`, and returns true. The displaced
  /// call gives its reservation back when it leaves (until then queued() counts both); holding the
  /// mutex across both keeps that reservation from being taken by a third call in between.
  bool reserve_displacing(const Clock& clock, bool (*displace)(void* arg) noexcept,
                          void* arg) noexcept;
  /// Queue mode: how long a newcomer would wait to be served at all at `now` (the queued debt, as
  /// a full queue's rejection reports it).
  [[nodiscard]] Clock::duration queued_debt(Clock::time_point now) const noexcept;

  /// The longest hold_for honours: 2^32 - 2 ms (49.7 days), the bound of kevlar's other
  /// durations.
  static constexpr Clock::duration max_hold = kevlar::max_duration;

  /// Admits nothing before `now + hold` (a dependency said when to come back): the schedule moves
  /// so that the next permit, or with a queue the oldest reservation, is due then at the earliest,
  /// and later reservations follow it T apart. A hold that ends sooner than the schedule already
  /// does changes nothing. Rejections meanwhile carry the rest of the hold as their retry-after,
  /// and the first call after it finds one permit, not a whole burst. `hold` is clamped to
  /// [0, max_hold]. Lock-free without a queue; under the ledger's mutex with one. Never throws.
  void hold_for(Clock::time_point now, Clock::duration hold) noexcept;

  /// Permits available at `now` and calls queued, read coherently (one load without a queue,
  /// under the mutex with one).
  [[nodiscard]] RateLimitState snapshot(Clock::time_point now) const noexcept;
  /// Reservations currently held.
  [[nodiscard]] std::uint32_t queued() const noexcept;

  /// T: the time one permit takes to come back, `ceil(window / permits)`. Constant; thread-safe.
  [[nodiscard]] Clock::duration emission_interval() const noexcept {
    return Clock::duration(interval_);
  }
  /// tau: how far ahead of now the schedule may run while still admitting a call.
  [[nodiscard]] Clock::duration burst_tolerance() const noexcept {
    return Clock::duration(tolerance_);
  }
  /// The bucket's capacity: permits a call sequence may take at once after an idle period.
  /// Constant; thread-safe.
  [[nodiscard]] std::uint32_t burst() const noexcept { return burst_; }
  /// Reservations that may wait at once (0: no queue, rejections only). Constant; thread-safe.
  [[nodiscard]] std::uint32_t queue_limit() const noexcept { return queue_limit_; }

 private:
  using rep = std::int64_t;
  /// TAT before any call: minus infinity.
  static constexpr rep never = std::numeric_limits<rep>::min();

  /// TAT - now, or a value <= 0 for "not ahead of now" (never overflows: TAT == never reads as
  /// far behind).
  static rep ahead(rep tat, rep now) noexcept { return tat <= now ? 0 : tat - now; }

  /// One try of the lock-free GCRA step at `now` against `tat` (the last value read): true with
  /// the decision in `d`, or false with `tat` reloaded by the failed exchange.
  bool try_gcra(rep& tat, rep now, Decision& d) noexcept {
    const rep lead = ahead(tat, now);
    if (lead > tolerance_) {
      d = {Decision::Kind::rejected, Clock::duration(lead - tolerance_)};
      return true;
    }
    const rep next = (tat > now ? tat : now) + interval_;
    if (!tat_.compare_exchange_weak(tat, next, std::memory_order_release,
                                    std::memory_order_acquire)) {
      return false;
    }
    d = {};
    return true;
  }
  /// The lock-free GCRA step at a fixed time.
  Decision acquire_unqueued(rep now) noexcept {
    rep tat = tat_.load(std::memory_order_acquire);
    Decision d;
    while (!try_gcra(tat, now, d)) {
    }
    return d;
  }
  /// The lock-free GCRA step at the time `clock` reads, each reading taken after the load of the
  /// schedule it is compared with (acquire ordering; an admission's write is a release): what
  /// acquire(clock) falls back to when its first reading would not admit, or its compare-exchange
  /// lost to another admission.
  [[gnu::noinline]] Decision acquire_contended(const Clock& clock) noexcept;
  /// Queue mode, at a fixed time / at the time `clock` reads under the mutex.
  [[gnu::noinline]] Decision acquire_queued(rep now) noexcept;
  [[gnu::noinline]] Decision acquire_queued(const Clock& clock) noexcept;
  /// Queue mode, under the mutex: the decision at `now`.
  Decision admit_locked(rep now) noexcept;
  [[nodiscard]] std::uint32_t available(rep tat, rep now) const noexcept;

  alignas(64) std::atomic<rep> tat_{never};
  rep interval_;
  rep tolerance_;
  std::uint32_t burst_;
  std::uint32_t queue_limit_;
  std::uint32_t queued_ = 0;  ///< reservations held (queue mode; under mutex_)
  mutable std::mutex mutex_;  ///< queue mode only
};

/// What the rejection hooks receive.
struct RateLimitRejectedEvent {
  Clock::duration retry_after{};  ///< the rejection's retry-after (also in the error)
  std::uint32_t permits = 0;
  Clock::duration window{};
  std::uint32_t burst = 0;
  std::uint32_t queue_limit = 0;
  std::size_t strategy_index = 0;  ///< position of the limiter in the pipeline (0: outermost)
  Context& context;                ///< the rejected execution's context (do not keep it)
  /// Why: `errc::rate_limited` (no permit and no queue place, or displaced from the queue by a
  /// call of higher priority) or `errc::queue_timeout` (waited its longest; retry_after zero).
  errc reason = errc::rate_limited;
};

/// Options of Shield::rate_limit. Defaults follow Kevlar: 100 permits per second, a burst of
/// `permits`, no queue.
struct RateLimitOptions {
  /// Permits replenished per window (1 .. RateLimitLedger::max_count).
  int permits = 100;
  /// The replenishment window (> 0). One permit comes back every `window / permits`.
  Clock::duration window = std::chrono::seconds(1);
  /// How many permits may be taken at once after an idle period (1 .. RateLimitLedger::max_count);
  /// unset means `permits`. It may exceed `permits`.
  std::optional<int> burst;
  /// Calls that may wait for a reserved future permit (0 .. RateLimitLedger::max_count); 0 rejects
  /// as soon as no permit is available.
  int queue_limit = 0;
  /// Runs for each rejection, before the rejection becomes the outcome. A function is called at
  /// once; a coroutine (Hook) is awaited: in an asynchronous execution it runs on the execution's
  /// executor, a synchronous execution runs it to completion on a private io_context. An
  /// exception either form throws replaces the rejection.
  Hook<void(const RateLimitRejectedEvent&)> on_rejected;
  /// Reads the outcome of each call the limiter admitted, when it completes (on that call's
  /// thread); a returned duration holds the limiter for that long (RateLimitLedger::hold_for):
  /// no call through it, from any shield sharing it, is admitted before then, and rejections say
  /// how long is left. For a dependency's "come back later", such as an HTTP Retry-After
  /// (kevlar::http's standard shield sets it). An exception it throws replaces the call's
  /// outcome. Null (the default): the limiter never looks at outcomes. Not in Kevlar.
  std::function<std::optional<Clock::duration>(OutcomeRef)> hold_from_outcome;
  /// Queue mode: the priority of a call that finds no permit (called then, before it queues or is
  /// rejected); its result becomes the context's priority (Context::priority()). Empty (the
  /// default): the context's priority as the caller set it (CallOptions::priority, 0 if not).
  /// Higher is served first; a call of higher priority than the newest of the lowest queued ones
  /// takes its place in a full queue. It runs each time the execution finds no permit (again for
  /// a retry's next attempt) and sees the context's priority as it is then, its own last answer
  /// included. Never called without a queue. An exception it throws fails the call.
  std::function<std::int32_t(const Context&)> priority_generator;
  /// Queue mode: how long a queued call may wait (for its turn and its due time together) before
  /// it fails with `errc::queue_timeout` (a rejection: the Rejected event, the hooks): none (the
  /// default), fixed or adaptive (CoDel). With one, an asynchronous execution needs an executor.
  QueueTimeout queue_timeout;
};

class RateLimitStrategy;

namespace detail {

/// What a queued call holds at a rate limit: its reservation in the ledger and, once it is the
/// head of the queue, the turn. Both go back when the hold goes, unless the call started (a turn
/// that a wait granted too late, or whose delivery was dropped, went back already). One pointer
/// and a flag, so that the frame stays 16 bytes.
class RateLimitHold {
 public:
  RateLimitHold() noexcept = default;
  RateLimitHold(const RateLimitHold&) = delete;
  RateLimitHold& operator=(const RateLimitHold&) = delete;
  ~RateLimitHold() {
    // An admitted call holds nothing: its frame's end costs one test.
    if (limiter_ != nullptr) [[unlikely]] {
      leave_queue();
    }
  }

  /// The ledger queued a reservation for this call (RateLimitLedger::Decision::Kind::queued).
  void reserve(RateLimitStrategy& limiter) noexcept { limiter_ = &limiter; }
  /// True while the call holds a reservation.
  [[nodiscard]] bool reserved() const noexcept { return limiter_ != nullptr; }
  /// Takes the turn if it is free; true if it did.
  [[nodiscard]] inline bool try_take_turn() noexcept;
  /// The wait for the turn was granted: the turn is this call's.
  void adopt_turn() noexcept { turn_ = true; }
  /// True while the call holds the turn.
  [[nodiscard]] bool has_turn() const noexcept { return turn_; }
  /// The call starts: its reservation leaves the queue as used, and the turn passes on.
  inline void start() noexcept;
  /// The call leaves the queue: its reservation, then the turn, go back (nothing if none held).
  void leave() noexcept {
    if (limiter_ != nullptr) leave_queue();
  }

 private:
  /// leave() with a reservation held (out of line: rate_limit.cpp).
  void leave_queue() noexcept;

  RateLimitStrategy* limiter_ = nullptr;
  bool turn_ = false;
};

/// A rate limit's per-execution state, in its layer's frame: what a queued call holds goes back
/// with the frame, however the execution ends.
struct RateLimitFrame {
  RateLimitFrame() noexcept = default;
  RateLimitFrame(const RateLimitFrame&) = delete;
  RateLimitFrame& operator=(const RateLimitFrame&) = delete;
  ~RateLimitFrame() {
    // A queue deadline is armed only while the call holds a reservation: an admitted call's
    // frame pays the hold's one test.
    if (hold.reserved()) [[unlikely]] {
      leave_queue();
    }
  }
  /// The execution ends while its call is queued: the queue deadline, then the reservation and
  /// the turn, go (out of line).
  void leave_queue() noexcept;
  /// Disarms and destroys the queue deadline behind the frame (out of line).
  void end_queue_deadline() noexcept;

  /// Laid out as a base would be: the flags fit in its padding.
  [[no_unique_address]] RateLimitHold hold;
  bool rejecting = false;       ///< rejected; the asynchronous rejection hook is running
  bool queue_deadline = false;  ///< a QueueWaitDeadline lives behind the frame
};

}  // namespace detail

/// Admits at most `permits` calls per `window` on average, with bursts up to `burst` (GCRA; see
/// RateLimitLedger), optionally queueing up to `queue_limit` calls for a reserved future permit.
///
/// Without a queue, admission is one CAS on one atomic word (no lock, no allocation, no executor
/// hop) and a call beyond the rate fails at once with `errc::rate_limited` and an exact
/// retry-after (`Outcome::retry_after()`, `Error::retry_after()`, the Rejected event and the
/// hooks' event): the first moment a call would be admitted. On a rejection: the Rejected event
/// (the rejections metric), then on_rejected (a coroutine is awaited); its exception replaces
/// the rejection.
///
/// With a queue, a call that finds no permit reserves one and waits until it is the first
/// queued call and its reservation is due, on the execution's executor through the shield clock's
/// timers (no kernel timer per call); then it runs. A full queue rejects, the retry-after
/// including the queued debt. Queued calls are woken one after the other: the first alone waits
/// for its due time; the others wait for their turn on an UnpairedSemaphore (no polling).
///
/// Among equal priorities, reservations are served in the order they were taken; two calls
/// reserving at the same moment on different threads may take their turns in either order (the
/// schedule is the same).
///
/// Priorities (queue mode): the calls waiting for the turn are ordered by their context's
/// priority (CallOptions::priority, or RateLimitOptions::priority_generator), higher first and in
/// arrival order within a priority; the call that holds the turn (the one waiting for its due
/// time) is not overtaken. A call that finds the queue full takes the place of the newest waiting
/// call of the lowest priority if that is lower than its own: the displaced call gives its
/// reservation back and fails with `errc::rate_limited` and the queued debt as retry-after (a
/// rejection: event and hooks). Reservations are interchangeable (the schedule only counts them),
/// so the newcomer's is due when the displaced one's would have been. Queue-wait timeouts
/// (RateLimitOptions::queue_timeout) bound the whole wait, turn and due time, with
/// `errc::queue_timeout`, in asynchronous and synchronous executions alike.
///
/// Cancellation: a queued asynchronous call honours terminal, partial and total cancellation while
/// it waits (for its turn or its due time), including one that arrives while the turn is on its
/// way to it: it gives its reservation back (every later call becomes due one interval earlier),
/// never runs, and completes with `operation_aborted` — a cancellation, not a rejection (no
/// hooks). An outer timeout's expiry ends the wait the same way. A synchronous execute waits in the
/// same queue, blocking its thread: its stop token takes it out at any point, and so does the
/// context's deadline (an outer timeout's budget), whether it waits for its turn or for its due
/// time; it leaves as a cancellation (`operation_aborted`, which the timeout reports as
/// `errc::timeout`) and never runs past the deadline. A permit taken is never given back (the call
/// has been admitted).
///
/// One instance is one schedule, in the time of the shields' clock: every shield containing it
/// shares it (it is stateful; it may appear once per chain), and they should all use one clock.
/// Thread-safety: any number of concurrent executions, on any threads and executors.
class RateLimitStrategy final : public BasicStrategy<RateLimitStrategy, detail::RateLimitFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit RateLimitStrategy(RateLimitOptions options);
  /// Creates a rate limit to add with Shield::use (keep the pointer to observe its state).
  [[nodiscard]] static std::shared_ptr<RateLimitStrategy> create(RateLimitOptions options) {
    return std::make_shared<RateLimitStrategy>(std::move(options));
  }

  /// `RateLimit(100/1s)`, with `, burst N` when the burst differs from the permits,
  /// `, queue N` with a queue and `, queue timeout fixed(250ms)` with a queue timeout.
  [[nodiscard]] std::string describe() const override;
  // BasicStrategy's callbacks, called by the engine on the execution's thread.
  /// Proactive and stateful (one instance per chain).
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Takes a permit and runs the inner part, queues the call, or rejects it with
  /// `errc::rate_limited`.
  Step start(Layer& layer, Frame& f);
  /// The admitted call completed: hold_from_outcome, if set, reads its outcome.
  Step inner_complete(Layer& layer, Frame& f);
  /// The turn or the due-time wait ended (or the asynchronous rejection hook did).
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);

  /// {available, queued} at `clock.now()`: pass the clock of the shields the limiter serves (the
  /// steady clock by default). Thread-safe.
  [[nodiscard]] RateLimitState state(const Clock& clock = *Clock::steady()) const noexcept {
    return ledger_.snapshot(clock.now());
  }
  [[nodiscard]] const RateLimitOptions& options() const noexcept { return options_; }
  [[nodiscard]] const RateLimitLedger& ledger() const noexcept { return ledger_; }

 private:
  friend class detail::RateLimitHold;
  Step reject(Layer& layer, Frame& f, Clock::duration retry_after,
              errc reason = errc::rate_limited);
  /// No permit: the call's priority, then a displacement, a reservation or a rejection.
  Step contend(Layer& layer, Frame& f, Clock::duration retry_after, bool queued);
  /// A full queue: displaces a waiting call of lower priority; true if this call now holds a
  /// reservation.
  bool displace(Layer& layer);
  /// The queued call leaves without running: timed out in the queue (its queue deadline ended
  /// the wait, or `expired`: it has passed), or ended by `ec`.
  Step leave(Layer& layer, Frame& f, const boost::system::error_code& ec, bool expired = false);
  Step take_turn(Layer& layer, Frame& f);
  Step at_head(Layer& layer, Frame& f);

  RateLimitOptions options_;
  detail::QueueTimeoutPolicy queue_timeout_;
  RateLimitLedger ledger_;
  /// Queue mode: the turn, held by the queued call that waits for its due time; the others wait
  /// for it, by priority and FIFO within one.
  QueueSemaphore<LimiterLedger> turn_;
};

namespace detail {

inline bool RateLimitHold::try_take_turn() noexcept {
  turn_ = limiter_->turn_.try_acquire();
  return turn_;
}

inline void RateLimitHold::start() noexcept {
  RateLimitStrategy* limiter = std::exchange(limiter_, nullptr);
  limiter->ledger_.consume_head();
  turn_ = false;
  (void)limiter->turn_.release();  // the next queued call becomes the head
}


}  // namespace detail

/// A rate limit: at most `permits` calls per `window` on average, bursts up to `permits`, no queue.
/// Add it with BasicShield::use or with (`kevlar::Shield::rate_limit` is the fluent form).
[[nodiscard]] std::shared_ptr<RateLimitStrategy> rate_limit(int permits, Clock::duration window);
/// A rate limit configured by `options` (std::invalid_argument names an invalid option).
[[nodiscard]] std::shared_ptr<RateLimitStrategy> rate_limit(RateLimitOptions options);

}  // namespace kevlar
