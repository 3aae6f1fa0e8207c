#!/usr/bin/env python3
"""Fails unless the queued-handoff pair cells of a kevlar_benchmarks JSON report allocate nothing.

    tools/check-pair-allocations.py <report.json> [required cell...]

<report.json> is what `kevlar_benchmarks --benchmark_format=json` (or --benchmark_out=...) wrote
for a run filtered to BM_QueuedHandoffPair cells. Every BM_QueuedHandoffPair cell in it must have
run without error and report allocs_per_op == 0; each required cell (a full benchmark name) must
be among them, so that a renamed or filtered-out cell cannot pass by being absent. CI's stage a
runs it on the build with KEVLAR_ASIO_RECYCLING_CACHE_SIZE set (tools/run-tests.sh).
"""
import json
import sys


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        report = json.load(f)
    required = set(argv[2:])
    problems = []
    seen = set()
    for cell in report.get("benchmarks", []):
        name = cell.get("name", "")
        if not name.startswith("BM_QueuedHandoffPair/"):
            continue
        seen.add(name)
        if cell.get("error_occurred"):
            problems.append(f"{name}: failed: {cell.get('error_message', '?')}")
            continue
        allocs = cell.get("allocs_per_op")
        if allocs is None:
            problems.append(f"{name}: no allocs_per_op counter")
        elif allocs != 0:
            problems.append(f"{name}: allocs_per_op = {allocs:g} "
                            f"(bytes_per_op = {cell.get('bytes_per_op', 0):g}), expected 0")
        else:
            print(f"check-pair-allocations: {name}: allocs_per_op = 0")
    for name in sorted(required - seen):
        problems.append(f"{name}: not in the report")
    if not seen:
        problems.append("no BM_QueuedHandoffPair cell in the report")
    for p in problems:
        print(f"check-pair-allocations: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
