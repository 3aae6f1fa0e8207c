// kevlar — internal: leases, the references asynchronous executions hold on their shield's
// pipeline, counted per thread so that executions on different threads write no shared word.
#pragma once

#include <kevlar/detail/always_inline.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace kevlar::detail {

/// The stripes a Leased object counts its leases in. Threads take stripes round-robin, in the
/// order of their first use of one: two threads share a stripe only once more than this many
/// threads have taken one (which costs contention, never correctness).
inline constexpr unsigned lease_stripes = 8;

/// The size of one stripe: a cache line.
inline constexpr std::size_t lease_stripe_bytes = 64;

/// The calling thread's stripe as a byte offset into an array of stripes, plus one stripe (0: not
/// chosen yet). An offset, not an index: the stripe's address is then one addressing mode.
inline constinit thread_local std::size_t tl_lease_stripe = 0;

/// Chooses the calling thread's stripe (its first use); returns tl_lease_stripe's new value.
[[gnu::cold]] std::size_t choose_lease_stripe() noexcept;

/// `stripes[i]`, i the calling thread's stripe in [0, lease_stripes), for an array of
/// lease_stripes stripes of lease_stripe_bytes each.
template <class Stripe>
[[nodiscard]] KEVLAR_DETAIL_ALWAYS_INLINE inline Stripe& this_thread_stripe(
    Stripe* stripes) noexcept {
  static_assert(sizeof(Stripe) == lease_stripe_bytes);
  const std::size_t s = tl_lease_stripe;
  const std::size_t end = s != 0 ? s : choose_lease_stripe();  // one past the stripe, in bytes
  if (end % lease_stripe_bytes != 0) __builtin_unreachable();  // lets i * 64 fold away
  return stripes[end / lease_stripe_bytes - 1];
}

/// An object that its owners keep alive through a std::shared_ptr made by make_leased(), and that
/// leases (Lease) keep alive after the last owner has gone: it is destroyed when no owner and no
/// lease is left, by whichever lets go last.
///
/// While an owner lives, a lease costs one uncontended atomic increment and one decrement on the
/// stripe of the thread that takes or returns it (a std::shared_ptr copy instead costs two
/// read-modify-writes of one word shared by every thread: the cache line moves between cores on
/// every execution). When the last owner goes (retire()), each stripe is closed by an exchange
/// that moves its count into one central count; from then on leases count there, and the one that
/// brings it to zero destroys the object.
///
/// Thread-safety: leases may be taken (from an owner or another lease) and returned on any thread,
/// concurrently with each other and with retire().
class Leased {
 public:
  Leased() noexcept = default;
  /// A copy has its own count: it is a new object, with no lease on it.
  Leased(const Leased&) noexcept : Leased() {}
  Leased& operator=(const Leased&) noexcept { return *this; }
  virtual ~Leased() = default;

  /// Counts a lease. The object must be alive: the caller holds an owner or a lease.
  KEVLAR_DETAIL_ALWAYS_INLINE void acquire() const noexcept {
    Stripe& s = this_thread_stripe(stripes_);
    if (is_closed(s.count.fetch_add(1, std::memory_order_relaxed))) [[unlikely]] {
      acquire_central();
    }
  }
  /// Returns a lease; true if the caller must destroy the object (the last owner has gone and this
  /// was the last lease).
  [[nodiscard]] bool release() const noexcept {
    Stripe& s = this_thread_stripe(stripes_);
    if (!is_closed(s.count.fetch_sub(1, std::memory_order_release))) [[likely]]
      return false;
    return release_central();
  }
  /// The last owner has gone: true if the caller must destroy the object (no lease is left).
  /// Called once.
  [[nodiscard]] bool retire() const noexcept;

 private:
  /// An open stripe's count may be negative (a lease taken on one thread and returned on
  /// another), but stays far below 2^61. retire() closes a stripe by storing 3 * 2^61: the
  /// increments and decrements that reach it afterwards (and count centrally) keep it above.
  static constexpr std::int64_t closed_word = std::int64_t{3} << 61;
  [[nodiscard]] static constexpr bool is_closed(std::int64_t word) noexcept {
    return word >= std::int64_t{1} << 61;
  }
  /// Keeps the central count away from zero while retire() moves the stripes into it: a lease
  /// taken on a stripe not yet closed and returned to a closed one lowers it by one, and 2^62 such
  /// returns cannot happen while one retire() runs.
  static constexpr std::int64_t retiring_bias = std::int64_t{1} << 62;

  struct alignas(lease_stripe_bytes) Stripe {
    std::atomic<std::int64_t> count{0};
  };

  [[gnu::cold]] void acquire_central() const noexcept;
  [[gnu::cold]] bool release_central() const noexcept;

  mutable Stripe stripes_[lease_stripes];
  alignas(lease_stripe_bytes) mutable std::atomic<std::int64_t> central_{0};
};

/// A new T(args...), owned by the std::shared_ptr returned, and kept alive after its owners by
/// leases (T derives from Leased).
template <class T, class... Args>
std::shared_ptr<T> make_leased(Args&&... args);

/// One lease on a Leased object, or none. A copy is a second lease on the same object (an
/// asynchronous operation that defers its initiation may be copied with the lease it carries).
class Lease {
 public:
  Lease() noexcept = default;
  /// A lease on `object`, which the caller keeps alive meanwhile.
  // Inline, as the destructor: a few instructions each, which the compiler otherwise keeps out of
  // line in a large translation unit (the instruction gate's hedge modes saw +1.9 %).
  KEVLAR_DETAIL_ALWAYS_INLINE explicit Lease(const Leased& object) noexcept : object_(&object) {
    object.acquire();
  }
  KEVLAR_DETAIL_ALWAYS_INLINE Lease(Lease&& other) noexcept
      : object_(std::exchange(other.object_, nullptr)) {}
  KEVLAR_DETAIL_ALWAYS_INLINE Lease(const Lease& other) noexcept : object_(other.object_) {
    if (object_ != nullptr) object_->acquire();
  }
  Lease& operator=(Lease other) noexcept {
    other.swap(*this);
    return *this;
  }
  // Inline: a lease moves several times on its way into the execution, and each move leaves a
  // destructor with nothing to do.
  KEVLAR_DETAIL_ALWAYS_INLINE ~Lease() {
    if (object_ != nullptr) end(object_);
  }

  void swap(Lease& other) noexcept { std::swap(object_, other.object_); }
  /// The object leased, or nullptr.
  [[nodiscard]] const Leased* get() const noexcept { return object_; }
  [[nodiscard]] explicit operator bool() const noexcept { return object_ != nullptr; }

 private:
  /// Returns the lease on `object`, and destroys it if it was the last.
  [[gnu::noinline]] static void end(const Leased* object) noexcept {
    if (object->release()) delete object;
  }

  const Leased* object_ = nullptr;
};

template <class T, class... Args>
std::shared_ptr<T> make_leased(Args&&... args) {
  static_assert(std::is_base_of_v<Leased, T>, "make_leased makes objects derived from Leased");
  return std::shared_ptr<T>(new T(std::forward<Args>(args)...), [](T* object) noexcept {
    if (object->retire()) delete object;
  });
}

}  // namespace kevlar::detail
