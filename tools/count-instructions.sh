#!/usr/bin/env bash
# Instructions per call (callgrind) of an empty shield, one pass-through strategy and each built-in
# strategy (and the rate limit's control: a pass-through layer reading the clock and doing one
# CAS; retry_budget_*: retry(3) holding a budget of each mode; adaptive_throttle: refusing
# nothing), synchronous (Shield::execute) and asynchronous (async_*: sequential co_await
# execute_async calls on an io_context; async_hedge_*: a hedge whose first attempt wins before its
# delay, or fails and the second wins; async_deadline_*: each call with a caller's deadline that
# never expires, CallOptions::deadline), of timeout -> retry -> breaker with observers
# (observed_trb_*: an observer doing nothing, the metrics observer, the spdlog observer, both),
# and per queued-handoff pair (pair_*: the idle cells of
# BM_QueuedHandoffPair), with the kevlar_count_instructions driver of a Release build that has
# benchmarks enabled (cmake --preset release; ninja -C <dir> kevlar_count_instructions).
#
#   tools/count-instructions.sh [build-dir]     (default: build/release, else build)
#
# Each count runs the driver under callgrind with N and 2N calls and divides the difference by N,
# which cancels start-up and set-up. Deterministic where wall-clock benchmarks on a shared VM are
# not; tools/check-instructions.sh compares these counts with the committed baseline.
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

# The modes, each with its N (fewer for the slower shapes, to keep the whole run near a minute).
modes=(
  "empty 100000" "pass_through 100000" "retry 100000" "timeout 100000" "circuit_breaker 100000"
  "concurrency_limit 100000" "concurrency_limit_configured 100000" "fallback 100000" "rate_limit 100000" "clock_cas_control 100000"
  "chaos_disabled 100000"
  "adaptive_concurrency_limit 100000" "adaptive_concurrency_limit_sampled 100000"
  "retry_budget_tokens 100000" "retry_budget_rate 100000" "retry_budget_concurrency 100000"
  "adaptive_throttle 100000"
  "timeout_retry_breaker 100000"
  "five_strategies 100000"
  "async_empty 20000" "async_pass_through 20000" "async_retry 20000" "async_timeout 20000"
  "async_circuit_breaker 20000" "async_concurrency_limit 20000" "async_rate_limit 20000"
  "async_adaptive_concurrency_limit 20000" "async_adaptive_throttle 20000"
  "async_timeout_retry_breaker 20000" "async_five_strategies 20000"
  "async_deadline_pass_through 20000" "async_deadline_empty 20000"
  "async_hedge_first_wins 20000" "async_hedge_second_wins 10000"
  "async_hedge_second_wins_budget 10000"
  "pair_unpaired_callback 10000" "pair_unpaired_coroutine 5000"
  "pair_priority_callback 10000" "pair_priority_coroutine 5000"
  "pair_queue_timeout_callback 10000" "pair_queue_timeout_coroutine 5000"
  "pair_no_limiter_control_callback 10000" "pair_no_limiter_control_coroutine 5000"
  "pair_shield_control_callback 10000" "pair_shield_control_coroutine 5000"
  "pair_mutex_control_callback 10000" "pair_mutex_control_coroutine 5000"
  "pair_channel_control_callback 10000" "pair_channel_control_coroutine 5000"
  "observed_trb_noop 100000" "observed_trb_metrics 100000" "observed_trb_spdlog 100000"
  "observed_trb_both 100000"
  "async_observed_trb_metrics 20000" "async_observed_trb_both 20000"
)

count() {  # instructions executed for $2 calls of mode $1
  local out
  out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$exe" "$1" "$2" 2>&1) || {
    echo "count-instructions: $exe $1 $2 failed under callgrind:" >&2
    echo "$out" >&2
    return 1
  }
  awk '/Collected/ {print $4}' <<< "$out"
}

printf '%-36s %s\n' mode 'instructions/call'
for entry in "${modes[@]}"; do
  read -r mode n <<< "$entry"
  a=$(count "$mode" "$n")
  b=$(count "$mode" $((2 * n)))
  printf '%-36s %d\n' "$mode" $(((b - a) / n))
done
