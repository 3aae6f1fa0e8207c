#include <kevlar/clock.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <utility>

namespace kevlar {
namespace {

/// Completion handler for a ClockWaiter: carries the waiter's executor and cancellation slot, and
/// abandons the waiter if destroyed uninvoked.
class WaiterHandler {
 public:
  using executor_type = boost::asio::any_io_executor;
  using cancellation_slot_type = boost::asio::cancellation_slot;

  explicit WaiterHandler(ClockWaiter* waiter) noexcept : waiter_(waiter) {}
  WaiterHandler(WaiterHandler&& other) noexcept : waiter_(std::exchange(other.waiter_, nullptr)) {}
  WaiterHandler& operator=(WaiterHandler&&) = delete;
  ~WaiterHandler() {
    if (waiter_ != nullptr) waiter_->abandon();
  }
  void operator()(const boost::system::error_code& ec) {
    std::exchange(waiter_, nullptr)->complete(ec);
  }
  // The associators answer on a moved-from handler too (an initiation that fails after moving it
  // may ask).
  [[nodiscard]] executor_type get_executor() const noexcept {
    return waiter_ != nullptr ? waiter_->executor() : executor_type();
  }
  [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept {
    return waiter_ != nullptr ? waiter_->cancellation_slot() : cancellation_slot_type();
  }

 private:
  ClockWaiter* waiter_;
};

class SteadyClockTimer final : public ClockTimer {
 public:
  explicit SteadyClockTimer(const boost::asio::any_io_executor& ex) : timer_(ex) {}
  void async_wait_until(Clock::time_point deadline, ClockWaiter& waiter) override {
    timer_.expires_at(std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            deadline.time_since_epoch())));
    timer_.async_wait(WaiterHandler(&waiter));
  }
  void cancel() noexcept override { timer_.cancel(); }

 private:
  boost::asio::steady_timer timer_;
};

class SteadyClock final : public Clock {
 public:
  time_point now() const noexcept override {
    return std::chrono::time_point_cast<duration>(std::chrono::steady_clock::now());
  }
  time_point coarse_now() const noexcept override {
    // CLOCK_MONOTONIC_COARSE shares CLOCK_MONOTONIC's epoch (that of std::chrono::steady_clock
    // on Linux) at the resolution of the scheduler tick, for a fraction of the cost.
#if defined(CLOCK_MONOTONIC_COARSE)
    timespec ts{};
    if (::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0) {
      return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
    }
#endif
    return now();
  }
  bool sleep_until(time_point deadline, std::stop_token stop) const override {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    const auto until = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            deadline.time_since_epoch()));
    cv.wait_until(lock, stop, until, [] { return false; });
    return !stop.stop_requested() && now() >= deadline;
  }
  std::unique_ptr<ClockTimer> make_timer(const boost::asio::any_io_executor& ex) const override {
    return std::make_unique<SteadyClockTimer>(ex);
  }
};

}  // namespace

const std::shared_ptr<const Clock>& Clock::steady() {
  static const std::shared_ptr<const Clock> instance = std::make_shared<SteadyClock>();
  return instance;
}

// ---- ManualClock
// ---------------------------------------------------------------------------------

class ManualClockTimer final : public ClockTimer {
 public:
  explicit ManualClockTimer(std::shared_ptr<std::atomic<ManualClock*>> clock) noexcept
      : clock_(std::move(clock)) {}
  ~ManualClockTimer() override {
    if (ManualClock* c = clock()) c->remove(this);
  }

  void async_wait_until(Clock::time_point deadline, ClockWaiter& waiter) override {
    ManualClock::Entry e{
        deadline, &waiter, this,
        boost::asio::prefer(waiter.executor(), boost::asio::execution::outstanding_work.tracked)};
    ManualClock* c = clock();
    if (c == nullptr) {  // the clock is gone: no time will ever pass for this wait
      post_completion(std::move(e), boost::asio::error::operation_aborted);
      return;
    }
    auto slot = waiter.cancellation_slot();
    if (slot.is_connected()) {
      slot.template emplace<CancelHandler>(CancelHandler{this});
    }
    c->add(std::move(e));
  }

  void cancel() noexcept override {
    ManualClock* c = clock();
    if (c == nullptr) return;  // the clock aborted the outstanding wait when it was destroyed
    if (auto e = c->take(this))
      post_completion(std::move(*e), boost::asio::error::operation_aborted);
  }

  /// Posts the completion of `e`'s wait; the posted handler keeps the executor's work until it
  /// runs.
  static void post_completion(ManualClock::Entry e, const boost::system::error_code& ec) {
    ClockWaiter* waiter = e.waiter;
    boost::asio::post(waiter->executor(),
                      [h = WaiterHandler(waiter), ec, work = std::move(e.work)]() mutable {
                        // The wait is over: the slot belongs to whatever step comes next.
                        h.get_cancellation_slot().clear();
                        h(ec);
                      });
  }

 private:
  struct CancelHandler {
    ManualClockTimer* timer;
    void operator()(boost::asio::cancellation_type) const noexcept { timer->cancel(); }
  };
  [[nodiscard]] ManualClock* clock() const noexcept {
    return clock_->load(std::memory_order_acquire);
  }

  std::shared_ptr<std::atomic<ManualClock*>> clock_;
};

ManualClock::ManualClock(time_point start)
    : self_(std::make_shared<std::atomic<ManualClock*>>(this)), now_(start) {}

ManualClock::~ManualClock() {
  // Timers that outlive the clock (held by executions an io_context destroys later) must not
  // reach it any more.
  self_->store(nullptr, std::memory_order_release);
  std::vector<Entry> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(timers_);
  }
  for (Entry& e : pending) {
    ManualClockTimer::post_completion(std::move(e), boost::asio::error::operation_aborted);
  }
}

Clock::time_point ManualClock::now() const noexcept {
  std::lock_guard lock(mutex_);
  return now_;
}

bool ManualClock::sleep_until(time_point deadline, std::stop_token stop) const {
  std::unique_lock lock(mutex_);
  ++sleepers_;
  changed_.notify_all();
  const bool reached = changed_.wait(lock, stop, [&] { return now_ >= deadline; });
  --sleepers_;
  return reached;
}

std::unique_ptr<ClockTimer> ManualClock::make_timer(const boost::asio::any_io_executor&) const {
  return std::make_unique<ManualClockTimer>(self_);
}

void ManualClock::advance(duration d) {
  if (d < duration::zero()) {
    throw std::invalid_argument("kevlar::ManualClock::advance: the duration is negative");
  }
  std::vector<Entry> due;
  {
    std::lock_guard lock(mutex_);
    now_ += d;
    collect_due(due);
  }
  changed_.notify_all();
  for (Entry& e : due) ManualClockTimer::post_completion(std::move(e), {});
}

void ManualClock::advance_to(time_point t) {
  std::vector<Entry> due;
  {
    std::lock_guard lock(mutex_);
    if (t > now_) now_ = t;
    collect_due(due);
  }
  changed_.notify_all();
  for (Entry& e : due) ManualClockTimer::post_completion(std::move(e), {});
}

std::size_t ManualClock::sleepers() const {
  std::lock_guard lock(mutex_);
  return sleepers_;
}

std::size_t ManualClock::pending_timers() const {
  std::lock_guard lock(mutex_);
  return timers_.size();
}

std::vector<Clock::time_point> ManualClock::pending_deadlines() const {
  std::vector<time_point> r;
  {
    std::lock_guard lock(mutex_);
    r.reserve(timers_.size());
    for (const Entry& e : timers_) r.push_back(e.deadline);
  }
  std::sort(r.begin(), r.end());
  return r;
}

std::size_t ManualClock::abandon_waits(const boost::asio::any_io_executor& executor) {
  // One wait at a time, outside the lock: abandoning one waiter may end others (their timers then
  // remove their own entries), so nothing taken out earlier may be touched after an abandon().
  std::size_t dropped = 0;
  for (;;) {
    std::optional<Entry> e;
    {
      std::lock_guard lock(mutex_);
      auto it = std::find_if(timers_.begin(), timers_.end(),
                             [&](const Entry& x) { return x.waiter->executor() == executor; });
      if (it == timers_.end()) break;
      e = std::move(*it);
      timers_.erase(it);
    }
    // The wait is over: its cancellation handler must not reach this clock any more.
    if (auto slot = e->waiter->cancellation_slot(); slot.is_connected()) slot.clear();
    e->waiter->abandon();
    ++dropped;
  }
  return dropped;
}

void ManualClock::wait_for_sleepers(std::size_t n) const {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return sleepers_ >= n; });
}

void ManualClock::add(Entry e) {
  bool due_now = false;
  {
    std::lock_guard lock(mutex_);
    if (e.deadline <= now_) {
      due_now = true;
    } else {
      timers_.push_back(std::move(e));
    }
  }
  if (due_now) ManualClockTimer::post_completion(std::move(e), {});
}

std::optional<ManualClock::Entry> ManualClock::take(void* timer) noexcept {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(timers_.begin(), timers_.end(),
                         [&](const Entry& e) { return e.timer == timer; });
  if (it == timers_.end()) return std::nullopt;
  std::optional<Entry> e(std::move(*it));
  timers_.erase(it);
  return e;
}

void ManualClock::remove(void* timer) noexcept {
  (void)take(timer);
}

void ManualClock::collect_due(std::vector<Entry>& due) {
  // Deadlines in order; equal deadlines in the order they were armed.
  std::stable_sort(timers_.begin(), timers_.end(),
                   [](const Entry& a, const Entry& b) { return a.deadline < b.deadline; });
  auto it = std::find_if(timers_.begin(), timers_.end(),
                         [&](const Entry& e) { return e.deadline > now_; });
  due.assign(std::make_move_iterator(timers_.begin()), std::make_move_iterator(it));
  timers_.erase(timers_.begin(), it);
}

}  // namespace kevlar
