// kevlar — internal: an allocation-free cancellation slot inside an execution, which kevlar's own
// queue waits bind.
#pragma once

#include <boost/asio/cancellation_type.hpp>

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace kevlar::detail {

/// Storage for one cancellation handler inside an execution: the slot kevlar's own queue waits
/// (the concurrency limiter) bind, so that parking allocates nothing. Asio's cancellation_slot
/// takes its handler's memory from a per-thread cache that exists only inside a running
/// io_context, and allocates outside one.
class InlineCancellation {
 public:
  InlineCancellation() noexcept = default;
  InlineCancellation(const InlineCancellation&) = delete;
  InlineCancellation& operator=(const InlineCancellation&) = delete;
  ~InlineCancellation() { clear(); }

  template <class Handler, class... Args>
  Handler& emplace(Args&&... args) {
    clear();
    Handler* h = nullptr;
    if constexpr (sizeof(Handler) <= sizeof(buffer_) &&
                  alignof(Handler) <= alignof(std::max_align_t)) {
      h = ::new (static_cast<void*>(buffer_)) Handler(std::forward<Args>(args)...);
      destroy_ = [](void* p) noexcept { static_cast<Handler*>(p)->~Handler(); };
    } else {
      h = new Handler(std::forward<Args>(args)...);
      destroy_ = [](void* p) noexcept { delete static_cast<Handler*>(p); };
    }
    object_ = h;
    invoke_ = [](void* p, boost::asio::cancellation_type type) {
      (*static_cast<Handler*>(p))(type);
    };
    return *h;
  }
  void clear() noexcept {
    if (object_ == nullptr) return;
    void* p = std::exchange(object_, nullptr);
    invoke_ = nullptr;
    destroy_(p);
  }
  [[nodiscard]] bool has_handler() const noexcept { return object_ != nullptr; }
  void emit(boost::asio::cancellation_type type) {
    if (object_ != nullptr) invoke_(object_, type);
  }

 private:
  alignas(std::max_align_t) std::byte buffer_[2 * sizeof(void*)];
  void* object_ = nullptr;
  void (*invoke_)(void*, boost::asio::cancellation_type) = nullptr;
  void (*destroy_)(void*) noexcept = nullptr;
};

/// A cancellation slot over an InlineCancellation, with the interface Asio operations use
/// (is_connected, has_handler, emplace, assign, clear).
class InlineSlot {
 public:
  InlineSlot() noexcept = default;
  explicit InlineSlot(InlineCancellation* storage) noexcept : storage_(storage) {}
  [[nodiscard]] bool is_connected() const noexcept { return storage_ != nullptr; }
  [[nodiscard]] bool has_handler() const noexcept {
    return storage_ != nullptr && storage_->has_handler();
  }
  template <class Handler, class... Args>
  Handler& emplace(Args&&... args) {
    return storage_->emplace<Handler>(std::forward<Args>(args)...);
  }
  template <class Handler>
  std::decay_t<Handler>& assign(Handler&& handler) {
    return storage_->emplace<std::decay_t<Handler>>(std::forward<Handler>(handler));
  }
  void clear() noexcept {
    if (storage_ != nullptr) storage_->clear();
  }
  friend bool operator==(const InlineSlot& a, const InlineSlot& b) noexcept {
    return a.storage_ == b.storage_;
  }

 private:
  InlineCancellation* storage_ = nullptr;
};

}  // namespace kevlar::detail
