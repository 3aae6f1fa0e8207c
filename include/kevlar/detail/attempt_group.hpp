// kevlar — internal: the attempts one layer of an asynchronous execution runs at once
// (Layer::start_attempt), linked to the execution that started them.
#pragma once

#include <kevlar/detail/intrusive_list.hpp>

#include <cstdint>

namespace kevlar::detail {

class CallBase;

/// One inner attempt a layer started with Layer::start_attempt: the link between the attempt's own
/// execution (which runs the layers inside that layer and the user's operation) and the execution
/// that started it. It lives in the attempt's execution, and is in one list of the parent's at a
/// time: the running attempts, then the completions not yet reported.
struct AttemptNode : IntrusiveListHook<AttemptNode> {
  CallBase* call = nullptr;        ///< the attempt's execution
  CallBase* parent = nullptr;      ///< the execution that started it; nullptr once detached
  std::uint32_t id = 0;            ///< launch position within the layer's current round
  std::uint32_t cancel_epoch = 0;  ///< the parent's cancellation round this attempt last received
  bool cancelled_terminally = false;  ///< a terminal cancellation reached it already
};

/// The attempts one layer of an asynchronous execution runs at once (Layer::start_attempt). While
/// any runs, that layer is parked: its strategy returned Step::suspend and hears of each attempt
/// through Strategy::on_attempt_complete.
struct Attempts {
  IntrusiveList<AttemptNode> running;  ///< started, not completed, in launch order
  IntrusiveList<AttemptNode> done;     ///< completed, not yet reported, in completion order
  std::uint32_t started = 0;  ///< in the current round (ids are 0 .. started - 1)
  std::uint32_t running_count = 0;  ///< started, not yet reported (queued ones included)
  std::uint32_t epoch = 0;    ///< cancellation rounds (see AttemptNode::cancel_epoch)
  /// The engine is inside the parked layer (a launch, a cancellation): a completion that happens
  /// meanwhile is queued and reported when the engine gets back to the layer.
  bool busy = false;
  /// An attempt was abandoned while busy: the execution is abandoned once the engine is back.
  bool abandoned = false;
};

}  // namespace kevlar::detail
