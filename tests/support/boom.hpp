// The tests' one exception of their own: a std::runtime_error a test throws to stand for a
// failure, told apart from every other exception by its type (and, numbered, by which call threw
// it).
#pragma once

#include <stdexcept>
#include <string>

namespace kevlar::test {

struct Boom : std::runtime_error {
  Boom() : std::runtime_error("boom") {}
  /// The failure of call `n` (`what()` is `boom <n>`).
  explicit Boom(int n) : std::runtime_error("boom " + std::to_string(n)), n(n) {}
  int n = 0;  ///< which call threw it (0: unnumbered)
};

}  // namespace kevlar::test
