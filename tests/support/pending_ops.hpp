// A backend whose calls stay pending until the test completes them: what the asynchronous tests
// of strategies that start, race and cancel operations need.
#pragma once

#include <kevlar/context.hpp>
#include <kevlar/shield.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kevlar::test {

/// Calls of signature `void(error_code, int)` that complete only when the test says so, or with
/// `operation_aborted` when cancelled (posted, as Asio's operations complete). Each call records
/// the attempt's context as kevlar passed it (attempt number, a property) and every cancellation
/// it received. With `complete_inside_cancellation`, a cancelled call completes inside its
/// cancellation handler instead (as an operation may).
///
/// Thread-safety: one thread (the io_context's) at a time.
class PendingOps {
 public:
  struct Call {
    std::uint32_t attempt = 0;          ///< Context::attempt() of the attempt that made it
    std::optional<int> replica;         ///< the attempt's `replica_key` property, if set
    std::vector<boost::asio::cancellation_type> cancellations;
    bool done = false;
    std::function<void(boost::system::error_code, int, bool inline_now)> finish;
  };

  /// The property the tests use to steer an attempt (a hedge's action generator sets it).
  static const Key<int>& replica_key() {
    static const Key<int> key("replica");
    return key;
  }

  /// The AsyncAttempt to hand to Shield::execute_async.
  auto attempt() {
    return [this](auto token) { return async_call(std::move(token)); };
  }

  template <class Token>
  auto async_call(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, int)>(
        [self = this](auto handler) { self->start(std::move(handler)); }, token);
  }

  /// Completes call `i` with (ec, value), through its executor. Throws if it is already done.
  void complete(std::size_t i, boost::system::error_code ec, int value = 0) {
    Call& c = at(i);
    if (c.done) throw std::logic_error("PendingOps: call already completed");
    c.done = true;
    c.finish(ec, value, false);
  }
  void succeed(std::size_t i, int value) { complete(i, {}, value); }
  /// Destroys call `i`'s handler without invoking it, as an executor that shuts down with the
  /// call pending does (kevlar then abandons the execution). Throws if it is already done.
  void drop(std::size_t i) {
    Call& c = at(i);
    if (c.done) throw std::logic_error("PendingOps: call already completed");
    c.done = true;
    c.finish = nullptr;  // the only owner of the handler
  }

  [[nodiscard]] Call& at(std::size_t i) { return *calls_.at(i); }
  [[nodiscard]] std::size_t size() const noexcept { return calls_.size(); }
  [[nodiscard]] std::size_t pending() const noexcept {
    std::size_t n = 0;
    for (const auto& c : calls_) n += c->done ? 0 : 1;
    return n;
  }

  bool complete_inside_cancellation = false;
  /// A cancellation also completes every other pending call at once with `operation_aborted` (a
  /// client that fails all its requests when one is cancelled).
  bool cancel_fails_every_call = false;

 private:
  template <class Handler>
  void start(Handler handler) {
    auto call = std::make_shared<Call>();
    if (Context* ctx = attempt_context(handler)) {
      call->attempt = ctx->attempt();
      if (const int* r = ctx->properties().try_get(replica_key())) call->replica = *r;
    }
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    auto ex = boost::asio::get_associated_executor(handler, boost::asio::system_executor());
    auto h = std::make_shared<std::optional<Handler>>(std::move(handler));
    call->finish = [h, ex](boost::system::error_code ec, int v, bool inline_now) {
      if (!h->has_value()) return;
      Handler moved = std::move(**h);
      h->reset();
      if (inline_now) {
        std::move(moved)(ec, v);
      } else {
        boost::asio::post(ex, boost::asio::append(std::move(moved), ec, v));
      }
    };
    if (slot.is_connected()) {
      Call* raw = call.get();
      slot.assign([this, raw](boost::asio::cancellation_type type) {
        // An inline completion clears the slot, destroying this handler: work from locals.
        PendingOps* self = this;
        Call* c = raw;
        c->cancellations.push_back(type);
        if (c->done) return;
        c->done = true;
        const bool inline_now = self->complete_inside_cancellation;
        const bool all = self->cancel_fails_every_call;
        c->finish(boost::asio::error::operation_aborted, 0, inline_now);
        if (all) self->fail_all_pending();
      });
    }
    calls_.push_back(std::move(call));
  }

  void fail_all_pending() {
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      Call& c = *calls_[i];
      if (c.done) continue;
      c.done = true;
      c.finish(boost::asio::error::operation_aborted, 0, true);
    }
  }

  std::vector<std::shared_ptr<Call>> calls_;
};

}  // namespace kevlar::test
