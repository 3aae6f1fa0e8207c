// kevlar — Permit: one permit of a kevlar::BasicUnpairedSemaphore, owned by the object that holds
// the Permit (a strategy's frame) and given back when it goes.
#pragma once

#include <boost/assert.hpp>

#include <utility>

namespace kevlar {

/// Owns at most one permit of a semaphore (a kevlar::BasicUnpairedSemaphore, a QueueSemaphore, or
/// any type with `bool try_acquire()` and `bool release(1)`): release() or the destructor gives it
/// back, so that a strategy whose execution ends while it holds one (abandoned, cancelled from
/// outside, failed by a later callback) needs no release of its own. A member of a strategy's
/// frame, which BasicStrategy destroys when the strategy finishes.
///
/// ```
/// struct Frame { kevlar::Permit<kevlar::QueueSemaphore<>> permit; };
/// Step start(Layer&, Frame& f) {
///   if (f.permit.try_acquire(queue_)) return Step::run_inner;
///   return Step::queue(queue_);
/// }
/// Step wait_complete(Layer& layer, Frame& f, const error_code& ec) {
///   if (ec) { layer.outcome().set_error(ec); return Step::complete; }
///   f.permit.adopt(queue_);  // the grant made the permit this execution's
///   return Step::run_inner;
/// }
/// ```
///
/// A release the semaphore refuses (it would overflow: more permits given back than it was
/// built for) is a bug of the owner, and asserts.
///
/// Thread-safety: one Permit is used by one owner at a time; the semaphore's calls are
/// thread-safe.
template <class Semaphore>
class Permit {
 public:
  /// Holds nothing.
  Permit() noexcept = default;
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  /// Takes over what `other` holds; `other` holds nothing after.
  Permit(Permit&& other) noexcept : semaphore_(std::exchange(other.semaphore_, nullptr)) {}
  /// Gives back what this holds, then takes over what `other` holds.
  Permit& operator=(Permit&& other) noexcept {
    if (this != &other) {
      release();
      semaphore_ = std::exchange(other.semaphore_, nullptr);
    }
    return *this;
  }
  /// Gives the permit back, if one is held (one test if none is).
  ~Permit() {
    if (semaphore_ != nullptr) [[unlikely]] {
      give_back();
    }
  }

  /// Takes a permit of `semaphore` if one is free (its try_acquire); true if it did. Holds
  /// nothing before (asserts).
  [[nodiscard]] bool try_acquire(Semaphore& semaphore) noexcept {
    BOOST_ASSERT(semaphore_ == nullptr);
    if (!semaphore.try_acquire()) return false;
    semaphore_ = &semaphore;
    return true;
  }
  /// Takes ownership of a permit of `semaphore` the caller already owns (a wait that was
  /// granted). Holds nothing before (asserts).
  void adopt(Semaphore& semaphore) noexcept {
    BOOST_ASSERT(semaphore_ == nullptr);
    semaphore_ = &semaphore;
  }
  /// Gives the permit back to its semaphore (which may hand it to its oldest waiter); nothing if
  /// none is held.
  void release() noexcept {
    if (semaphore_ != nullptr) {
      [[maybe_unused]] const bool released = std::exchange(semaphore_, nullptr)->release(1);
      BOOST_ASSERT_MSG(released, "kevlar::Permit: the semaphore refused the permit back");
    }
  }
  /// True if a permit is held.
  [[nodiscard]] bool held() const noexcept { return semaphore_ != nullptr; }
  explicit operator bool() const noexcept { return held(); }

 private:
  /// The destructor's release, out of line: a frame that gave its permit back already (the
  /// common end) keeps its end to one test.
  [[gnu::noinline]] void give_back() noexcept { release(); }

  Semaphore* semaphore_ = nullptr;
};

}  // namespace kevlar
