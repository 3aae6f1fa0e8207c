#include <kevlar/detail/deadline_queue.hpp>

#include <boost/asio/detail/concurrency_hint.hpp>
#include <boost/asio/detail/scheduler.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <pthread.h>
#include <signal.h>

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

// ---- the deadline thread -----------------------------------------------------------------------

namespace {

/// The steady clock's reading (SteadyClock::now()) without Clock::steady(), a static object the
/// deadline thread may outlive at exit.
Clock::time_point steady_now() noexcept {
  return std::chrono::time_point_cast<Clock::duration>(std::chrono::steady_clock::now());
}

/// Wakes the deadline queues of the steady clock at the times they ask for. One per process,
/// started by the first request and never destroyed (a queue may ask for, or cancel, a wake-up
/// from a static object's destructor): at exit it sleeps in its wait, holding nothing.
///
/// A request lives here until the thread takes it; a queue has at most one. The thread sleeps
/// until the earliest request and wakes the due queues one at a time, without its own lock
/// (DeadlineQueue::wake takes the queue's lock, under which queues ask for their next wake-up).
/// Lock order: a queue's lock, then this thread's mutex; never the other way round.
class DeadlineThread {
 public:
  static DeadlineThread& instance() {
    // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): never destroyed, on purpose
    static DeadlineThread* const thread = new DeadlineThread;
    return *thread;
  }

  /// Makes sure `q` is woken at `t` or earlier. Starts the thread the first time; throws if that,
  /// or recording the request, fails (nothing is recorded then).
  void wake_at(DeadlineQueue* q, Clock::time_point t) {
    const std::lock_guard lock(mutex_);
    if (!started_) {
      requests_.reserve(8);
      start_thread();
      started_ = true;
    }
    const auto it = std::find_if(requests_.begin(), requests_.end(),
                                 [q](const Request& r) { return r.queue == q; });
    if (it != requests_.end()) {
      if (it->at <= t) return;
      it->at = t;
    } else {
      requests_.push_back(Request{q, t});
    }
    // Only a request earlier than what the thread sleeps until needs to wake it.
    if (t < sleeping_until_) cv_.notify_one();
  }

  /// `q` is never woken again once this returns: its request is dropped, and a wake-up in
  /// progress is waited for. Not called under `q`'s lock.
  void forget(const DeadlineQueue* q) noexcept {
    std::unique_lock lock(mutex_);
    woken_.wait(lock, [&] { return waking_ != q; });
    std::erase_if(requests_, [q](const Request& r) { return r.queue == q; });
  }

  /// Counts the forks this process's deadline thread did not survive: a queue's request made in
  /// an earlier generation is gone (DeadlineQueue::arm_timer_locked asks again).
  [[nodiscard]] static std::uint32_t generation() noexcept {
    return fork_generation.load(std::memory_order_relaxed);
  }

 private:
  struct Request {
    DeadlineQueue* queue;
    Clock::time_point at;
  };

  DeadlineThread() noexcept {
    // A forked child has no deadline thread: its first request starts one. The mutex is held
    // across fork(), with no wake-up in progress, so that the child copies consistent requests
    // and no queue lock the thread held; the child then re-creates its synchronisation objects.
    (void)::pthread_atfork([] { instance().before_fork(); }, [] { instance().mutex_.unlock(); },
                           [] { instance().after_fork_in_child(); });
  }

  /// Before fork(): holds the mutex, with no wake-up in progress, so that the child's copies of
  /// the requests and of every queue's lock the thread takes are consistent (the thread starts no
  /// wake-up without the mutex).
  void before_fork() noexcept {
    std::unique_lock lock(mutex_);
    woken_.wait(lock, [&] { return waking_ == nullptr; });
    (void)lock.release();  // the parent's or the child's handler unlocks it
  }

  /// In a forked child: the parent's requests belong to a thread the child does not have. They
  /// are dropped; the queues that still need a wake-up (inherited contexts with deadlines armed)
  /// see the new generation and ask the child's own thread.
  void after_fork_in_child() noexcept {
    // The copies of the mutex (held by the prepare handler) and of the condition variables (which
    // count the parent thread's waits) describe threads the child does not have: start afresh.
    std::construct_at(&mutex_);
    std::construct_at(&cv_);
    std::construct_at(&woken_);
    requests_.clear();
    waking_ = nullptr;
    sleeping_until_ = Clock::time_point::min();
    started_ = false;
    fork_generation.fetch_add(1, std::memory_order_relaxed);
  }

  /// Starts the thread with every signal blocked (as Asio's own threads): a signal meant for the
  /// program's threads must not be delivered to this one.
  void start_thread() {
    sigset_t all;
    sigset_t previous;
    ::sigfillset(&all);
    const bool blocked = ::pthread_sigmask(SIG_BLOCK, &all, &previous) == 0;
    try {
      std::thread(&DeadlineThread::run, this).detach();
    } catch (...) {
      if (blocked) ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      throw;
    }
    if (blocked) ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  void run() noexcept {
    std::unique_lock lock(mutex_);
    for (;;) {
      const auto earliest =
          std::min_element(requests_.begin(), requests_.end(),
                           [](const Request& a, const Request& b) { return a.at < b.at; });
      if (earliest == requests_.end()) {
        sleeping_until_ = Clock::time_point::max();
        cv_.wait(lock);
        continue;
      }
      const Clock::time_point at = earliest->at;
      if (steady_now() < at) {
        sleeping_until_ = at;
        cv_.wait_until(lock, std::chrono::steady_clock::time_point(
                                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     at.time_since_epoch())));
        continue;  // woken early, notified, or due: look again
      }
      sleeping_until_ = Clock::time_point::min();  // awake: nobody needs to notify
      DeadlineQueue* q = earliest->queue;
      requests_.erase(earliest);
      waking_ = q;
      lock.unlock();
      try {
        q->wake();
      } catch (...) {
        // Posting an expiry failed (its allocation): the queue asked to be woken again a
        // millisecond later; the failure has nowhere else to go.
      }
      lock.lock();
      waking_ = nullptr;
      woken_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;     ///< the thread's sleep
  std::condition_variable woken_;  ///< a wake-up in progress ended (forget waits for it)
  std::vector<Request> requests_;
  DeadlineQueue* waking_ = nullptr;  ///< the queue being woken, outside the mutex
  /// What the thread sleeps until (max: no request; min: it is awake).
  Clock::time_point sleeping_until_ = Clock::time_point::min();
  bool started_ = false;
  static inline std::atomic<std::uint32_t> fork_generation{0};
};

}  // namespace

// ---- DeadlineQueue ------------------------------------------------------------------------------

namespace {

/// How long the deadline thread waits before it tries again to post an expiry that failed.
constexpr Clock::duration retry_after_failure = std::chrono::milliseconds(1);

/// Whether the deadline thread may post to the context of `ex` from its own thread: not to an
/// io_context built with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE (or another hint without the
/// scheduler's lock), whose queue only its own thread may touch. Such a context gets the clock
/// timer on the context instead.
bool accepts_foreign_posts(const boost::asio::any_io_executor& ex) {
  // An io_context's (and a thread_pool's) implementation is Asio's scheduler service.
  using Scheduler = boost::asio::detail::scheduler;
  boost::asio::execution_context& ctx = boost::asio::query(ex, boost::asio::execution::context);
  if (!boost::asio::has_service<Scheduler>(ctx)) return true;
  const int hint = boost::asio::use_service<Scheduler>(ctx).concurrency_hint();
  return BOOST_ASIO_CONCURRENCY_HINT_IS_LOCKING(SCHEDULER, hint);
}

/// The queue whose timer wait is being started on this thread, under its lock.
thread_local const DeadlineQueue* tl_arming_queue = nullptr;
/// Incremented whenever a DeadlineService shuts down or dies, so that thread-local caches never
/// hand out a queue of a context that no longer exists (even if a new context reuses its address).
std::atomic<std::uint64_t> g_service_epoch{1};
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

// ---- the per-context service --------------------------------------------------------------------

namespace {

/// The executor of a queue's timer, from the executor of the call that creates the queue: without
/// the call's strand (Asio's strands of an io_context's or a thread_pool's executor, or of an
/// any_io_executor holding one), which would serialise every deadline of the context behind that
/// strand's handlers, and without outstanding work, which would keep the context's run() from
/// returning for as long as the queue lives. Other executors are used without their work.
boost::asio::any_io_executor timer_executor(const boost::asio::any_io_executor& tracked) {
  using boost::asio::strand;
  // Without outstanding work first: a strand maps the preference onto its inner executor, so a
  // work-tracking strand becomes a strand of the plain executor, which the checks below know.
  const boost::asio::any_io_executor ex =
      boost::asio::prefer(tracked, boost::asio::execution::outstanding_work.untracked);
  if (const auto* s = ex.target<strand<boost::asio::io_context::executor_type>>()) {
    return timer_executor(s->get_inner_executor());
  }
  if (const auto* s = ex.target<strand<boost::asio::thread_pool::executor_type>>()) {
    return timer_executor(s->get_inner_executor());
  }
  if (const auto* s = ex.target<strand<boost::asio::any_io_executor>>()) {
    return timer_executor(s->get_inner_executor());
  }
  return ex;
}

class DeadlineService final : public boost::asio::execution_context::service {
 public:
  static inline boost::asio::execution_context::id id;

  explicit DeadlineService(boost::asio::execution_context& ctx)
      : boost::asio::execution_context::service(ctx) {}
  ~DeadlineService() override { g_service_epoch.fetch_add(1, std::memory_order_acq_rel); }

  DeadlineQueue& queue(const boost::asio::any_io_executor& ex, const Clock& clock,
                       Clock::duration d) {
    std::lock_guard lock(mutex_);
    auto& q = queues_[Key{&clock, d.count()}];
    if (!q) q = std::make_unique<DeadlineQueue>(clock, timer_executor(ex), d.count() != 0);
    return *q;
  }

  void release_idle() noexcept {
    std::lock_guard lock(mutex_);
    for (auto& [key, q] : queues_) q->release_idle_timer();
  }

 private:
  void shutdown() override {
    g_service_epoch.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard lock(mutex_);
    for (auto& [key, q] : queues_) q->shutdown();
  }

  using Key = std::pair<const Clock*, Clock::duration::rep>;
  std::mutex mutex_;
  std::map<Key, std::unique_ptr<DeadlineQueue>> queues_;
};

struct CacheEntry {
  const void* context = nullptr;
  const Clock* clock = nullptr;
  Clock::duration::rep duration = 0;
  std::uint64_t epoch = 0;
  DeadlineQueue* queue = nullptr;
};

thread_local std::array<CacheEntry, 4> tl_cache;
thread_local unsigned tl_cache_next = 0;

/// This thread's cached queue for (context, clock, duration) from services of `epoch`, or
/// nullptr.
DeadlineQueue* cached_queue(const boost::asio::execution_context* ctx, const Clock& clock,
                            Clock::duration duration, std::uint64_t epoch) noexcept {
  for (const CacheEntry& c : tl_cache) {
    if (c.context == ctx && c.clock == &clock && c.duration == duration.count() &&
        c.epoch == epoch) {
      return c.queue;
    }
  }
  return nullptr;
}

}  // namespace

DeadlineQueue& deadline_queue_for(const boost::asio::any_io_executor& ex, const Clock& clock,
                                  Clock::duration duration) {
  boost::asio::execution_context& ctx = boost::asio::query(ex, boost::asio::execution::context);
  // Read before the lookup: a queue created by a service that dies meanwhile is cached with the
  // old epoch and never handed out.
  const std::uint64_t epoch = g_service_epoch.load(std::memory_order_acquire);
  if (DeadlineQueue* q = cached_queue(&ctx, clock, duration, epoch)) return *q;
  DeadlineQueue& q = boost::asio::use_service<DeadlineService>(ctx).queue(ex, clock, duration);
  tl_cache[tl_cache_next++ % tl_cache.size()] =
      CacheEntry{&ctx, &clock, duration.count(), epoch, &q};
  return q;
}

DeadlineQueue& deadline_queue_for(const CallBase& call, const Clock& clock,
                                  Clock::duration duration) {
  // On an io_context's plain executor the execution names its context directly: no
  // any_io_executor is built, queried and destroyed per call.
  if (const void* io = call.trampoline_context()) {
    const boost::asio::execution_context* ctx = static_cast<const boost::asio::io_context*>(io);
    const std::uint64_t epoch = g_service_epoch.load(std::memory_order_acquire);
    if (DeadlineQueue* q = cached_queue(ctx, clock, duration, epoch)) return *q;
  }
  return deadline_queue_for(call.call_executor(), clock, duration);
}

void resume_at_deadline(CallBase& call, std::size_t index) {
  (void)index;  // the execution is parked at that layer: its pending step is the layer's own wait
  call.wait_completed(boost::system::error_code());
}

void release_idle_deadline_timers(boost::asio::execution_context& ctx) noexcept {
  if (boost::asio::has_service<DeadlineService>(ctx)) {
    boost::asio::use_service<DeadlineService>(ctx).release_idle();
  }
}

}  // namespace kevlar::detail
