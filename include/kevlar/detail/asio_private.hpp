// kevlar — internal: what kevlar asks of Asio's private API, behind one declaration
// (src/asio_private.cpp is the only file that includes boost/asio/detail/).
#pragma once

#include <boost/asio/any_io_executor.hpp>

namespace kevlar::detail {

/// Whether a thread other than the context's own may post to the context of `ex`: false for an
/// io_context built with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE (or another hint without the
/// scheduler's lock), whose queue only its own thread may touch; true for every other context
/// (a thread_pool, a context without Asio's scheduler). Reads the io_context's concurrency hint
/// from Asio's scheduler service (Asio's private API).
[[nodiscard]] bool accepts_foreign_posts(const boost::asio::any_io_executor& ex);

}  // namespace kevlar::detail
