#!/usr/bin/env bash
# The instruction-count gate: runs tools/count-instructions.sh and compares every count with the
# committed baseline, tools/instruction-baseline.txt. Fails if a count grew by more than 2 % (and
# by more than 2 instructions: the smallest counts round by one), fell by as much (a gain is
# recorded in the baseline, in the commit that makes it), or if the modes differ from the
# baseline's. Prints the table either way.
#
#   tools/check-instructions.sh [build-dir]            check (CI's stage e)
#   tools/check-instructions.sh --update [build-dir]   rewrite the baseline with the new counts
#
# A change that makes a count grow on purpose updates the baseline in the same commit and says
# why in its message.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
update=0
args=()
for arg in "$@"; do
  if [[ "$arg" == "--update" ]]; then
    update=1
  else
    args+=("$arg")
  fi
done
baseline="$root/tools/instruction-baseline.txt"
tolerance_pct=2
tolerance_abs=2  # instructions: (b - a) / n rounds down, so a count near a whole number moves by 1

counts=$("$root/tools/count-instructions.sh" "${args[@]}" | tail -n +2)

if ((update)); then
  {
    echo "# Instructions per call (per pair for pair_*), counted by tools/count-instructions.sh on a"
    echo "# g++ 12 Release build; checked by tools/check-instructions.sh (CI stage e), tolerance ${tolerance_pct} %."
    echo "# Regenerate with: tools/check-instructions.sh --update [build-dir]"
    echo "$counts"
  } > "$baseline"
  echo "check-instructions: wrote $baseline"
  cat "$baseline"
  exit 0
fi

[[ -f "$baseline" ]] || { echo "check-instructions: no baseline $baseline (run with --update)" >&2; exit 1; }

status=0
printf '%-36s %10s %10s %8s  %s\n' mode baseline now change verdict
declare -A seen=()
while read -r mode now; do
  [[ -n "$mode" ]] || continue
  seen[$mode]=1
  base=$(awk -v m="$mode" '$1 == m {print $2}' "$baseline")
  if [[ -z "$base" ]]; then
    printf '%-36s %10s %10d %8s  %s\n' "$mode" - "$now" - "NOT IN BASELINE"
    status=1
    continue
  fi
  # Change in tenths of a percent, rounded towards zero; the limits compare exactly.
  change=0
  ((base > 0)) && change=$(((now - base) * 1000 / base))
  verdict=ok
  diff=$((now - base))
  if ((now * 100 > base * (100 + tolerance_pct) && diff > tolerance_abs)); then
    verdict="GREW more than ${tolerance_pct} %"
    status=1
  elif ((now * 100 < base * (100 - tolerance_pct) && -diff > tolerance_abs)); then
    verdict="FELL more than ${tolerance_pct} %: record the gain (--update)"
    status=1
  fi
  sign="+"
  if ((change < 0)); then
    sign="-"
    change=$((-change))
  fi
  printf '%-36s %10d %10d %7s%%  %s\n' "$mode" "$base" "$now" \
    "$sign$((change / 10)).$((change % 10))" "$verdict"
done <<< "$counts"
while read -r mode _; do
  [[ -z "$mode" || "$mode" == \#* ]] && continue
  if [[ -z "${seen[$mode]:-}" ]]; then
    printf '%-36s %10s %10s %8s  %s\n' "$mode" "(baseline)" - - "NOT COUNTED"
    status=1
  fi
done < "$baseline"
if ((status != 0)); then
  echo "check-instructions: FAILED (tolerance ${tolerance_pct} %; baseline $baseline)" >&2
else
  echo "check-instructions: all counts within ${tolerance_pct} % of the baseline"
fi
exit "$status"
