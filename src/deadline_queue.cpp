// The deadline queue of one (context, clock, duration): O(1) arm and disarm, one wake-up
// underneath (the deadline thread for the steady clock, a clock timer otherwise).
#include "deadline_thread.hpp"

#include <kevlar/detail/asio_private.hpp>
#include <kevlar/detail/deadline_queue.hpp>

#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace kevlar::detail {

namespace {

/// How long the deadline thread waits before it tries again to post an expiry that failed.
constexpr Clock::duration retry_after_failure = std::chrono::milliseconds(1);

/// The queue whose timer wait is being started on this thread, under its lock.
thread_local const DeadlineQueue* tl_arming_queue = nullptr;
}  // namespace

DeadlineQueue::DeadlineQueue(const Clock& clock, const boost::asio::any_io_executor& ex,
                             bool ordered)
    : clock_(&clock),
      ex_(ex),
      ordered_(ordered),
      threaded_(&clock == Clock::steady().get() && accepts_foreign_posts(ex)) {}

DeadlineQueue::~DeadlineQueue() {
  shutdown();
  DeferredChecks::forget(this);
}

void DeadlineQueue::link_armed(DeadlineEntry& e) noexcept {
  DeadlineEntry* last = armed_.back();
  if (ordered_ || last == nullptr || last->deadline <= e.deadline) {
    armed_.push_back(&e);
    return;
  }
  // Deadlines of varying durations: walk back to the entry's place (short in practice).
  DeadlineEntry* after = last;
  while (after != nullptr && after->deadline > e.deadline) after = DeadlineList::prev(after);
  armed_.insert_before(after != nullptr ? DeadlineList::next(after) : armed_.front(), &e);
}

void DeadlineQueue::arm_timer_locked(Clock::time_point t) {
  if (shut_down_) return;
  if (threaded_) {
    if (wake_pending_locked() && timer_deadline_ <= t) return;
    DeadlineThread::instance().wake_at(this, t);  // may throw: nothing is recorded then
    timer_waiting_ = true;
    timer_deadline_ = t;
    wake_generation_ = DeadlineThread::generation();
    return;
  }
  if (timer_waiting_) {
    // A wait is outstanding. If it is for a later deadline (only possible with varying
    // durations), cancel it: its completion re-arms for the earliest deadline.
    if (t < timer_deadline_) timer_->cancel();
    return;
  }
  if (!timer_) timer_ = clock_->make_timer(ex_);
  // The wait may throw (it allocates); the queue records it only once it is started, or no timer
  // would ever be armed again. Its completion needs the lock held here, so it cannot come first.
  struct Arming {
    explicit Arming(const DeadlineQueue* q) noexcept
        : previous(std::exchange(tl_arming_queue, q)) {}
    ~Arming() { tl_arming_queue = previous; }
    Arming(const Arming&) = delete;
    Arming& operator=(const Arming&) = delete;
    const DeadlineQueue* previous;
  };
  {
    const Arming arming(this);
    timer_->async_wait_until(t, *this);
  }
  timer_waiting_ = true;
  timer_deadline_ = t;
}

void DeadlineQueue::arm(DeadlineEntry& e) {
  std::lock_guard lock(lock_);
  e.queue = this;
  e.state = DeadlineEntry::State::armed;
  link_armed(e);
  count_armed(+1);
  // A new head needs the timer; so does any deadline while no wait is outstanding (an expiry
  // whose delivery failed left the timer idle with deadlines armed).
  if (armed_.front() != &e && wake_pending_locked()) return;
  try {
    arm_timer_locked(armed_.front()->deadline);
  } catch (...) {
    // Not armed after all: the caller does not disarm an entry whose arm() threw, and the entry's
    // storage ends with the execution.
    armed_.unlink(&e);
    count_armed(-1);
    e.state = DeadlineEntry::State::idle;
    throw;
  }
}

bool DeadlineQueue::disarm(DeadlineEntry& e) noexcept {
  std::unique_lock lock(lock_);
  switch (e.state) {
    case DeadlineEntry::State::armed:
      armed_.unlink(&e);
      count_armed(-1);
      break;
    case DeadlineEntry::State::firing:
      firing_.unlink(&e);
      break;
    case DeadlineEntry::State::idle:
    case DeadlineEntry::State::fired:
      break;
  }
  const bool fired = e.state == DeadlineEntry::State::fired;
  e.state = DeadlineEntry::State::idle;
  // The last deadline is gone: unless a call comes back, the waiting timer is all that keeps the
  // context's run() going. Decide once the engine has returned to its caller: a caller that
  // starts its next call from this one's completion has armed again by then.
  const bool idle =
      !threaded_ && armed_.empty() && timer_waiting_ && !sweep_pending_ && !shut_down_;
  lock.unlock();
  if (idle) DeferredChecks::request(&DeadlineQueue::check_idle, this);
  return fired;
}

void DeadlineQueue::check_idle(void* queue) noexcept {
  auto* q = static_cast<DeadlineQueue*>(queue);
  // A caller whose next call started from the completion has armed again: the common case of a
  // busy loop, told without the lock. The count was last written under the lock, by this thread's
  // disarm or a later arm, so the load sees that write or a newer one.
  if (q->armed_count_.load(std::memory_order_relaxed) != 0) return;
  {
    std::lock_guard lock(q->lock_);
    if (!q->armed_.empty() || !q->timer_waiting_ || q->sweep_pending_ || q->shut_down_) return;
    q->sweep_pending_ = true;
  }
  q->post_sweep(false);
}

void DeadlineQueue::release_idle_timer() noexcept {
  std::lock_guard lock(lock_);
  if (!threaded_ && armed_.empty() && timer_waiting_) timer_->cancel();
}

namespace {

/// Runs one pass of the idle sweep on the timer's executor.
struct SweepJob {
  DeadlineQueue* queue;
  bool second_pass;
  void operator()() const noexcept { queue->sweep(second_pass); }
};

}  // namespace

void DeadlineQueue::post_sweep(bool second_pass) noexcept {
  try {
    // An io_context's own executor where the queue has one: the type-erased one costs more than
    // the job itself.
    if (const auto* io = ex_.target<boost::asio::io_context::executor_type>()) {
      boost::asio::post(*io, SweepJob{this, second_pass});
    } else {
      boost::asio::post(ex_, SweepJob{this, second_pass});
    }
  } catch (...) {
    std::lock_guard lock(lock_);
    sweep_pending_ = false;
  }
}

void DeadlineQueue::sweep(bool second_pass) noexcept {
  {
    std::lock_guard lock(lock_);
    if (shut_down_ || !armed_.empty() || !timer_waiting_) {
      sweep_pending_ = false;  // a call came back (it keeps the timer), or nothing is left to do
      return;
    }
    if (second_pass) {
      // Empty for two passes: the loop has nothing of ours left. The timer's completion
      // (operation_aborted) re-arms it if a deadline was armed meanwhile.
      sweep_pending_ = false;
      timer_->cancel();
      return;
    }
  }
  // Once more round the executor's queue: a caller whose next call was posted (not started from
  // the completion itself) arms before the second pass.
  post_sweep(true);
}

namespace {

/// Delivers one expiry on the execution's executor.
struct FireJob {
  DeadlineQueue* queue;
  DeadlineEntry* entry;
  std::uint64_t ticket;
  void operator()() const { queue->deliver(entry, ticket); }
};

}  // namespace

void DeadlineQueue::complete(const boost::system::error_code&) {
  wake();
}

bool DeadlineQueue::wake_pending_locked() const noexcept {
  // A threaded queue's request made before a fork the thread did not survive is gone.
  return timer_waiting_ && (!threaded_ || wake_generation_ == DeadlineThread::generation());
}

void DeadlineQueue::wake() {
  std::lock_guard lock(lock_);
  expire_locked();
}

void DeadlineQueue::expire_locked() {
  timer_waiting_ = false;
  // With nothing armed there is nothing to fire, and no execution keeps the clock alive: the
  // completion may be the abort of a manual clock that is gone (its destructor aborts its waits).
  if (shut_down_ || armed_.empty()) return;
  const Clock::time_point now = threaded_ ? steady_now() : clock_->now();
  try {
    while (!armed_.empty() && armed_.front()->deadline <= now) {
      DeadlineEntry* e = armed_.front();
      // The execution may finish before the job runs, and its storage may then hold another
      // execution's entry: the job looks for this entry and this ticket in the firing list
      // (without touching the entry) before using it. Posting allocates and may throw; the entry
      // moves only once its job exists.
      const std::uint64_t ticket = ++last_ticket_;
      boost::asio::post(e->call->call_executor(), FireJob{this, e, ticket});
      armed_.pop_front();
      count_armed(-1);
      e->ticket = ticket;
      e->state = DeadlineEntry::State::firing;
      firing_.push_back(e);
    }
  } catch (...) {
    // The expired entry is still armed at the head: wait for it again, and let the failure leave
    // the loop's run() as any handler's does (the deadline thread drops it). A loop's timer
    // completes again at once, between the loop's other handlers; the deadline thread tries again
    // a little later, not in a tight loop while memory is short. If re-arming throws too, the
    // next arm() re-arms.
    const Clock::time_point head = armed_.front()->deadline;
    arm_timer_locked(threaded_ ? std::max(head, now + retry_after_failure) : head);
    throw;
  }
  if (!armed_.empty()) arm_timer_locked(armed_.front()->deadline);
}

void DeadlineQueue::abandon() noexcept {
  // A wait whose initiation throws destroys its handler, which lands here with the lock already
  // held by arm_timer_locked on this thread; the wait was never recorded, so there is nothing to
  // undo (locking again would deadlock).
  if (tl_arming_queue == this) return;
  std::lock_guard lock(lock_);
  timer_waiting_ = false;
}

void DeadlineQueue::deliver(DeadlineEntry* target, std::uint64_t ticket) {
  CallBase* call = nullptr;
  std::size_t index = 0;
  DeadlineEntry::Fire fire = nullptr;
  {
    std::lock_guard lock(lock_);
    for (DeadlineEntry* e = firing_.front(); e != nullptr; e = DeadlineList::next(e)) {
      if (e != target || e->ticket != ticket) continue;
      firing_.unlink(e);
      e->state = DeadlineEntry::State::fired;
      call = e->call;
      index = e->index;
      fire = e->fire;
      break;
    }
  }
  // Outside the lock: the cancellation may complete the operation inline, and the execution then
  // runs on (its timeout disarms through this queue) or ends before cancel_inner returns. Nothing
  // else can end it meanwhile: this job runs on the execution's executor, serialised with it.
  if (call == nullptr) return;
  if (fire != nullptr) {
    fire(*call, index);
  } else {
    call->cancel_inner(index, boost::asio::cancellation_type::terminal);
  }
}

void DeadlineQueue::shutdown() noexcept {
  std::unique_ptr<ClockTimer> timer;
  {
    std::lock_guard lock(lock_);
    shut_down_ = true;  // from here on, nothing asks the deadline thread for a wake-up
    timer = std::move(timer_);
  }
  if (threaded_) DeadlineThread::instance().forget(this);
}

}  // namespace kevlar::detail
