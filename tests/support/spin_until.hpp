// Stress tests wait for the calls other threads complete: with a deadline, so that a lost call
// fails the test instead of hanging it.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace kevlar::test {

/// Yields until `done()` is true or `limit` has passed; returns `done()`.
template <class Done>
bool spin_until(Done done, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  return done();
}

/// Runs `ioc` on `threads` threads, posts `start_call()` to it `calls` times, waits until
/// `completed` (which the calls' handlers count) reaches `calls` or a minute has passed, and
/// joins the threads (stopping the io_context if a call was lost).
template <class StartCall>
void run_posted_calls(boost::asio::io_context& ioc, int threads, int calls,
                      const std::atomic<int>& completed, StartCall start_call) {
  auto guard = boost::asio::make_work_guard(ioc);
  std::vector<std::thread> runners;
  for (int t = 0; t < threads; ++t) runners.emplace_back([&ioc] { ioc.run(); });
  for (int i = 0; i < calls; ++i) boost::asio::post(ioc, start_call);
  const bool all = spin_until([&] { return completed.load() >= calls; });
  guard.reset();
  if (!all) ioc.stop();
  for (auto& r : runners) r.join();
}

}  // namespace kevlar::test
