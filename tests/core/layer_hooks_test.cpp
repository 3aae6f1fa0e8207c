// How the engine calls a layer's on_inner_complete and on_finish (detail::LayerHooks): directly
// for a final class, through the vtable otherwise, not at all when the strategy keeps Strategy's
// default. Skipping a call must never skip an override.
#include "async_ops.hpp"

#include <kevlar/kevlar.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

/// What the strategies below count: their on_inner_complete (which turns a value into
/// `errc::closed`, so that a skipped call shows in the outcome too) and on_finish calls.
struct Counts {
  int inner = 0;
  int finish = 0;
  Step on_inner(Layer& layer) {
    ++inner;
    layer.outcome().set_error(make_error_code(errc::closed));
    return Step::complete;
  }
};

class FinalPassThrough final : public Strategy {
 public:
  std::string describe() const override { return "FinalPassThrough"; }
  Step on_start(Layer&) override { return Step::run_inner; }
};

class FinalOverriding final : public Strategy {
 public:
  explicit FinalOverriding(Counts& c) : c_(&c) {}
  std::string describe() const override { return "FinalOverriding"; }
  Step on_start(Layer&) override { return Step::run_inner; }
  Step on_inner_complete(Layer& layer) override { return c_->on_inner(layer); }
  void on_finish(Layer&) noexcept override { ++c_->finish; }

 private:
  Counts* c_;
};

/// Overrides privately: a caller of Shield::use cannot name the overrides.
class FinalPrivate final : public Strategy {
 public:
  explicit FinalPrivate(Counts& c) : c_(&c) {}
  std::string describe() const override { return "FinalPrivate"; }
  Step on_start(Layer&) override { return Step::run_inner; }

 private:
  Step on_inner_complete(Layer& layer) override { return c_->on_inner(layer); }
  void on_finish(Layer&) noexcept override { ++c_->finish; }
  Counts* c_;
};

/// A base that declares neither callback, and a derived class that overrides both: appended
/// through a pointer to the base, the static type says nothing about the object.
class OpenBase : public Strategy {
 public:
  std::string describe() const override { return "OpenBase"; }
  Step on_start(Layer&) override { return Step::run_inner; }
};

class DerivedOverriding final : public OpenBase {
 public:
  explicit DerivedOverriding(Counts& c) : c_(&c) {}
  Step on_inner_complete(Layer& layer) override { return c_->on_inner(layer); }
  void on_finish(Layer&) noexcept override { ++c_->finish; }

 private:
  Counts* c_;
};

/// An intermediate base that overrides both, and final classes over it that declare functions
/// of the same names which override nothing: a const one, one with another parameter type, and
/// ones brought in from a class that is no strategy. The base's overrides must still run.
class OverridingBase : public Strategy {
 public:
  explicit OverridingBase(Counts& c) : c_(&c) {}
  std::string describe() const override { return "OverridingBase"; }
  Step on_start(Layer&) override { return Step::run_inner; }
  Step on_inner_complete(Layer& layer) override { return c_->on_inner(layer); }
  void on_finish(Layer&) noexcept override { ++c_->finish; }

 private:
  Counts* c_;
};

// Hiding the overrides is the point of the next two classes.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Woverloaded-virtual"
#endif
class HidesWithConst final : public OverridingBase {
 public:
  using OverridingBase::OverridingBase;
  // Hide the overrides from name lookup without overriding them.
  Step on_inner_complete(Layer&) const { return Step::complete; }
  void on_finish(const Layer&) const noexcept {}
};

struct NotAStrategy {
  Step on_inner_complete(Layer&) { return Step::complete; }
  void on_finish(Layer&) noexcept {}
};

class HidesWithUsing final : public OverridingBase, private NotAStrategy {
 public:
  using NotAStrategy::on_finish;
  using NotAStrategy::on_inner_complete;
  using OverridingBase::OverridingBase;
};
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

/// A strategy reached through a virtual base: no static_cast from Strategy&.
class VirtualBase final : public virtual Strategy {
 public:
  explicit VirtualBase(Counts& c) : c_(&c) {}
  std::string describe() const override { return "VirtualBase"; }
  Step on_start(Layer&) override { return Step::run_inner; }
  void on_finish(Layer&) noexcept override { ++c_->finish; }

 private:
  Counts* c_;
};

/// Overrides both but tells the engine, through its traits, that it needs neither.
class DeclinesByTraits final : public Strategy {
 public:
  explicit DeclinesByTraits(Counts& c) : c_(&c) {}
  std::string describe() const override { return "DeclinesByTraits"; }
  StrategyTraits traits() const noexcept override {
    StrategyTraits t;
    t.needs_inner_complete = false;
    t.needs_finish = false;
    return t;
  }
  Step on_start(Layer&) override { return Step::run_inner; }
  Step on_inner_complete(Layer&) override {
    ++c_->inner;
    return Step::complete;
  }
  void on_finish(Layer&) noexcept override { ++c_->finish; }

 private:
  Counts* c_;
};

/// A typed frame that counts its destructions, and a BasicStrategy that declares no callback but
/// start: the engine must still end the frame (needs_finish stays true).
struct CountedFrame {
  static inline int destroyed = 0;
  ~CountedFrame() { ++destroyed; }
};

class FrameOnly final : public BasicStrategy<FrameOnly, CountedFrame> {
 public:
  std::string describe() const override { return "FrameOnly"; }
  Step start(Layer&, Frame&) { return Step::run_inner; }
};

/// Its own traits say it needs no on_finish; BasicStrategy knows better (the frame must end).
class FrameOnlyDeclining final : public BasicStrategy<FrameOnlyDeclining, CountedFrame> {
 public:
  std::string describe() const override { return "FrameOnlyDeclining"; }
  StrategyTraits strategy_traits() const noexcept {
    StrategyTraits t;
    t.needs_finish = false;
    return t;
  }
  Step start(Layer&, Frame&) { return Step::run_inner; }
};

struct PlainFrame {
  int n = 0;
};

class PlainFrameOnly final : public BasicStrategy<PlainFrameOnly, PlainFrame> {
 public:
  std::string describe() const override { return "PlainFrameOnly"; }
  Step start(Layer&, Frame&) { return Step::run_inner; }
};

class PlainFrameJudging final : public BasicStrategy<PlainFrameJudging, PlainFrame> {
 public:
  std::string describe() const override { return "PlainFrameJudging"; }
  Step start(Layer&, Frame&) { return Step::run_inner; }
  Step inner_complete(Layer&, Frame&) { return Step::complete; }
};

// What Shield::use finds out from the static type.
/// A hook of the direct call: neither skipped nor the virtual call.
template <class Hook>
constexpr bool is_direct(Hook hook, Hook virtual_call) {
  return hook != nullptr && hook != virtual_call;
}
static_assert(is_direct(detail::layer_hooks<FinalOverriding>().inner_complete,
                        &detail::call_on_inner_complete));
static_assert(is_direct(detail::layer_hooks<FinalOverriding>().finish, &detail::call_on_finish));
static_assert(detail::layer_hooks<HidesWithConst>().inner_complete ==
              &detail::call_on_inner_complete);
static_assert(detail::layer_hooks<HidesWithConst>().finish == &detail::call_on_finish);
static_assert(detail::layer_hooks<HidesWithUsing>().inner_complete ==
              &detail::call_on_inner_complete);
static_assert(detail::layer_hooks<HidesWithUsing>().finish == &detail::call_on_finish);
static_assert(detail::layer_hooks<VirtualBase>().finish == &detail::call_on_finish);
static_assert(detail::layer_hooks<FinalPassThrough>().inner_complete == nullptr);
static_assert(detail::layer_hooks<FinalPassThrough>().finish == nullptr);
static_assert(detail::layer_hooks<OpenBase>().inner_complete == &detail::call_on_inner_complete);
static_assert(detail::layer_hooks<OpenBase>().finish == &detail::call_on_finish);
static_assert(detail::layer_hooks<FinalPrivate>().inner_complete ==
              &detail::call_on_inner_complete);
static_assert(detail::layer_hooks<FinalPrivate>().finish == &detail::call_on_finish);

TEST(LayerHooks, BasicStrategyTraitsSayWhichDefaultsDerivedKeeps) {
  EXPECT_FALSE(PlainFrameOnly{}.traits().needs_inner_complete);
  EXPECT_FALSE(PlainFrameOnly{}.traits().needs_finish);
  EXPECT_TRUE(PlainFrameJudging{}.traits().needs_inner_complete);
  EXPECT_FALSE(PlainFrameJudging{}.traits().needs_finish);
  // No `finish`, but a frame with a destructor to run.
  EXPECT_TRUE(FrameOnly{}.traits().needs_finish);
  // The built-ins: a retry ends with nothing to release; a timeout restores the deadline.
  const Shield retry = Shield{}.retry(2);
  const Shield timeout = Shield{}.timeout(std::chrono::seconds(1));
  EXPECT_TRUE(retry.strategies()[0]->traits().needs_inner_complete);
  EXPECT_FALSE(retry.strategies()[0]->traits().needs_finish);
  EXPECT_TRUE(timeout.strategies()[0]->traits().needs_inner_complete);
  EXPECT_TRUE(timeout.strategies()[0]->traits().needs_finish);
}

/// Each way of appending an overriding strategy: every override runs, once per execution.
TEST(LayerHooks, OverridesRunWhicheverWayTheStrategyIsAppended) {
  Counts c;
  auto final_overriding = std::make_shared<FinalOverriding>(c);
  auto final_private = std::make_shared<FinalPrivate>(c);
  auto derived = std::make_shared<DerivedOverriding>(c);
  auto hides_const = std::make_shared<HidesWithConst>(c);
  auto hides_using = std::make_shared<HidesWithUsing>(c);
  const Shield shields[] = {
      Shield{}.use(hides_const),
      Shield{}.use(hides_using),
      Shield{}.use(final_overriding),
      Shield{}.use(std::shared_ptr<Strategy>(final_overriding)),
      Shield{}.use(final_private),
      Shield{}.use(std::shared_ptr<OpenBase>(derived)),
      Shield{}.use(std::shared_ptr<Strategy>(derived)),
      Shield{}.use(derived),
      // wrap() carries each strategy's hooks along.
      Shield{}.use(std::make_shared<FinalPassThrough>()).wrap(Shield{}.use(derived)),
  };
  int expected = 0;
  for (const Shield& s : shields) {
    const Outcome<int> o = s.execute_outcome([] { return 1; });
    ++expected;
    ASSERT_TRUE(o.has_error()) << s.describe();
    EXPECT_EQ(o.error(), make_error_code(errc::closed)) << s.describe();
    EXPECT_EQ(c.inner, expected) << s.describe();
    EXPECT_EQ(c.finish, expected) << s.describe();
  }
}

TEST(LayerHooks, OverridesRunInAsynchronousExecutions) {
  Counts c;
  const Shield shield = Shield{}
                            .use(std::shared_ptr<OpenBase>(std::make_shared<DerivedOverriding>(c)))
                            .use(std::make_shared<FinalOverriding>(c));
  asio::io_context ioc;
  error_code got;
  int completions = 0;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 7, std::move(token)); },
      asio::bind_executor(ioc, [&](error_code ec, int) {
        got = ec;
        ++completions;
      }));
  ioc.run();
  EXPECT_EQ(completions, 1);
  EXPECT_EQ(got, make_error_code(errc::closed));
  EXPECT_EQ(c.inner, 2);
  EXPECT_EQ(c.finish, 2);
}

TEST(LayerHooks, TraitsThatDeclineACallbackAreTakenAtTheirWord) {
  Counts c;
  const Shield shield = Shield{}.use(std::make_shared<DeclinesByTraits>(c));
  EXPECT_EQ(shield.execute([] { return 5; }), 5);
  EXPECT_EQ(c.inner, 0);
  EXPECT_EQ(c.finish, 0);
}

TEST(LayerHooks, AVirtualBaseKeepsTheVirtualCall) {
  Counts c;
  const Shield shield = Shield{}.use(std::make_shared<VirtualBase>(c));
  EXPECT_EQ(shield.execute([] { return 2; }), 2);
  EXPECT_EQ(c.finish, 1);
}

TEST(LayerHooks, ABasicStrategysFrameEndsWhateverItsTraitsSay) {
  EXPECT_TRUE(FrameOnlyDeclining{}.traits().needs_finish);
  const Shield shield = Shield{}.use(std::make_shared<FrameOnlyDeclining>());
  const int before = CountedFrame::destroyed;
  EXPECT_EQ(shield.execute([] { return 3; }), 3);
  EXPECT_EQ(CountedFrame::destroyed, before + 1);
}

TEST(LayerHooks, AFrameWithADestructorEndsWithoutAFinishCallback) {
  const Shield shield = Shield{}.use(std::make_shared<FrameOnly>());
  const int before = CountedFrame::destroyed;
  EXPECT_EQ(shield.execute([] { return 3; }), 3);
  EXPECT_EQ(CountedFrame::destroyed, before + 1);

  asio::io_context ioc;
  int value = 0;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 4, std::move(token)); },
      asio::bind_executor(ioc, [&](error_code, int v) { value = v; }));
  ioc.run();
  EXPECT_EQ(value, 4);
  EXPECT_EQ(CountedFrame::destroyed, before + 2);
}

TEST(LayerHooks, APassThroughKeepsTheInnerOutcome) {
  const Shield shield =
      Shield{}.use(std::make_shared<FinalPassThrough>()).use(std::make_shared<PlainFrameOnly>());
  EXPECT_EQ(shield.execute([] { return 9; }), 9);
  const Outcome<int> o = shield.execute_outcome([]() -> int { throw std::runtime_error("boom"); });
  ASSERT_TRUE(o.has_exception());
  EXPECT_THROW(std::rethrow_exception(o.exception()), std::runtime_error);
}

}  // namespace
}  // namespace kevlar
