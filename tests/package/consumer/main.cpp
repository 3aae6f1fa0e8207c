// A program that uses kevlar the way a downstream project does: through the umbrella header and
// the kevlar::kevlar target only. Built by tests/package against the installed package
// (find_package) and against the source tree (add_subdirectory).
#include <kevlar/kevlar.hpp>

#include <cstdio>
#include <string>

int main() {
  // The empty shield executes calls directly; strategies are added with use().
  const kevlar::Shield shield = kevlar::Shield{};

  const int value = shield.execute([] { return 42; });
  if (value != 42) {
    std::fprintf(stderr, "consumer: execute returned %d, expected 42\n", value);
    return 1;
  }

  const std::string description = shield.describe();
  if (description.empty()) {
    std::fprintf(stderr, "consumer: describe() returned an empty string\n");
    return 1;
  }

  std::printf("kevlar consumer: execute -> %d, describe -> %s\n", value, description.c_str());
  return 0;
}
