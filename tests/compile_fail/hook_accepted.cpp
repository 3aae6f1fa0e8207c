// The control of the compile-fail cases beside it: the same hooks, written as a Hook accepts
// them, compile (and the case's message is absent).
// expect-success
#include <kevlar/hook.hpp>

#include <memory>

struct Event {
  int attempt = 0;
};

int main() {
  kevlar::Hook<void(const Event&)> by_value = [](Event e) -> boost::asio::awaitable<void> {
    (void)e.attempt;
    co_return;
  };
  kevlar::Hook<void(const Event&)> shared = [owned = std::make_shared<int>(1)](const Event& e) {
    (void)(*owned + e.attempt);
  };
  return by_value.is_coroutine() && shared.is_function() ? 0 : 1;
}
