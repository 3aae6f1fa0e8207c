#include <kevlar/detail/async_call.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/system_error.hpp>

#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;

TEST(Errors, CategoryNamesAndMessages) {
  const boost::system::error_code ec = make_error_code(errc::timeout);
  EXPECT_STREQ(ec.category().name(), "kevlar");
  EXPECT_EQ(ec.value(), 1);
  EXPECT_EQ(ec.message(), "the call did not complete within its timeout");
  EXPECT_EQ(ec, errc::timeout);
  EXPECT_NE(ec, errc::circuit_open);
  EXPECT_NE(make_error_code(errc::closed).message().find("closed"), std::string::npos);
}

TEST(Errors, EveryCodeHasItsOwnMessageAndAnUnknownValueIsNamed) {
  const std::vector<std::pair<errc, std::string>> codes = {
      {errc::timeout, "within its timeout"},
      {errc::circuit_open, "circuit is open"},
      {errc::isolated, "isolated"},
      {errc::rate_limited, "rate limit"},
      {errc::concurrency_limit_exceeded, "concurrency limit"},
      {errc::closed, "closed"},
      {errc::callback_exception, "carries no error code"},
      {errc::invalid_result_type, "does not match the call's result type"},
      {errc::executor_required, "asio::bind_executor"},
      {errc::throttled, "throttled locally"},
      {errc::queue_timeout, "queue-wait timeout"}};
  std::set<std::string> messages;
  for (const auto& [code, needle] : codes) {
    const std::string m = make_error_code(code).message();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    messages.insert(m);
  }
  EXPECT_EQ(messages.size(), codes.size()) << "each code says something of its own";
  EXPECT_EQ(boost::system::error_code(999, error_category()).message(), "unknown kevlar error 999");
}

TEST(Errors, AnEmptyExceptionPointerCarriesNoCode) {
  EXPECT_FALSE(detail::error_of_exception(nullptr));
  EXPECT_FALSE(detail::is_cancellation_exception(nullptr));
}

TEST(Errors, ErrorIsASystemErrorComparableWithErrc) {
  const Error e(make_error_code(errc::circuit_open), std::chrono::seconds(20));
  const std::system_error& base = e;
  EXPECT_EQ(base.code(), errc::circuit_open);
  EXPECT_EQ(e.error(), errc::circuit_open);
  ASSERT_TRUE(e.retry_after().has_value());
  EXPECT_EQ(*e.retry_after(), std::chrono::seconds(20));
  EXPECT_NE(std::string(e.what()).find("circuit is open"), std::string::npos);
  const std::error_code std_ec = errc::isolated;
  EXPECT_EQ(std_ec, errc::isolated);
}

TEST(Errors, CancellationIsRecognised) {
  EXPECT_TRUE(is_cancellation(asio::error::operation_aborted));
  EXPECT_TRUE(is_cancellation(make_error_code(boost::system::errc::operation_canceled)));
  EXPECT_FALSE(is_cancellation(make_error_code(errc::timeout)));
  EXPECT_FALSE(is_cancellation({}));
}

struct CancelledJob : std::system_error {
  CancelledJob() : std::system_error(std::make_error_code(std::errc::operation_canceled)) {}
};

// The error code of an exception is read per instance; whether a type can carry one at all is
// remembered per type. Interleaving types and instances must never mix their answers.
TEST(Errors, ErrorCodesOfExceptionsArePerInstanceWhateverWasSeenBefore) {
  const auto runtime = std::make_exception_ptr(std::runtime_error("no code"));
  const auto cancelled = std::make_exception_ptr(
      boost::system::system_error(make_error_code(boost::system::errc::operation_canceled)));
  const auto timed_out = std::make_exception_ptr(Error(errc::timeout));
  const auto derived = std::make_exception_ptr(CancelledJob{});
  const auto other_std =
      std::make_exception_ptr(std::system_error(std::make_error_code(std::errc::io_error)));
  for (int round = 0; round < 3; ++round) {  // the first round teaches, the next ones recall
    EXPECT_FALSE(detail::error_of_exception(runtime));
    EXPECT_FALSE(detail::is_cancellation_exception(runtime));
    EXPECT_TRUE(detail::is_cancellation_exception(cancelled));
    EXPECT_EQ(detail::error_of_exception(timed_out), errc::timeout);
    EXPECT_FALSE(detail::is_cancellation_exception(timed_out));
    EXPECT_TRUE(detail::is_cancellation_exception(derived));
    EXPECT_TRUE(detail::error_of_exception(other_std));
    EXPECT_FALSE(detail::is_cancellation_exception(other_std));
    EXPECT_FALSE(detail::error_of_exception(std::make_exception_ptr(42)));
  }
  // Same dynamic type, different codes: each instance answers for itself.
  const auto aborted = std::make_exception_ptr(Error(asio::error::operation_aborted));
  EXPECT_TRUE(detail::is_cancellation_exception(aborted));
  EXPECT_FALSE(detail::is_cancellation_exception(timed_out));
}

TEST(Outcome, HoldsExactlyOneThing) {
  auto v = Outcome<int>::from_value(3);
  EXPECT_TRUE(v.has_value());
  EXPECT_TRUE(static_cast<bool>(v));
  EXPECT_EQ(v.kind(), OutcomeKind::value);
  EXPECT_EQ(v.value(), 3);
  EXPECT_FALSE(v.error());
  EXPECT_FALSE(v.exception());

  auto e = Outcome<int>::from_error(make_error_code(errc::rate_limited));
  EXPECT_TRUE(e.has_error());
  EXPECT_EQ(e.kind(), OutcomeKind::error);
  try {
    (void)e.value();
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.error(), errc::rate_limited);
  }

  auto x = Outcome<int>::from_exception(std::make_exception_ptr(std::out_of_range("x")));
  EXPECT_TRUE(x.has_exception());
  EXPECT_THROW((void)x.value(), std::out_of_range);

  Outcome<void> ok = Outcome<void>::success();
  EXPECT_TRUE(ok.has_value());
  EXPECT_NO_THROW(ok.value());
  EXPECT_TRUE(Outcome<int>().has_value());
  EXPECT_EQ(Outcome<int>().value(), 0);
}

TEST(Outcome, RefusesEmptyFailures) {
  EXPECT_THROW(Outcome<int>::from_error({}), std::invalid_argument);
  EXPECT_THROW(Outcome<int>::from_exception(nullptr), std::invalid_argument);
}

TEST(Outcome, RethrowKeepsTheExceptionObject) {
  std::exception_ptr ep;
  try {
    throw std::runtime_error("same");
  } catch (...) {
    ep = std::current_exception();
  }
  const std::exception* original = nullptr;
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    original = &e;
  }
  auto o = Outcome<std::string>::from_exception(ep);
  try {
    (void)o.value();
  } catch (const std::exception& e) {
    EXPECT_EQ(&e, original);
  }
}

TEST(Context, PropertiesAreTypedByNameAndType) {
  Context ctx(*Clock::steady(), true);
  Properties& p = ctx.properties();
  const Key<int> a("a");
  const Key<std::string> a_str("a");
  EXPECT_TRUE(p.empty());
  p.set(a, 1);
  p.set(a_str, std::string("one"));
  EXPECT_EQ(p.size(), 2U);
  EXPECT_EQ(*p.try_get(a), 1);
  EXPECT_EQ(*p.try_get(Key<int>("a")), 1);  // a new key with the same identity
  EXPECT_EQ(*p.try_get(a_str), "one");
  p.set(a, 2);
  EXPECT_EQ(p.get_or(a, 0), 2);
  EXPECT_EQ(p.get_or(Key<int>("missing"), 5), 5);
  EXPECT_FALSE(p.contains(Key<int>("A")));  // case-sensitive
  const Key<int*> null_key("");
  p.set(null_key, static_cast<int*>(nullptr));  // a stored null is present
  EXPECT_TRUE(p.contains(null_key));
  EXPECT_TRUE(p.erase(a));
  EXPECT_FALSE(p.erase(a));
  EXPECT_EQ(p.try_get(a), nullptr);
}

TEST(Context, PropertiesCopyDeeplyAndAnEmptyBagAnswersEverything) {
  Properties empty;
  const Key<int> a("a");
  EXPECT_EQ(empty.size(), 0U);
  EXPECT_FALSE(empty.contains(a));
  EXPECT_FALSE(empty.erase(a));
  empty.clear();
  Properties copy_of_empty(empty);
  EXPECT_TRUE(copy_of_empty.empty());

  Properties p;
  p.set(a, 1);
  Properties q(p);  // a deep copy: changing one leaves the other alone
  q.set(a, 2);
  EXPECT_EQ(p.get_or(a, 0), 1);
  EXPECT_EQ(q.get_or(a, 0), 2);
  q = empty;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(p.size(), 1U);
  Properties moved(std::move(p));
  EXPECT_EQ(moved.get_or(a, 0), 1);
  moved.clear();
  EXPECT_TRUE(moved.empty());
  moved.set(a, 3);  // usable after clear
  EXPECT_EQ(moved.get_or(a, 0), 3);
}

TEST(Context, PropertiesMatchNameAndTypeTogetherAndSurviveSelfAssignment) {
  Properties p;
  const Key<int> a("a");
  const Key<std::string> a_str("a");
  p.set(a, 1);
  EXPECT_FALSE(p.erase(a_str)) << "same name, other type";
  EXPECT_FALSE(p.erase(Key<int>("b"))) << "same type, other name";
  p.set(a_str, std::string("one"));
  EXPECT_TRUE(p.erase(a_str));
  EXPECT_EQ(p.size(), 1U);
  EXPECT_EQ(p.get_or(a, 0), 1) << "erasing one type left the other under the same name";
  const Properties& self = p;
  p = self;
  EXPECT_EQ(p.size(), 1U);
  EXPECT_EQ(p.get_or(a, 0), 1);
}

TEST(Context, CancelledFollowsTheStopToken) {
  std::stop_source s;
  Context ctx(*Clock::steady(), true, s.get_token());
  EXPECT_TRUE(ctx.synchronous());
  EXPECT_FALSE(ctx.cancelled());
  s.request_stop();
  EXPECT_TRUE(ctx.cancelled());
  EXPECT_EQ(ctx.attempt(), 0U);
  EXPECT_EQ(ctx.deadline(), Clock::time_point::max());
}

TEST(ManualClock, MovesOnlyWhenAdvanced) {
  auto clock = ManualClock::create();
  const auto t0 = clock->now();
  EXPECT_EQ(clock->now(), t0);
  clock->advance(std::chrono::milliseconds(250));
  EXPECT_EQ(clock->now() - t0, std::chrono::milliseconds(250));
  clock->advance_to(t0);  // never backwards
  EXPECT_EQ(clock->now() - t0, std::chrono::milliseconds(250));
  EXPECT_THROW(clock->advance(-std::chrono::seconds(1)), std::invalid_argument);
}

/// A minimal ClockWaiter recording its completion.
struct RecordingWaiter final : ClockWaiter {
  explicit RecordingWaiter(asio::io_context& ioc) : ex(ioc.get_executor()) {}
  asio::any_io_executor executor() const noexcept override { return ex; }
  asio::cancellation_slot cancellation_slot() const noexcept override {
    return const_cast<asio::cancellation_signal&>(signal).slot();
  }
  void complete(const boost::system::error_code& e) override {
    ++completions;
    ec = e;
  }
  void abandon() noexcept override { ++abandoned; }
  asio::any_io_executor ex;
  asio::cancellation_signal signal;
  int completions = 0;
  int abandoned = 0;
  boost::system::error_code ec;
};

TEST(ManualClock, TimerFiresAtItsDeadlineOnItsExecutor) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  RecordingWaiter w(ioc);
  auto timer = clock->make_timer(ioc.get_executor());
  timer->async_wait_until(clock->now() + std::chrono::seconds(2), w);
  EXPECT_EQ(clock->pending_timers(), 1U);
  clock->advance(std::chrono::seconds(1));
  ioc.poll();
  EXPECT_EQ(w.completions, 0);
  clock->advance(std::chrono::seconds(1));
  EXPECT_EQ(w.completions, 0);  // posted, not run inside advance()
  ioc.poll();
  EXPECT_EQ(w.completions, 1);
  EXPECT_FALSE(w.ec);
  EXPECT_EQ(clock->pending_timers(), 0U);
}

TEST(ManualClock, TimerCancellationThroughTheSlotAndCancel) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  RecordingWaiter w(ioc);
  auto timer = clock->make_timer(ioc.get_executor());
  timer->async_wait_until(clock->now() + std::chrono::hours(1), w);
  w.signal.emit(asio::cancellation_type::terminal);
  ioc.poll();
  EXPECT_EQ(w.completions, 1);
  EXPECT_EQ(w.ec, asio::error::operation_aborted);
  ioc.restart();
  RecordingWaiter w2(ioc);
  timer->async_wait_until(clock->now() + std::chrono::hours(1), w2);
  timer->cancel();
  timer->cancel();  // a second cancel has nothing left to cancel
  ioc.poll();
  EXPECT_EQ(w2.completions, 1);
  EXPECT_EQ(w2.ec, asio::error::operation_aborted);
}

TEST(ManualClock, DestroyingTheClockAbortsEveryOutstandingWait) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  RecordingWaiter first(ioc);
  RecordingWaiter second(ioc);
  auto t1 = clock->make_timer(ioc.get_executor());
  auto t2 = clock->make_timer(ioc.get_executor());
  t1->async_wait_until(clock->now() + std::chrono::seconds(1), first);
  t2->async_wait_until(clock->now() + std::chrono::hours(1), second);
  clock.reset();
  EXPECT_EQ(first.completions + second.completions, 0) << "posted, not run inside the destructor";
  ioc.poll();
  EXPECT_EQ(first.completions, 1);
  EXPECT_EQ(first.ec, asio::error::operation_aborted);
  EXPECT_EQ(second.completions, 1);
  EXPECT_EQ(second.ec, asio::error::operation_aborted);
  EXPECT_EQ(first.abandoned + second.abandoned, 0);
  // The timers outlive the clock: cancelling one reaches nothing, and a wait started on one
  // completes at once with operation_aborted, on its executor.
  t1->cancel();
  ioc.restart();
  RecordingWaiter late(ioc);
  t2->async_wait_until(Clock::time_point::max(), late);
  EXPECT_EQ(late.completions, 0) << "posted, not run inside the wait's initiation";
  ioc.poll();
  EXPECT_EQ(late.completions, 1);
  EXPECT_EQ(late.ec, asio::error::operation_aborted);
}

TEST(ManualClock, AbandonWaitsDropsOnlyTheWaitsOfThatExecutor) {
  auto clock = ManualClock::create();
  asio::io_context a;
  asio::io_context b;
  RecordingWaiter wa(a);
  RecordingWaiter wb(b);
  auto ta = clock->make_timer(a.get_executor());
  auto tb = clock->make_timer(b.get_executor());
  ta->async_wait_until(clock->now() + std::chrono::seconds(1), wa);
  tb->async_wait_until(clock->now() + std::chrono::seconds(2), wb);
  EXPECT_EQ(clock->pending_deadlines(),
            (std::vector<Clock::time_point>{clock->now() + std::chrono::seconds(1),
                                            clock->now() + std::chrono::seconds(2)}));
  EXPECT_EQ(clock->abandon_waits(a.get_executor()), 1U);
  EXPECT_EQ(wa.abandoned, 1);
  EXPECT_EQ(wb.abandoned, 0);
  EXPECT_EQ(clock->pending_timers(), 1U);
  wa.signal.emit(asio::cancellation_type::terminal);  // its cancellation handler is gone
  clock->advance(std::chrono::seconds(2));
  a.poll();
  b.poll();
  EXPECT_EQ(wa.completions, 0);
  EXPECT_EQ(wb.completions, 1);
  EXPECT_EQ(clock->abandon_waits(a.get_executor()), 0U);
}

TEST(ManualClock, ATimerPastItsDeadlineCompletesAtOnceButNotInline) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  RecordingWaiter w(ioc);
  auto timer = clock->make_timer(ioc.get_executor());
  timer->async_wait_until(clock->now(), w);
  EXPECT_EQ(w.completions, 0);
  ioc.poll();
  EXPECT_EQ(w.completions, 1);
}

TEST(SteadyClock, SleepStopsWhenRequested) {
  std::stop_source s;
  s.request_stop();
  EXPECT_FALSE(
      Clock::steady()->sleep_until(Clock::steady()->now() + std::chrono::hours(1), s.get_token()));
  EXPECT_TRUE(Clock::steady()->sleep_until(Clock::steady()->now(), {}));
}

}  // namespace
}  // namespace kevlar

namespace kevlar::detail {
namespace {

struct Recorder {
  int* calls;
  boost::asio::cancellation_type* last;
  void operator()(boost::asio::cancellation_type type) const {
    ++*calls;
    *last = type;
  }
};

/// Too big for the inline buffer: lives on the heap.
struct BigRecorder : Recorder {
  char padding[256] = {};
};

struct Counted {
  static inline int alive = 0;
  Counted() { ++alive; }
  Counted(const Counted&) { ++alive; }
  ~Counted() { --alive; }
  void operator()(boost::asio::cancellation_type) const {}
};

TEST(AsyncCall, HoldsSystemExecutorTellsTheSystemExecutorFromEveryOther) {
  // The refusal of a handler without an executor (errc::executor_required) and of attempts
  // without one rest on this function; the io_context's plain executor is answered first.
  using detail::holds_system_executor;
  asio::io_context ioc;
  asio::thread_pool pool(1);
  EXPECT_TRUE(holds_system_executor(asio::any_io_executor(asio::system_executor())));
  EXPECT_FALSE(holds_system_executor(asio::any_io_executor(ioc.get_executor())));
  // Neither of the two types it names: answered by comparing the system executor's type.
  EXPECT_FALSE(holds_system_executor(asio::any_io_executor(asio::make_strand(ioc))));
  EXPECT_FALSE(holds_system_executor(asio::any_io_executor(pool.get_executor())));
  EXPECT_FALSE(holds_system_executor(asio::prefer(asio::any_io_executor(ioc.get_executor()),
                                                  asio::execution::outstanding_work.tracked)));
  EXPECT_FALSE(holds_system_executor(asio::any_io_executor()));  // empty: not the system's
}

TEST(InlineCancellation, EmitsToTheInstalledHandlerOnlyWhileInstalled) {
  InlineCancellation storage;
  InlineSlot slot(&storage);
  EXPECT_TRUE(slot.is_connected());
  EXPECT_FALSE(slot.has_handler());
  EXPECT_FALSE(InlineSlot().is_connected());
  storage.emit(boost::asio::cancellation_type::terminal);  // nothing installed: no effect

  int calls = 0;
  auto last = boost::asio::cancellation_type::none;
  slot.emplace<Recorder>(Recorder{&calls, &last});
  EXPECT_TRUE(slot.has_handler());
  storage.emit(boost::asio::cancellation_type::partial);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(last, boost::asio::cancellation_type::partial);
  slot.clear();
  EXPECT_FALSE(slot.has_handler());
  storage.emit(boost::asio::cancellation_type::terminal);
  EXPECT_EQ(calls, 1);

  slot.assign(BigRecorder{{&calls, &last}});  // the heap path behaves the same
  storage.emit(boost::asio::cancellation_type::total);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(last, boost::asio::cancellation_type::total);
}

TEST(InlineCancellation, ReplacingClearingAndDestroyingDestroyTheHandler) {
  {
    InlineCancellation storage;
    InlineSlot slot(&storage);
    slot.emplace<Counted>();
    EXPECT_EQ(Counted::alive, 1);
    slot.emplace<Counted>();  // replaces
    EXPECT_EQ(Counted::alive, 1);
    slot.clear();
    EXPECT_EQ(Counted::alive, 0);
    slot.emplace<Counted>();
  }  // the storage's destructor destroys what is still installed
  EXPECT_EQ(Counted::alive, 0);
}

}  // namespace
}  // namespace kevlar::detail
