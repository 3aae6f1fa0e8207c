// kevlar — internal: KEVLAR_DETAIL_ALWAYS_INLINE, forced inlining in optimised builds only.
#pragma once

// [[gnu::always_inline]] when the compiler optimises (__OPTIMIZE__: -O1 and above, -Og too),
// nothing at -O0.
//
// The engine's hot functions (the synchronous walk of detail/sync_call.hpp, the dispatchers it
// shares with the asynchronous machine, the asynchronous shell's perform(), a context's
// destructor, the lease an execution holds on its pipeline) are inlined into their callers when
// the compiler optimises.
// At -O0 nothing else is inlined, and forcing these would copy their code into every caller (each
// inlined level of each call type's walk): a debugger could no longer step into them, and gcov
// would list every copy's branches under the same source line, where gcovr counts them as that
// many branches (the coverage build, tools/coverage.sh, is -O0). As functions of their own they
// are counted once, the instantiations of a template merged line by line.
//
// A program whose translation units are built at different levels sees two spellings of these
// inline functions; they behave the same (as with NDEBUG), and the linker keeps one.
#if defined(__OPTIMIZE__)
#define KEVLAR_DETAIL_ALWAYS_INLINE [[gnu::always_inline]]
#else
#define KEVLAR_DETAIL_ALWAYS_INLINE
#endif
