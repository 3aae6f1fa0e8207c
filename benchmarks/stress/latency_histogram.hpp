// kevlar_stress: a fixed-bucket logarithmic latency histogram. One per thread, filled on the hot
// path without allocating or locking, merged after the run.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace kevlar::stress {

/// Counts of nanosecond values in log-linear buckets: exact below 32 ns, then 16 buckets per
/// octave (a bucket is at most 1/16 of its lower bound wide, so a percentile read at a bucket's
/// middle is within about 3 % of the value). 976 buckets of 8 bytes cover the whole uint64 range.
class LatencyHistogram {
 public:
  static constexpr unsigned sub_bits = 4;  ///< 2^4 = 16 buckets per octave
  static constexpr std::size_t bucket_count = (64 - sub_bits + 1) << sub_bits;

  /// Counts one value (nanoseconds). Constant time; no allocation, no lock.
  void record(std::uint64_t ns) noexcept {
    ++counts_[index_of(ns)];
    ++total_;
  }

  /// Adds another histogram's counts to this one.
  void merge(const LatencyHistogram& other) noexcept {
    for (std::size_t i = 0; i < bucket_count; ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
  }

  [[nodiscard]] std::uint64_t total() const noexcept { return total_; }

  /// The value at quantile `q` (0 < q <= 1), as the middle of the bucket holding it; 0 if empty.
  [[nodiscard]] double quantile(double q) const noexcept {
    if (total_ == 0) return 0;
    const double wanted = std::ceil(q * static_cast<double>(total_));
    const std::uint64_t rank = wanted < 1 ? 1 : static_cast<std::uint64_t>(wanted);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const std::uint64_t width = width_of(i);
        return static_cast<double>(lower_of(i)) +
               (width > 1 ? static_cast<double>(width) / 2 : 0.0);
      }
    }
    return static_cast<double>(lower_of(bucket_count - 1));
  }

  /// The bucket of `ns`: `ns` itself below 32; otherwise its octave and its next 4 bits.
  [[nodiscard]] static constexpr std::size_t index_of(std::uint64_t ns) noexcept {
    constexpr std::uint64_t exact = std::uint64_t{1} << sub_bits;  // 16
    if (ns < exact) return static_cast<std::size_t>(ns);
    const unsigned msb = 63 - static_cast<unsigned>(std::countl_zero(ns));  // >= sub_bits
    const std::uint64_t top = ns >> (msb - sub_bits);                       // in [16, 32)
    return (static_cast<std::size_t>(msb - sub_bits + 1) << sub_bits) +
           static_cast<std::size_t>(top - exact);
  }
  /// The smallest value of bucket `i`.
  [[nodiscard]] static constexpr std::uint64_t lower_of(std::size_t i) noexcept {
    constexpr std::size_t exact = std::size_t{1} << sub_bits;
    if (i < exact) return i;
    const std::size_t shift = (i >> sub_bits) - 1;
    return (exact + (i & (exact - 1))) << shift;
  }
  /// How many values bucket `i` holds.
  [[nodiscard]] static constexpr std::uint64_t width_of(std::size_t i) noexcept {
    constexpr std::size_t exact = std::size_t{1} << sub_bits;
    return i < exact ? 1 : std::uint64_t{1} << ((i >> sub_bits) - 1);
  }

 private:
  std::array<std::uint64_t, bucket_count> counts_{};
  std::uint64_t total_ = 0;
};

static_assert(LatencyHistogram::index_of(15) == 15);
static_assert(LatencyHistogram::index_of(16) == 16);
static_assert(LatencyHistogram::index_of(31) == 31);
static_assert(LatencyHistogram::index_of(32) == 32 && LatencyHistogram::index_of(33) == 32);
static_assert(LatencyHistogram::lower_of(LatencyHistogram::index_of(1000)) <= 1000);
static_assert(LatencyHistogram::lower_of(LatencyHistogram::index_of(1000)) +
                  LatencyHistogram::width_of(LatencyHistogram::index_of(1000)) >
              1000);
static_assert(LatencyHistogram::index_of(~std::uint64_t{0}) == LatencyHistogram::bucket_count - 1);

}  // namespace kevlar::stress
