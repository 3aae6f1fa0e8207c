// kevlar — internal: the one 64-bit word of a semaphore ledger (kevlar::TokenLedger,
// kevlar::LimiterLedger), its bit fields and the atomic updates every ledger makes of it. Each
// ledger decides what its count means and when it may change; the packing, the CAS loops and the
// queued and closed handling are written here once.
#pragma once

#include <atomic>
#include <cstdint>

namespace kevlar::detail {

/// One value of a ledger word: a count in bits 0-31 (free tokens, or permits in use: the ledger
/// says which), queued waiters in bits 32-62, closed in bit 63. A plain value: the arithmetic
/// does not check its fields, the ledger checks before it adds or subtracts.
class LedgerBits {
 public:
  using count_type = std::uint32_t;
  /// The largest count the queued field holds.
  static constexpr count_type max_queued = 0x7FFF'FFFFu;

  constexpr LedgerBits() noexcept = default;
  constexpr explicit LedgerBits(std::uint64_t raw) noexcept : raw_(raw) {}

  /// The word as stored.
  [[nodiscard]] constexpr std::uint64_t raw() const noexcept { return raw_; }
  /// Bits 0-31.
  [[nodiscard]] constexpr count_type count() const noexcept {
    return static_cast<count_type>(raw_);
  }
  /// Bits 32-62.
  [[nodiscard]] constexpr count_type queued() const noexcept {
    return static_cast<count_type>((raw_ & queued_mask) >> 32);
  }
  /// queued() != 0, without the shift.
  [[nodiscard]] constexpr bool has_queued() const noexcept { return (raw_ & queued_mask) != 0; }
  /// Bit 63.
  [[nodiscard]] constexpr bool closed() const noexcept { return (raw_ & closed_bit) != 0; }
  /// closed() || has_queued(), in one comparison.
  [[nodiscard]] constexpr bool closed_or_queued() const noexcept { return raw_ > count_mask; }

  /// The count raised by `n` (the caller checked it cannot pass 2^32 - 1).
  [[nodiscard]] constexpr LedgerBits plus_count(count_type n) const noexcept {
    return LedgerBits(raw_ + n);
  }
  /// The count lowered by `n` (the caller checked it is at least `n`).
  [[nodiscard]] constexpr LedgerBits minus_count(count_type n) const noexcept {
    return LedgerBits(raw_ - n);
  }
  /// One more queued waiter (the caller checked the field has room).
  [[nodiscard]] constexpr LedgerBits plus_one_queued() const noexcept {
    return LedgerBits(raw_ + queued_one);
  }
  /// `k` fewer queued waiters (the caller checked there are at least `k`).
  [[nodiscard]] constexpr LedgerBits minus_queued(count_type k) const noexcept {
    return LedgerBits(raw_ - static_cast<std::uint64_t>(k) * queued_one);
  }
  /// Closed, nobody queued, the count kept.
  [[nodiscard]] constexpr LedgerBits closed_and_emptied() const noexcept {
    return LedgerBits((raw_ & count_mask) | closed_bit);
  }

 private:
  static constexpr std::uint64_t count_mask = 0xFFFF'FFFFull;
  static constexpr std::uint64_t queued_one = 1ull << 32;
  static constexpr std::uint64_t queued_mask = std::uint64_t{max_queued} << 32;
  static constexpr std::uint64_t closed_bit = 1ull << 63;

  std::uint64_t raw_ = 0;
};

/// What a ledger makes of the word it read, in LedgerWord::update: the result to return and,
/// if the word is to change, the word to write. The ledger's decision calls keep() or write() and
/// returns what it returns.
template <class R>
struct LedgerChange {
  LedgerBits next;
  R result{};

  /// Leave the word as it is and return `r`: returns false (no write).
  constexpr bool keep(R r) noexcept {
    result = r;
    return false;
  }
  /// Write `n` (if the word has not changed since it was read) and return `r`: returns true.
  constexpr bool write(LedgerBits n, R r) noexcept {
    next = n;
    result = r;
    return true;
  }
};

/// The atomic ledger word, with the updates both ledgers make of it.
///
/// The rule the `_locked` members rely on, shared by every ledger: the semaphore's slow-path lock
/// serialises every change of `queued`, and no lock-free member of a ledger changes a word that
/// counts queued waiters (each ledger's invariant ensures it). So while queued > 0, the value
/// loaded under the lock is exact, and a plain release store replaces the CAS (one locked
/// instruction fewer on the handoff).
class LedgerWord {
 public:
  using count_type = LedgerBits::count_type;

  /// Open, nobody queued, the count `initial_count`.
  explicit LedgerWord(count_type initial_count) noexcept : word_(initial_count) {}
  LedgerWord(const LedgerWord&) = delete;
  LedgerWord& operator=(const LedgerWord&) = delete;

  /// One load (acquire): the fields are coherent, never torn.
  [[nodiscard]] LedgerBits load() const noexcept {
    return LedgerBits(word_.load(std::memory_order_acquire));
  }

  /// The lock-free update: `decide(LedgerBits w, LedgerChange<R>& c) -> bool` is asked for the
  /// word read, and again for the current word whenever the CAS writing its answer fails; it
  /// answers with `return c.keep(result)` or `return c.write(next, result)`. `success` orders the
  /// write (acquire for a take, release for a return); a word left unchanged orders nothing.
  /// (The decision returns a bool, not a struct, so that the compiler branches on it directly:
  /// the loop compiles to the hand-written one.)
  template <class R, class Decide>
  R update(std::memory_order success, Decide decide) noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      LedgerChange<R> c;
      if (!decide(LedgerBits(w), c)) return c.result;
      if (word_.compare_exchange_weak(w, c.next.raw(), success, std::memory_order_relaxed)) {
        return c.result;
      }
    }
  }

  /// The same under the slow-path lock, for a word that may count queued waiters: if the word
  /// read counts some, the answer is stored plainly (see the class notes), otherwise written by
  /// an acq_rel CAS as update() does.
  template <class R, class Decide>
  R update_locked(Decide decide) noexcept {
    std::uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      LedgerChange<R> c;
      if (!decide(LedgerBits(w), c)) return c.result;
      if (LedgerBits(w).has_queued()) {
        word_.store(c.next.raw(), std::memory_order_release);
        return c.result;
      }
      if (word_.compare_exchange_weak(w, c.next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return c.result;
      }
    }
  }

  /// Under the lock, T6: one queued waiter left. The word counts it, so a plain store suffices.
  void leave_queue_locked() noexcept {
    const LedgerBits w = load();
    word_.store(w.minus_queued(1).raw(), std::memory_order_release);
  }

  /// Under the lock, T7: closed, nobody queued, the count kept; returns how many were queued.
  count_type close_locked() noexcept {
    return update<count_type>(std::memory_order_acq_rel, [](LedgerBits w, auto& c) {
      return c.write(w.closed_and_emptied(), w.queued());
    });
  }

 private:
  std::atomic<std::uint64_t> word_;
};

}  // namespace kevlar::detail
