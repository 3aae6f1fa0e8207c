// Must not compile: a hook keeps its callable in a std::function, which copies it.
// expect: the callable must be copyable
#include <kevlar/hook.hpp>

#include <memory>

struct Event {
  int attempt = 0;
};

int main() {
  kevlar::Hook<void(const Event&)> hook = [owned = std::make_unique<int>(1)](const Event& e) {
    (void)(*owned + e.attempt);
  };
  return hook ? 0 : 1;
}
