// kevlar — internal: the layers an observed shield runs around the user's strategies.
#pragma once

#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>

namespace kevlar {
class Strategy;
namespace detail {

/// Layer 0 of an observed shield: measures the execution, emits ExecutionFinished.
[[nodiscard]] Strategy& execution_observer() noexcept;
/// The last layer of an observed shield: emits AttemptStarted before each attempt.
[[nodiscard]] Strategy& attempt_observer() noexcept;
/// The failure an outcome holds (an error code or an exception).
[[nodiscard]] Failure failure_of_outcome(OutcomeRef outcome) noexcept;

}  // namespace detail
}  // namespace kevlar
