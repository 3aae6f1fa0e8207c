// kevlar — internal: the layer an observed shield runs inside the user's strategies.
#pragma once

#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>

namespace kevlar {
class Strategy;
namespace detail {

/// The last layer of an observed shield: emits AttemptStarted before each attempt.
[[nodiscard]] Strategy& attempt_observer() noexcept;
/// The failure an outcome holds (an error code or an exception).
[[nodiscard]] Failure failure_of_outcome(OutcomeRef outcome) noexcept;

}  // namespace detail
}  // namespace kevlar
