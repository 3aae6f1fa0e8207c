// Must not compile: a coroutine hook that takes its event by reference would read a copy that is
// gone by the time the coroutine runs; a void hook would otherwise hold it as a function and drop
// its awaitable unrun.
// expect: a coroutine hook must take its const X& arguments by value
#include <kevlar/hook.hpp>

struct Event {
  int attempt = 0;
};

int main() {
  kevlar::Hook<void(const Event&)> hook = [](auto& e) -> boost::asio::awaitable<void> {
    (void)e.attempt;
    co_return;
  };
  return hook ? 0 : 1;
}
