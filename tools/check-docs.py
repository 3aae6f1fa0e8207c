#!/usr/bin/env python3
"""tools/check-docs.py — checks that the documentation says what the code has.

Run from anywhere: `tools/check-docs.py [repository root]`. CTest runs it (docs.consistency).
Fails, naming every finding, when
  * a strategy's options struct has a member that its page under docs/ never names;
  * a member of an options struct that is a hook (a std::function or a kevlar::Hook) is missing
    from the numbered steps of its page's "## Semantics" section, for the strategies whose
    semantics are such a list of steps (retry);
  * a `///` doc comment in a source or header is followed by nothing it could document (a closing
    brace or the end of the file, after any blank lines);
  * the vcpkg manifests' descriptions leave out a strategy that strategies/ holds.
"""
import json
import pathlib
import re
import sys

# Strategy folder -> (options structs, documentation page).
PAGES = {
    "retry": (["RetryOptions"], "docs/strategies/retry.md"),
    "timeout": (["TimeoutOptions"], "docs/strategies/timeout.md"),
    "circuit_breaker": (["CircuitBreakerOptions"], "docs/strategies/circuit-breaker.md"),
    "concurrency_limit": (["ConcurrencyLimitOptions"], "docs/strategies/concurrency-limit.md"),
    "rate_limit": (["RateLimitOptions"], "docs/strategies/rate-limit.md"),
    "hedging": (["HedgeOptions"], "docs/strategies/hedging.md"),
    "fallback": (["FallbackOptions"], "docs/strategies/fallback.md"),
    "chaos": (["ChaosOptions", "ChaosLatencyOptions", "ChaosFaultOptions"], "docs/chaos.md"),
    "adaptive_concurrency": (["AdaptiveLimitOptions", "AimdOptions", "VegasOptions",
                              "GradientOptions", "AdaptiveLimitSettings"],
                             "docs/strategies/adaptive-concurrency.md"),
    "adaptive_throttle": (["AdaptiveThrottleOptions"], "docs/strategies/adaptive-throttle.md"),
}
# Strategies whose page lists the steps of one decision, every hook among them.
STEP_LISTS = {"retry"}

DECLARATION = re.compile(r"^(?!using\b|static\b|friend\b|template\b|struct\b|enum\b|class\b)"
                         r"(.+?)\s+([a-z_][a-z0-9_]*)\s*(?:=.*)?$")


def struct_members(text, name):
    """The data members (name, type) of `struct name { ... };` (the first definition)."""
    m = re.search(r"\bstruct\s+" + name + r"\s*\{", text)
    if not m:
        return None
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    body = re.sub(r"//[^\n]*", "", text[m.end():i - 1])
    # Only the struct's own level: nested braces' contents (member function bodies, nested
    # types, braced initialisers) are dropped.
    flat, depth = [], 0
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth == 0:
            flat.append(ch)
    members = []
    keywords = {"const", "noexcept", "override", "final", "default", "delete"}
    for statement in "".join(flat).split(";"):
        statement = " ".join(statement.split())
        statement = re.sub(r"^(public|private|protected):\s*", "", statement)
        d = DECLARATION.match(statement)
        # A data member: its name is last (before any initialiser); a member function's name is
        # followed by its parameters, so the part before the last word ends with ")" there.
        if d and not d.group(1).endswith(")") and d.group(2) not in keywords:
            members.append((d.group(2), d.group(1)))
    return members


def section(text, heading):
    m = re.search(r"^## " + re.escape(heading) + r"\s*$", text, re.M)
    if not m:
        return ""
    rest = text[m.end():]
    n = re.search(r"^## ", rest, re.M)
    return rest[: n.start()] if n else rest


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    findings = []

    for folder, (structs, page) in PAGES.items():
        headers = list((root / "strategies" / folder / "include").rglob("*.hpp"))
        text = "\n".join(h.read_text() for h in headers)
        doc_path = root / page
        if not doc_path.exists():
            findings.append(f"{page}: missing (the page of strategies/{folder})")
            continue
        doc = doc_path.read_text()
        for struct in structs:
            members = struct_members(text, struct)
            if members is None:
                findings.append(f"strategies/{folder}: no struct {struct}")
                continue
            for name, type_ in members:
                if not re.search(r"\b" + re.escape(name) + r"\b", doc):
                    findings.append(f"{page}: never names {struct}::{name}")
                if folder in STEP_LISTS and ("std::function" in type_ or type_.startswith("Hook<")):
                    steps = "\n".join(l for l in section(doc, "Semantics").splitlines()
                                      if re.match(r"^\s*\d+\.\s|^\s{3,}\S", l))
                    if not re.search(r"\b" + re.escape(name) + r"\b", steps):
                        findings.append(f"{page}: the numbered steps of '## Semantics' leave out "
                                        f"{struct}::{name}")

    for path in sorted(list(root.glob("include/**/*.hpp")) + list(root.glob("src/**/*.[hc]pp")) +
                       list(root.glob("aggregate/**/*.hpp")) + list(root.glob("testing/**/*.[hc]pp")) +
                       list(root.glob("strategies/**/*.[hc]pp")) +
                       list(root.glob("integrations/**/*.[hc]pp"))):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            text = line.strip()
            # `///<` documents the member before it, on its line or the lines it continues.
            if not text.startswith("///") or text.startswith("///<"):
                continue
            if i + 1 < len(lines) and lines[i + 1].strip().startswith("///"):
                continue  # the comment goes on
            # What the comment stands before, blank lines skipped (a file's introduction may be
            # followed by a blank line and the declarations it introduces).
            j = i + 1
            while j < len(lines) and lines[j].strip() == "":
                j += 1
            nxt = lines[j].strip() if j < len(lines) else ""
            if nxt == "" or nxt.startswith("}"):
                findings.append(f"{path.relative_to(root)}:{i + 1}: a doc comment documents "
                                f"nothing (followed by {repr(nxt) if nxt else 'the end of the file'})")

    strategies = sorted(p.name for p in (root / "strategies").iterdir() if p.is_dir())
    words = {"circuit_breaker": "circuit breaker", "concurrency_limit": "concurrency limit",
             "rate_limit": "rate", "hedging": "hedging", "fallback": "fallback",
             "chaos": "chaos", "retry": "retry", "timeout": "timeout"}
    for manifest in [root / "vcpkg.json"] + sorted(root.glob("ports/*/vcpkg.json")):
        description = json.loads(manifest.read_text()).get("description", "").lower()
        for s in strategies:
            word = words.get(s, s.replace("_", " "))
            if word not in description:
                findings.append(f"{manifest.relative_to(root)}: the description leaves out {s}")

    for f in findings:
        print("check-docs:", f)
    if findings:
        print(f"check-docs: {len(findings)} finding(s)")
        return 1
    print("check-docs: the docs name every option and strategy; no dangling doc comment")
    return 0


if __name__ == "__main__":
    sys.exit(main())
