// Must not compile: a coroutine hook returns the awaitable of the option's result type.
// expect: a coroutine hook must return boost::asio::awaitable<R>
#include <kevlar/hook.hpp>

struct Event {
  int attempt = 0;
};

int main() {
  kevlar::Hook<void(const Event&)> hook = [](Event e) -> boost::asio::awaitable<int> {
    co_return e.attempt;
  };
  return hook ? 0 : 1;
}
