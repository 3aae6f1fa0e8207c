#!/usr/bin/env python3
"""Where a mode's instructions go: per-call self instructions of every function, by callgrind.

    tools/instructions-by-function.py [--build-dir DIR] [--calls N] MODE [CONTROL]

MODE and CONTROL are modes of kevlar_count_instructions (tools/count-instructions.sh lists them).
Each mode runs under callgrind twice, with N and 2N calls; a function's count in the second run
minus its count in the first, divided by N, is what one call spends in it (start-up and set-up
cancel, as in count-instructions.sh). With CONTROL, the table shows MODE's figure, CONTROL's and
the difference, largest difference first: where MODE spends what CONTROL does not (for instance
async_pass_through against async_empty, the asynchronous engine against a shield that hands the
handler straight to the operation). Function names are shortened: template arguments,
parameter lists and clone suffixes are dropped, so overloads, instantiations and clones of one
name are summed.

Needs valgrind (callgrind_annotate comes with it) and a Release build with benchmarks enabled
(default build/release; ninja -C DIR kevlar_count_instructions).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def shorten(name: str) -> str:
    name = re.sub(r"\s*\[/[^\]]*\]\s*$", "", name)  # the object file
    name = re.sub(r"^[^:\s]*:(?!:)", "", name)  # the source file ("???" without debug info)
    # Clones of one function (a cold part, an interprocedural copy) count as the function.
    name = re.sub(r"\s*\[clone [^\]]*\]", "", name)
    # Operators whose names hold the characters stripped below.
    name = re.sub(r"operator(<<=?|>>=?|<=>|<=|>=|<|>|\(\))", lambda m: "operator" + {
        "<<": "_shl", "<<=": "_shl_eq", ">>": "_shr", ">>=": "_shr_eq", "<=>": "_cmp",
        "<=": "_le", ">=": "_ge", "<": "_lt", ">": "_gt", "()": "_call"}[m.group(1)], name)
    for pattern in (r"<[^<>]*>", r"\([^()]*\)"):
        previous = None
        while previous != name:
            previous, name = name, re.sub(pattern, "", name)
    return name


def self_counts(exe: str, mode: str, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", exe, mode, str(calls)],
            capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"instructions-by-function: {exe} {mode} {calls} failed:\n{run.stderr}")
        # Self costs of functions only: no source annotation (a build with debug information
        # would add source and call lines), no inclusive costs.
        annotated = subprocess.run(
            ["callgrind_annotate", "--threshold=100", "--auto=no", "--inclusive=no", out],
            capture_output=True, text=True, check=True).stdout
    return parse_annotation(annotated)


def parse_annotation(text: str) -> dict:
    """Self instructions by shortened function name, from callgrind_annotate's function table."""
    counts: dict = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*)", line)
        if m is None or ":" not in m.group(2) or "PROGRAM TOTALS" in line or "=>" in line:
            continue
        name = shorten(m.group(2))
        counts[name] = counts.get(name, 0) + int(m.group(1).replace(",", ""))
    return counts


def per_call(exe: str, mode: str, calls: int) -> dict:
    once = self_counts(exe, mode, calls)
    twice = self_counts(exe, mode, 2 * calls)
    return {k: (twice.get(k, 0) - once.get(k, 0)) / calls for k in set(once) | set(twice)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default="build/release")
    parser.add_argument("--calls", type=int, default=0,
                        help="N (default: 20000 for async_* and pair_* modes, else 100000)")
    parser.add_argument("mode")
    parser.add_argument("control", nargs="?")
    args = parser.parse_args()
    exe = os.path.join(args.build_dir, "kevlar_count_instructions")
    if not os.access(exe, os.X_OK):
        sys.exit(f"instructions-by-function: no {exe}: build kevlar_count_instructions first")
    calls = args.calls or (20000 if args.mode.startswith(("async_", "pair_")) else 100000)
    mode = per_call(exe, args.mode, calls)
    control = per_call(exe, args.control, calls) if args.control else {}
    rows = []
    for name in set(mode) | set(control):
        a, b = mode.get(name, 0.0), control.get(name, 0.0)
        if abs(a) >= 0.5 or abs(b) >= 0.5:
            rows.append((a - b, a, b, name))
    rows.sort(key=lambda r: (-r[0], r[3]))
    if args.control:
        print(f"{args.mode:>10.10} {args.control:>10.10} {'diff':>8}  function (instructions per call)")
        for diff, a, b, name in rows:
            print(f"{a:10.1f} {b:10.1f} {diff:8.1f}  {name[:150]}")
        print(f"{sum(r[1] for r in rows):10.1f} {sum(r[2] for r in rows):10.1f} "
              f"{sum(r[0] for r in rows):8.1f}  total")
    else:
        print(f"{args.mode:>10.10}  function (instructions per call)")
        for _, a, _, name in rows:
            print(f"{a:10.1f}  {name[:150]}")
        print(f"{sum(r[1] for r in rows):10.1f}  total")


if __name__ == "__main__":
    main()
