// Small Asio operations used by the asynchronous tests.
#pragma once

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <utility>

namespace kevlar::test {

/// Completes with (ec, value) through a post to `ex` (or the handler's executor).
template <class Executor, class Token>
auto async_answer(const Executor& ex, boost::system::error_code ec, int value, Token&& token) {
  return boost::asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [ex](auto handler, boost::system::error_code e, int v) {
        auto hex = boost::asio::get_associated_executor(handler, ex);
        boost::asio::post(hex, boost::asio::append(std::move(handler), e, v));
      },
      token, ec, value);
}

/// An attempt whose operation never completes by itself and completes with operation_aborted
/// inside its cancellation handler (as an operation may): for execute_async.
struct CompletesOnCancel {
  template <class Token>
  auto operator()(Token&& token) const {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [](auto handler) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          slot.assign([h](boost::asio::cancellation_type) {
            std::move (*h)(boost::asio::error::operation_aborted);
          });
        },
        token);
  }
};

}  // namespace kevlar::test
