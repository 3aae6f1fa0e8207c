#!/usr/bin/env bash
# Instructions per call (callgrind) of an empty shield, one pass-through strategy and each built-in
# strategy, synchronous (Shield::execute) and asynchronous (async_*: sequential co_await
# execute_async calls on an io_context), with the kevlar_count_instructions driver of a Release
# build that has benchmarks enabled (cmake --preset release; ninja -C <dir>
# kevlar_count_instructions).
#
#   tools/count-instructions.sh [build-dir]     (default: build/release, else build)
#
# Deterministic where wall-clock benchmarks on a shared VM are not; compare revisions with it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-}"
if [[ -z "$build" ]]; then
  build="$root/build/release"
  [[ -x "$build/kevlar_count_instructions" ]] || build="$root/build"
fi
exe="$build/kevlar_count_instructions"
[[ -x "$exe" ]] || { echo "no $exe: build the kevlar_count_instructions target first" >&2; exit 1; }
command -v valgrind > /dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
count() {  # instructions executed for $2 calls of shield $1
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" "$1" "$2" 2>&1 |
    awk '/Collected/ {print $4}'
}
n=100000
printf '%-28s %s\n' shield 'instructions/call'
for shield in empty pass_through retry timeout circuit_breaker concurrency_limit fallback \
  timeout_retry_breaker async_empty async_pass_through async_retry async_timeout \
  async_circuit_breaker async_concurrency_limit async_timeout_retry_breaker; do
  a=$(count "$shield" "$n")
  b=$(count "$shield" $((2 * n)))
  printf '%-28s %d\n' "$shield" $(((b - a) / n))
done
