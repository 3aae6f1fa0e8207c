// Leases: the per-thread counts that keep a shield's pipeline alive while executions run.
#include <kevlar/detail/lease.hpp>

namespace kevlar::detail {

std::size_t choose_lease_stripe() noexcept {
  static std::atomic<unsigned> next{0};
  const std::size_t end =
      (next.fetch_add(1, std::memory_order_relaxed) % lease_stripes + 1) * lease_stripe_bytes;
  tl_lease_stripe = end;
  return end;
}

void Leased::acquire_central() const noexcept {
  // The stripe was closed: retire() did not see this lease there, so it counts centrally. The
  // fence pairs with the exchange that closed the stripe, so the central count retire() set up
  // comes before this increment.
  std::atomic_thread_fence(std::memory_order_acquire);
  central_.fetch_add(1, std::memory_order_relaxed);
}

bool Leased::release_central() const noexcept {
  // As in acquire_central: this return counts centrally, after the central count retire() set up.
  std::atomic_thread_fence(std::memory_order_acquire);
  return central_.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

bool Leased::retire() const noexcept {
  // The bias keeps the central count above zero while the stripes close one by one: a lease
  // returned to a closed stripe meanwhile may be one taken on a stripe not yet closed.
  central_.store(retiring_bias, std::memory_order_relaxed);
  std::int64_t open_leases = 0;
  for (Stripe& s : stripes_) {
    // acq_rel: every lease returned to this stripe before it closed happens before what follows
    // (the returns release, and each later read-modify-write continues their release sequence);
    // every lease that finds it closed sees the central count stored above.
    open_leases += s.count.exchange(closed_word, std::memory_order_acq_rel);
  }
  const std::int64_t moved = open_leases - retiring_bias;
  return central_.fetch_add(moved, std::memory_order_acq_rel) + moved == 0;
}

}  // namespace kevlar::detail
