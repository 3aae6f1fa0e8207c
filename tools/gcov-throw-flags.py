#!/usr/bin/env python3
"""gcov, with every exception edge marked as such: the gcov that tools/coverage.sh hands to gcovr.

gcov (GCC 12) marks an exception edge "(throw)" in its text output only when the edge's block ran:
a branch of code no test reached prints as "branch N never executed", with no mark. gcovr reads
that text, so --exclude-throw-branches cannot leave out the exception edges of unexecuted code,
and every call that may throw in a function no test runs (each template instantiation counts on its
own) adds an uncovered "branch". gcov's JSON output carries the flag for every edge.

This wrapper runs gcov with gcovr's arguments, then runs it again for the JSON of the same data
file and, in each .gcov file the first run wrote, rewrites every unexecuted branch the JSON calls an
exception edge to "branch N taken 0 (throw)", which gcovr reads as an exception edge never taken.
Both outputs list a source line's branches in the same order (gcov walks the same arcs for both),
so the k-th branch line of the text is the k-th edge of the JSON; a file whose two lists differ in
length is left as gcov wrote it and named on stderr. Nothing else in the output changes.

Usage (through gcovr): gcovr --gcov-executable "python3 tools/gcov-throw-flags.py" ...
"""
import json
import os
import re
import subprocess
import sys

GCOV = os.environ.get("KEVLAR_GCOV", "gcov")
BRANCH = re.compile(r"^(branch\s+\d+) never executed$")
SOURCE = re.compile(r"^\s*-:\s*0:Source:(.*)$")
CREATING = re.compile(r"^Creating '(.*)'$")


def json_edges(args, cwd):
    """The exception flags of every branch edge, per source file, in gcov's order."""
    # The data files and the object directory, as gcovr passed them; --json-format writes one JSON
    # document per data file to stdout.
    keep, skip_next = [], False
    for i, a in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        if a in ("--object-directory", "-o"):
            keep += [a, args[i + 1]]
            skip_next = True
        elif not a.startswith("-"):
            keep.append(a)
    run = subprocess.run([GCOV, "--json-format", "--stdout", "--branch-probabilities", *keep],
                         cwd=cwd, capture_output=True, text=True, check=False)
    flags = {}
    for doc in run.stdout.splitlines():
        if not doc.strip():
            continue
        data = json.loads(doc)
        for f in data["files"]:
            edges = flags.setdefault(f["file"], [])
            for line in f["lines"]:
                edges.extend(b["throw"] for b in line["branches"])
    return flags


def annotate(path, flags):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        lines = f.read().split("\n")
    source = None
    for line in lines[:8]:
        m = SOURCE.match(line)
        if m:
            source = m.group(1)
            break
    edges = flags.get(source)
    if edges is None:
        return
    positions = [i for i, line in enumerate(lines) if line.startswith("branch ")]
    if len(positions) != len(edges):
        print(f"gcov-throw-flags: {path}: {len(positions)} branch lines, {len(edges)} edges in "
              "the JSON: left unchanged", file=sys.stderr)
        return
    changed = False
    for i, throw in zip(positions, edges):
        m = BRANCH.match(lines[i])
        if throw and m:
            lines[i] = f"{m.group(1)} taken 0 (throw)"
            changed = True
    if changed:
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n".join(lines))


def main():
    args = sys.argv[1:]
    run = subprocess.run([GCOV, *args], capture_output=True, text=True, check=False)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0 or not any(not a.startswith("-") for a in args) or "--help" in args:
        return run.returncode
    flags = json_edges(args, os.getcwd())
    for line in run.stdout.splitlines():
        m = CREATING.match(line)
        if m:
            annotate(os.path.join(os.getcwd(), m.group(1)), flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
