// The fallback strategy's type-independent helpers (the strategy itself is a header template).
#include <kevlar/fallback.hpp>

#include <stdexcept>

namespace kevlar::detail {

void check_fallback_options(bool has_value, bool has_recovery) {
  if (has_value && has_recovery) {
    throw std::invalid_argument("kevlar::FallbackOptions: set either value or recovery, not both");
  }
  if (!has_value && !has_recovery) {
    throw std::invalid_argument(
        "kevlar::FallbackOptions: value or recovery is required (neither is set)");
  }
}

}  // namespace kevlar::detail
