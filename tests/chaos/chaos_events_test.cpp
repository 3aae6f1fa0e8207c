// What observers see of chaos: a ChaosInjected event per injection, after on_injected and before
// the injection takes effect, with the strategy's position and the execution's scope; nothing when
// nothing is injected; and a throwing observer changes no injection.
#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;

ChaosFaultOptions always_reset() {
  ChaosFaultOptions o;
  o.chaos.enabled = true;
  o.error = asio::error::connection_reset;
  return o;
}

TEST(ChaosEvents, AnInjectionIsReportedAfterTheHookWithItsScopeAndPosition) {
  auto recorder = std::make_shared<testing::EventRecorder>();
  std::vector<std::string> order;
  ChaosFaultOptions o = always_reset();
  o.chaos.on_injected = [&](const ChaosEvent&) {
    order.emplace_back("hook:" + std::to_string(recorder->count_of<ChaosInjected>()));
  };
  const Shield shield =
      Shield{}.retry(0).wrap(chaos::fault(o)).with_name("api").observed_by(recorder);
  {
    ChaosScope scope{"checkout", "staging"};
    EXPECT_EQ(shield.execute_outcome([] { return 1; }).error(), asio::error::connection_reset);
  }
  EXPECT_EQ(order, std::vector<std::string>{"hook:0"});  // the hook ran before the event
  const auto injected = recorder->events_of<ChaosInjected>();
  ASSERT_EQ(injected.size(), 1u);
  EXPECT_EQ(injected[0].kind, ChaosKind::fault);
  EXPECT_EQ(injected[0].operation, "checkout");
  EXPECT_EQ(injected[0].environment, "staging");
  const auto events = recorder->events();
  ASSERT_EQ(events.size(), 2u);  // the injection, then the execution's end: no attempt started
  EXPECT_EQ(events[0].strategy_index, 1u);
  EXPECT_EQ(events[0].shield_name, "api");
  EXPECT_TRUE(events[1].detail.is<ExecutionFinished>());
  EXPECT_EQ(events[1].detail.get_if<ExecutionFinished>()->attempts, 0u);
}

TEST(ChaosEvents, NothingIsReportedWhenNothingIsInjected) {
  auto recorder = std::make_shared<testing::EventRecorder>();
  ChaosFaultOptions o = always_reset();
  o.chaos.injection_rate = 0.0;
  const Shield shield = chaos::fault(o).observed_by(recorder);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(recorder->count_of<ChaosInjected>(), 0u);
  EXPECT_EQ(recorder->count_of<AttemptStarted>(), 1u);
}

TEST(ChaosEvents, AThrowingObserverChangesNoInjection) {
  struct Thrower final : Observer {
    void on_event(const Event&) override { throw std::runtime_error("observer down"); }
    [[nodiscard]] EventKinds interests() const override {
      return event_kinds<ChaosInjected>();
    }
  };
  ChaosOutcomeOptions<int> o;
  o.chaos.enabled = true;
  o.result = 42;
  const Shield shield = chaos::outcome(o).observed_by(std::make_shared<Thrower>());
  EXPECT_EQ(shield.execute([] { return 1; }), 42);
  EXPECT_EQ(shield.execute([] { return 1; }), 42);
  EXPECT_EQ(shield.observer_failures(), 2u);
}

}  // namespace
}  // namespace kevlar
