// kevlar — testing kit: the exception every assertion helper of the kit throws.
#pragma once

#include <stdexcept>
#include <string>

namespace kevlar::testing {

/// Thrown by the testing kit's assertions and bounded helpers (expect_strategy_order,
/// advance_until, the race and model runners...) when what the test expects does not hold. Its
/// message says what was expected and what was found, so that a GoogleTest failure
/// (`EXPECT_NO_THROW`, or an uncaught exception in a test body) reads on its own.
///
/// A logic_error: a failed expectation is a defect in the code under test (or in the test), not a
/// condition a program recovers from.
class ShieldAssertionError : public std::logic_error {
 public:
  explicit ShieldAssertionError(const std::string& message) : std::logic_error(message) {}
};

}  // namespace kevlar::testing
