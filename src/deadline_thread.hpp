// kevlar — internal to the library: the process-wide thread that wakes the steady clock's
// deadline queues (src/deadline_queue.cpp uses it).
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/deadline_queue.hpp>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kevlar::detail {

/// The steady clock's reading (SteadyClock::now()) without Clock::steady(), a static object the
/// deadline thread may outlive at exit.
inline Clock::time_point steady_now() noexcept {
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

}  // namespace kevlar::detail
