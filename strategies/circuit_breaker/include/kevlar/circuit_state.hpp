// kevlar — the states of a circuit and the state changes a circuit breaker delivers to observers.
#pragma once

#include <kevlar/observer.hpp>

#include <boost/system/error_code.hpp>

#include <exception>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace kevlar {

/// The state of a circuit.
enum class CircuitState : unsigned char {
  closed,     ///< calls flow; failures are counted
  open,       ///< calls are rejected with errc::circuit_open until the break elapses
  half_open,  ///< the break elapsed: a limited number of probe calls decide what comes next
  isolated,  ///< opened by hand (CircuitBreaker::isolate); rejected with errc::isolated until reset
};

/// "closed", "open", "half_open" or "isolated".
[[nodiscard]] const char* to_string(CircuitState state) noexcept;

/// One state change of a circuit, as delivered to observers.
struct CircuitStateChange {
  CircuitState from;  ///< the state left
  CircuitState to;    ///< the state entered
  /// The exception of the last failure the breaker recorded (null if it was an error code, a
  /// handled result, or if nothing failed yet).
  std::exception_ptr last_exception;
  /// The error code of the last failure the breaker recorded (empty if it was not an error code).
  boost::system::error_code last_error;
};

/// A circuit breaker changed state: an event (Observer). Delivered to the observers of the shield
/// whose call caused the change, in the breaker's order, one at a time, from the breaker's
/// publication loop (which may run on another call's thread); a change made by hand, with reset()
/// or isolate(), has no shield and reaches only the breaker's own state-change hooks.
struct BreakerTransition {
  static constexpr std::string_view kevlar_event = "BreakerTransition";
  CircuitState from;
  CircuitState to;
  Failure failure;  ///< for a change to open: the failure that tripped the circuit
};

/// Several observers of one state change threw; every exception, in observer order.
///
/// Thread-safety: immutable after construction.
class CircuitObserverErrors : public std::runtime_error {
 public:
  explicit CircuitObserverErrors(std::vector<std::exception_ptr> errors);
  /// The exceptions, in the order the observers ran.
  [[nodiscard]] const std::vector<std::exception_ptr>& errors() const noexcept { return errors_; }

 private:
  std::vector<std::exception_ptr> errors_;
};

}  // namespace kevlar
