// kevlar::Hook: which form a callable becomes, what each form receives, and emptiness.
#include <kevlar/hook.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>

namespace kevlar {
namespace {

namespace asio = boost::asio;

struct Event {
  std::string name;
};
struct Scope {
  int visits = 0;
};

using Notify = Hook<void(const Event&)>;
using Compute = Hook<std::optional<int>(const Event&, Scope&)>;

// The coroutine form takes the `const X&` arguments by value and keeps `X&` ones as references.
static_assert(std::is_same_v<Notify::Coroutine, std::function<asio::awaitable<void>(Event)>>);
static_assert(std::is_same_v<Compute::Coroutine,
                             std::function<asio::awaitable<std::optional<int>>(Event, Scope&)>>);
static_assert(
    std::is_same_v<Compute::Function, std::function<std::optional<int>(const Event&, Scope&)>>);
// Only callables of the signature's shape convert. (A coroutine of the wrong shape, an awaitable of
// another result type and a move-only callable are refused by static_asserts instead, with a
// message: tests/compile_fail.)
static_assert(std::is_constructible_v<Notify, void (*)(const Event&)>);
static_assert(!std::is_constructible_v<Notify, void (*)(int)>);
static_assert(!std::is_constructible_v<Notify, void (*)(Event&)>);
static_assert(!std::is_constructible_v<Compute, std::optional<int> (*)(const Event&)>);

template <class T>
T run(asio::awaitable<T> a) {
  asio::io_context ioc;
  std::optional<T> result;
  asio::co_spawn(ioc, std::move(a), [&](const std::exception_ptr& e, T value) {
    if (e) std::rethrow_exception(e);
    result = std::move(value);
  });
  ioc.run();
  return *result;
}

void run(asio::awaitable<void> a) {
  asio::io_context ioc;
  asio::co_spawn(ioc, std::move(a), [](const std::exception_ptr& e) {
    if (e) std::rethrow_exception(e);
  });
  ioc.run();
}

TEST(Hook, AnEmptyHookHoldsNeitherForm) {
  for (const Notify& h : {Notify{}, Notify{nullptr}, Notify{std::function<void(const Event&)>{}},
                          Notify{std::function<asio::awaitable<void>(Event)>{}}}) {
    EXPECT_FALSE(h);
    EXPECT_TRUE(h == nullptr);
    EXPECT_FALSE(h.is_function());
    EXPECT_FALSE(h.is_coroutine());
  }
  const Notify held = [](const Event&) {};
  EXPECT_TRUE(held != nullptr);
}

TEST(Hook, AFunctionIsCalledWithTheArgumentsItself) {
  Scope scope;
  const Event event{"retry"};
  const Event* seen = nullptr;
  Compute h = [&seen](const Event& e, Scope& s) -> std::optional<int> {
    seen = &e;
    ++s.visits;
    return static_cast<int>(e.name.size());
  };
  ASSERT_TRUE(h);
  EXPECT_TRUE(h.is_function());
  EXPECT_FALSE(h.is_coroutine());
  EXPECT_EQ(h.function()(event, scope), 5);
  EXPECT_EQ(seen, &event);  // no copy on the way
  EXPECT_EQ(scope.visits, 1);
}

TEST(Hook, ACallableReturningAnAwaitableIsACoroutineWithItsOwnCopies) {
  Scope scope;
  Compute h = [](Event e, Scope& s) -> asio::awaitable<std::optional<int>> {
    ++s.visits;
    co_return static_cast<int>(e.name.size());
  };
  ASSERT_TRUE(h);
  EXPECT_TRUE(h.is_coroutine());
  EXPECT_FALSE(h.is_function());
  asio::awaitable<std::optional<int>> pending = [&] {
    Event temporary{"timeout"};
    return h.coroutine()(temporary, scope);  // the event dies before the coroutine runs
  }();
  EXPECT_EQ(scope.visits, 0);  // lazily started
  EXPECT_EQ(run(std::move(pending)), 7);
  EXPECT_EQ(scope.visits, 1);  // the scope went by reference
}

TEST(Hook, AVoidHookTellsACoroutineFromAFunctionByWhatItReturns) {
  std::string log;
  Notify plain = [&log](const Event& e) { log += "f:" + e.name + ";"; };
  Notify awaited = [&log](Event e) -> asio::awaitable<void> {
    log += "c:" + e.name + ";";
    co_return;
  };
  // A std::function of either form converts too.
  Notify from_function = std::function<void(const Event&)>([&log](const Event&) { log += "g;"; });
  Notify from_coroutine =
      std::function<asio::awaitable<void>(Event)>([&log](Event) -> asio::awaitable<void> {
        log += "h;";
        co_return;
      });
  EXPECT_TRUE(plain.is_function());
  EXPECT_TRUE(awaited.is_coroutine());
  EXPECT_TRUE(from_function.is_function());
  EXPECT_TRUE(from_coroutine.is_coroutine());
  plain.function()(Event{"a"});
  asio::awaitable<void> pending = awaited.coroutine()(Event{"b"});
  EXPECT_EQ(log, "f:a;");  // a coroutine's body waits for its first resumption
  run(std::move(pending));
  from_function.function()(Event{});
  run(from_coroutine.coroutine()(Event{}));
  EXPECT_EQ(log, "f:a;c:b;g;h;");
}

TEST(Hook, ReassigningReplacesTheFormAndCopiesShareNothing) {
  int calls = 0;
  // (A capture: g++ 12 warns, falsely, that copying a std::function holding a captureless lambda
  // reads uninitialised storage.)
  Notify h = [&calls](Event) -> asio::awaitable<void> {
    ++calls;
    co_return;
  };
  const Notify copy = h;
  h = [&calls](const Event&) { ++calls; };
  EXPECT_TRUE(h.is_function());
  EXPECT_FALSE(h.is_coroutine());  // the coroutine it held is gone, not kept beside
  EXPECT_TRUE(copy.is_coroutine());
  h.function()(Event{});
  EXPECT_EQ(calls, 1);
  h = nullptr;
  EXPECT_FALSE(h);
  ASSERT_TRUE(copy.is_coroutine());
  run(copy.coroutine()(Event{}));  // the copy still holds the coroutine
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace kevlar
