#!/usr/bin/env python3
"""gcov, with only decisions left as branches: the gcov that tools/coverage.sh hands to gcovr.

GCC ends a basic block at every call that may throw and gives it two out-edges: the normal return
(gcov: "fallthrough") and the exception edge ("throw"). gcov prints both as branches. Neither is a
decision of the source: the exception edge is the compiler's unwinding, and once it is left out the
normal return is the only way on, taken exactly when the line runs. gcovr 5.2 keeps that lone edge
in its branch count (--exclude-throw-branches removes only the exception edge), so every call that
may throw counted as one more branch, covered whenever its line was: the figure measured calls as
much as conditions. gcov 12 also marks an exception edge "(throw)" in its text output only when
its block ran, so gcovr could not even leave out the exception edges of code no test reached.
gcov's JSON output flags every edge.

This wrapper runs gcov with gcovr's arguments, then runs it again for the JSON of the same data
file. In each .gcov file the first run wrote, it removes both branch lines of every call edge pair
(in the JSON, a non-exception fallthrough edge directly followed by an exception edge: the order in
which gcov lists a call block's arcs), and rewrites any other exception edge that never ran
to "branch N taken 0 (throw)", which gcovr reads as an exception edge never taken. What is left are
the edges of conditions (if, switch, loops, ?:, && and ||) and, in a build with UBSan, of its
checks. The two outputs are matched source line by source line: the text lists a line once, with
the edges of every template instantiation under it, and the JSON lists a template's lines once per
instantiation; both walk a line's edges in the same order. A line whose edges differ in number or
in any count between the two is left as gcov wrote it and named on stderr. (Matching the k-th edge
of the whole file instead, as an earlier version did, paired unrelated edges wherever the JSON's
function order is not the text's line order.) Nothing else in the output changes.

Usage (through gcovr): gcovr --gcov-executable "python3 tools/gcov-branches.py" \
  --exclude-throw-branches ...
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
SOURCE_LINE = re.compile(r"^\s*[^:]+:\s*(\d+):")
TAKEN = re.compile(r"^branch\s+\d+\s+taken\s+(\d+)")


def edge_kinds(branches):
    """Per edge of one source line: "call" for both edges of a call that may throw, "throw" for
    any other exception edge, "" for the edges of a condition."""
    kinds = ["throw" if b["throw"] else "" for b in branches]
    for k in range(1, len(branches)):
        before = branches[k - 1]
        if branches[k]["throw"] and before["fallthrough"] and not before["throw"]:
            kinds[k - 1] = kinds[k] = "call"
    return kinds


def json_edges(args, cwd):
    """The kind of every branch edge (edge_kinds), per source file, in gcov's order."""
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
    edges = {}
    for doc in run.stdout.splitlines():
        if not doc.strip():
            continue
        data = json.loads(doc)
        for f in data["files"]:
            # The JSON lists a template's lines once per instantiation, function by function; the
            # text lists each source line once with the edges of every instantiation under it.
            per_line = edges.setdefault(f["file"], {})
            for line in f["lines"]:
                per_line.setdefault(line["line_number"], []).extend(
                    (kind, b["count"]) for kind, b in zip(edge_kinds(line["branches"]),
                                                          line["branches"]))
    return edges


def annotate(path, flags):
    """Rewrites the .gcov file at `path` with the edge kinds json_edges found for its source."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        lines = f.read().split("\n")
    source = None
    for line in lines[:8]:
        m = SOURCE.match(line)
        if m:
            source = m.group(1)
            break
    per_line = flags.get(source)
    if per_line is None:
        return
    rewritten, unmatched = rewrite(lines, per_line)
    if unmatched:
        print(f"gcov-branches: {path}: lines {unmatched[:10]} differ between gcov's text and JSON "
              "outputs: left unchanged", file=sys.stderr)
    if rewritten != lines:
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n".join(rewritten))


def rewrite(lines, per_line):
    """The lines of a .gcov text without the branch lines of calls and with every exception edge
    that never ran marked "(throw)", given each source line's (kind, count) edges from the JSON;
    and the source lines whose edges differ between the two (left as they are)."""
    text = {}  # the text's branch lines, by the source line they follow
    number = None
    for i, line in enumerate(lines):
        m = SOURCE_LINE.match(line)
        if m:
            number = int(m.group(1))
        elif line.startswith("branch ") and number is not None:
            text.setdefault(number, []).append(i)
    drop, throws, unmatched = set(), set(), []
    for number, positions in text.items():
        json_line = per_line.get(number, [])
        if len(json_line) != len(positions) or any(
                text_count(lines[i]) != count for i, (_, count) in zip(positions, json_line)):
            unmatched.append(number)
            continue
        for i, (kind, _) in zip(positions, json_line):
            if kind == "call":
                drop.add(i)
            elif kind == "throw" and BRANCH.match(lines[i]):
                throws.add(i)
    rewritten = [f"{BRANCH.match(line).group(1)} taken 0 (throw)" if i in throws else line
                 for i, line in enumerate(lines) if i not in drop]
    return rewritten, unmatched


def text_count(line):
    """The count of a .gcov branch line ("never executed" counts 0)."""
    m = TAKEN.match(line)
    return int(m.group(1)) if m else 0


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
