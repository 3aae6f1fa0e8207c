// The states of a circuit and the exception aggregating several observers' failures.
#include <kevlar/circuit_state.hpp>

#include <string>
#include <utility>

namespace kevlar {

const char* to_string(CircuitState state) noexcept {
  switch (state) {
    case CircuitState::closed:
      return "closed";
    case CircuitState::open:
      return "open";
    case CircuitState::half_open:
      return "half_open";
    case CircuitState::isolated:
      return "isolated";
  }
  return "unknown";
}

CircuitObserverErrors::CircuitObserverErrors(std::vector<std::exception_ptr> errors)
    : std::runtime_error("kevlar::CircuitBreaker: " + std::to_string(errors.size()) +
                         " state-change observers threw"),
      errors_(std::move(errors)) {}

}  // namespace kevlar
