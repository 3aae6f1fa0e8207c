// A downstream program that takes only the modules it needs: the core and two strategies
// (find_package(kevlar COMPONENTS core retry timeout), linking kevlar::retry and kevlar::timeout).
// It composes them with the core's BasicShield and the strategies' free factories, and links no
// other strategy's library.
#include <kevlar/basic_shield.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/timeout.hpp>

#include <chrono>
#include <cstdio>
#include <stdexcept>

int main() {
  using namespace std::chrono_literals;
  kevlar::RetryOptions retry;
  retry.max_retries = 2;
  retry.backoff = kevlar::Backoff::none();
  const kevlar::BasicShield shield =
      kevlar::BasicShield{}.with(kevlar::timeout(5s)).with(kevlar::retry(retry));
  int calls = 0;
  const int v = shield.execute([&] {
    if (++calls < 3) throw std::runtime_error("transient");
    return 42;
  });
  std::printf("%s: %d after %d calls\n", shield.describe().c_str(), v, calls);
  return v == 42 && calls == 3 ? 0 : 1;
}
