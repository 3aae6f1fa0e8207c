#pragma once

// KEVLAR_DETAIL_ALWAYS_INLINE: [[gnu::always_inline]] in optimised builds, nothing otherwise.
//
// The engine's hot functions (the synchronous walk of detail/sync_call.hpp, the dispatchers it
// shares with the asynchronous machine, a context's destructor) are inlined into each call type's
// execution when the compiler optimises. An unoptimised build inlines nothing else, and forcing
// these would copy the dispatchers' code into every call type's walk: a debugger could no longer
// step into them, and gcov would count their branches once per call type instead of once (the
// coverage build, tools/coverage.sh, is unoptimised).
#if defined(__OPTIMIZE__)
#define KEVLAR_DETAIL_ALWAYS_INLINE [[gnu::always_inline]]
#else
#define KEVLAR_DETAIL_ALWAYS_INLINE
#endif
