#!/usr/bin/env bash
# Per-phase profile of the queued-handoff pair (limit 1, queue 1; BM_QueuedHandoffPair's idle
# cells): for unpaired, mutex_control, channel_control, shield_control (two shield calls without
# a limiter) and no_limiter_control (the floor), with callback and coroutine callers,
# instructions and locked instructions per pair attributed to queue publication, waiter
# completion, continuation scheduling, the limiter's callbacks, kevlar's engine and Asio's floor.
# The method and the function-to-phase mapping are in tools/handoff-profile.py; the table and how
# to read it in docs/semaphore.md.
#
#   tools/handoff-profile.sh [--build] [--pairs N] [--cells a,b] [--callers a,b] [--explain]
#                            [--check] [profile-build-dir]
#
#   --build      configure and build the driver first: the release preset with -g added
#                (CMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG -g": the same code as the Release build,
#                plus the line and inline tables the attribution reads), in build/profile
#   --pairs N    the callgrind runs use N and 2N pairs (default 2000)
#   --cells, --callers   a subset (default: all five cells; callback,coroutine)
#   --explain    also list the functions and the locked instructions behind every phase
#   --check      exit non-zero unless the phases add up to each cell's callgrind total, each
#                limiter cell has the three handoff phases, shield_control none of them and
#                no_limiter_control only the floor
#
# With the default build directory, if build/release/kevlar_count_instructions exists (the
# Release build the instruction gate counts), each cell's per-pair total there is printed beside,
# with the difference.
# Needs valgrind, binutils (objdump, addr2line) and Python 3.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build=""
do_build=0
args=()
while (($# > 0)); do
  case "$1" in
    --build) do_build=1 ;;
    --pairs | --cells | --callers) args+=("$1" "$2"); shift ;;
    --explain | --check) args+=("$1") ;;
    -h | --help) sed -n '2,26p' "$0"; exit 0 ;;
    *) build="$1" ;;
  esac
  shift
done
default_build=0
if [[ -z "$build" ]]; then
  build="$root/build/profile"
  default_build=1
fi
if ((do_build)); then
  cmake --preset release -S "$root" -B "$build" -DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG -g" \
    > /dev/null
  cmake --build "$build" -j2 --target kevlar_count_instructions
fi
exe="$build/kevlar_count_instructions"
[[ -x "$exe" ]] || { echo "no $exe: run with --build first" >&2; exit 1; }
for tool in valgrind objdump addr2line python3; do
  command -v "$tool" > /dev/null || { echo "handoff-profile: $tool is needed" >&2; exit 1; }
done
gate="$root/build/release/kevlar_count_instructions"
if ((default_build)) && [[ -x "$gate" ]]; then
  args+=(--compare "$gate")
fi
exec python3 "$root/tools/handoff-profile.py" --exe "$exe" --source-root "$root" "${args[@]}"
