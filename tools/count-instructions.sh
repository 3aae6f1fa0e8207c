#!/usr/bin/env bash
# Instructions per synchronous call (callgrind) of an empty shield, one pass-through strategy and
# each built-in strategy, against the Release library in build/ (cmake --preset release, then
# ninja -C build/release kevlar, or any Release build directory passed as $1).
#
#   tools/count-instructions.sh [build-dir]
#
# Deterministic where wall-clock benchmarks on a shared VM are not; compare revisions with it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
lib="$build/libkevlar.a"
[[ -f "$lib" ]] || { echo "no $lib: build the kevlar target in a Release build first" >&2; exit 1; }
command -v valgrind > /dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
includes=(-I"$root/include")
for d in "$root"/strategies/*/include; do includes+=(-I"$d"); done
exe="$(mktemp -d)/count-instructions"
g++ -std=c++20 -O3 -DNDEBUG -DBOOST_ASIO_NO_DEPRECATED "${includes[@]}" \
  "$root/tools/count-instructions.cpp" "$lib" -o "$exe" -lpthread
count() {  # instructions executed for $2 calls of shield $1
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" "$1" "$2" 2>&1 |
    awk '/Collected/ {print $4}'
}
n=100000
printf '%-24s %s\n' shield 'instructions/call'
for shield in empty pass_through retry timeout circuit_breaker concurrency_limit fallback \
  timeout_retry_breaker; do
  a=$(count "$shield" "$n")
  b=$(count "$shield" $((2 * n)))
  printf '%-24s %d\n' "$shield" $(((b - a) / n))
done
