// Operations for the queued-handoff shape (limit 1, queue 1: A runs, B queues, A's completion hands
// B the permit), shared by the limiter tests and BM_QueuedHandoffPair. Neither allocates: their
// handlers wait in typed static storage or go straight to a post.
//
// Both complete with `asio::post(handler)`, which submits to the handler's associated executor
// as it is. The other spelling, `asio::post(ex, handler)`, wraps a handler that names an executor
// (every kevlar attempt handler does) in Asio's work_dispatcher, which counts work on that
// executor twice: four more locked instructions per completion, 8 of a callback pair's 25, paid
// alike by every semaphore the pair benchmark compares.
#pragma once

#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <optional>
#include <utility>

namespace kevlar::testing {

/// An operation that parks its handler, without allocating, until resume() hands it to `Resume`
/// (a stateless callable taking the handler). One wait at a time per handler type.
template <class Resume>
class ParkedOp {
 public:
  template <class Token>
  auto wait(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, int)>(
        [this](auto handler) {
          using H = decltype(handler);
          Slot<H>::value.emplace(std::move(handler));
          resume_ = &resume_slot<H>;
        },
        token);
  }
  /// Hands the parked handler to `Resume`; a wait must be pending.
  void resume() { std::exchange(resume_, nullptr)(); }
  /// Whether a wait is pending.
  [[nodiscard]] bool pending() const noexcept { return resume_ != nullptr; }

 private:
  template <class H>
  struct Slot {
    static inline std::optional<H> value;
  };
  template <class H>
  static void resume_slot() {
    H h(std::move(*Slot<H>::value));
    Slot<H>::value.reset();
    Resume{}(std::move(h));
  }
  void (*resume_)() = nullptr;
};

/// Completes a handler through a post with `(error_code(), 1)`.
struct PostOne {
  template <class H>
  void operator()(H&& h) const {
    boost::asio::post(boost::asio::append(std::forward<H>(h), boost::system::error_code(), 1));
  }
};

/// Call A's operation: pending until fire() posts its completion `(error_code(), 1)` to the
/// handler's executor.
class OneShot : public ParkedOp<PostOne> {
 public:
  /// Posts the pending completion; a wait must be pending.
  void fire() { resume(); }
};

/// Call B's operation: completes at once, through a post, with `(error_code(), 42)`.
template <class Token>
auto async_answer(Token&& token) {
  return boost::asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [](auto handler) {
        boost::asio::post(boost::asio::append(std::move(handler), boost::system::error_code(), 42));
      },
      token);
}

}  // namespace kevlar::testing
