// Helpers shared by the UnpairedSemaphore tests.
#pragma once

#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <new>
#include <thread>

namespace kevlar::semaphore_test {

namespace asio = boost::asio;
using boost::system::error_code;

/// What a completion handler saw.
struct Outcome {
  int calls = 0;
  error_code ec;
  std::thread::id thread;
  [[nodiscard]] bool succeeded() const { return calls == 1 && !ec; }
};

/// A handler bound to `ioc` that records into `out`.
inline auto record(asio::io_context& ioc, Outcome& out) {
  return asio::bind_executor(ioc, [&out](error_code ec) {
    ++out.calls;
    out.ec = ec;
    out.thread = std::this_thread::get_id();
  });
}

/// Runs the context until it has nothing ready, then makes it runnable again.
inline std::size_t drain(asio::io_context& ioc) {
  const std::size_t n = ioc.poll();
  ioc.restart();
  return n;
}

/// A minimal allocator that counts its allocations and goes through operator new (so the
/// allocation counter's failure injection reaches it even under sanitizers).
template <class T>
struct CountingAllocator {
  using value_type = T;
  std::shared_ptr<int> count = std::make_shared<int>(0);

  CountingAllocator() = default;
  template <class U>
  CountingAllocator(const CountingAllocator<U>& o) noexcept : count(o.count) {}  // NOLINT
  T* allocate(std::size_t n) {
    T* p = static_cast<T*>(::operator new(n * sizeof(T)));
    ++*count;
    return p;
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p); }
  template <class U>
  bool operator==(const CountingAllocator<U>& o) const noexcept {
    return count == o.count;
  }
};

}  // namespace kevlar::semaphore_test
