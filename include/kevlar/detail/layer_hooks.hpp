// kevlar — internal: how the engine calls a strategy's on_inner_complete and on_finish, as
// Shield::use found out from the strategy's static type (a direct call for a final class, none for
// a callback left to Strategy's default). Included by <kevlar/strategy.hpp>.
#pragma once

#include <kevlar/strategy.hpp>

#include <concepts>
#include <type_traits>

namespace kevlar {

namespace detail {

/// How the engine calls a strategy's on_inner_complete and on_finish (PipelineLayer's hooks),
/// as Shield::use found out from the strategy's static type `S`. For a `final` class, whose
/// objects are all of type `S`: a direct call of its override (the compiler devirtualises it), or
/// nullptr when it keeps Strategy's default (the engine then skips the call: the default changes
/// nothing). For any other class, whose objects may be of a further derived type, and wherever
/// the type does not say for sure, the virtual call.
struct LayerHooks {
  InnerCompleteHook inner_complete = &call_on_inner_complete;
  FinishHook finish = &call_on_finish;
};

/// The class of a pointer to member `M` (void for anything else).
template <class M>
struct MemberClass {
  using type = void;
};
template <class C, class F>
struct MemberClass<F C::*> {
  using type = C;
};

/// The direct calls LayerHooks holds for a final class `S`. Function templates rather than
/// lambdas: a lambda's conversion to a function pointer goes through a forwarding function that
/// g++ 12 does not turn into a tail call when the result is a class (Step), which cost every
/// layer a call frame.
template <class S>
Step direct_inner_complete(Strategy& s, Layer& l) {
  return static_cast<S&>(s).on_inner_complete(l);
}
template <class S>
void direct_finish(Strategy& s, Layer& l) noexcept {
  static_cast<S&>(s).on_finish(l);
}

/// The hooks of strategy class `S` (see LayerHooks). Naming a callback through `S` finds the
/// declaration nearest to `S`: Strategy's own (the default) unless `S` or a base between them
/// declares one. Only a declaration with exactly the virtual's signature, in a class derived
/// from Strategy, is taken for the override; an overload set, a hiding function with another
/// signature, a member this code cannot name (private, protected) or a virtual base keeps the
/// virtual call. One case the type cannot tell: `using Strategy::on_finish;` (or
/// on_inner_complete) in `S` over a base that overrides it reads as the default, and that
/// override is skipped; do not write that using-declaration.
template <class S>
constexpr LayerHooks layer_hooks() noexcept {
  LayerHooks h;
  if constexpr (std::is_final_v<S> && requires(Strategy& base) { static_cast<S&>(base); }) {
    if constexpr (requires { &S::on_inner_complete; }) {
      using M = decltype(&S::on_inner_complete);
      using C = typename MemberClass<M>::type;
      if constexpr (std::is_same_v<M, Step (Strategy::*)(Layer&)>) {
        h.inner_complete = nullptr;
      } else if constexpr (std::derived_from<C, Strategy> &&
                           std::is_same_v<M, Step (C::*)(Layer&)>) {
        h.inner_complete = &direct_inner_complete<S>;
      }
    }
    if constexpr (requires { &S::on_finish; }) {
      using M = decltype(&S::on_finish);
      using C = typename MemberClass<M>::type;
      if constexpr (std::is_same_v<M, void (Strategy::*)(Layer&) noexcept>) {
        h.finish = nullptr;
      } else if constexpr (std::derived_from<C, Strategy> &&
                           std::is_same_v<M, void (C::*)(Layer&) noexcept>) {
        h.finish = &direct_finish<S>;
      }
    }
  }
  return h;
}

}  // namespace detail

}  // namespace kevlar
