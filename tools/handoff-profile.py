#!/usr/bin/env python3
"""Per-phase instruction profile of the queued-handoff pair (see tools/handoff-profile.sh).

For each pair cell of the kevlar_count_instructions driver (`pair_<semaphore>_<caller>`), runs the
driver under callgrind with N and 2N pairs (--dump-instr=yes), takes the difference divided by N
for every executed instruction and every call arc (which cancels start-up and set-up), and
attributes each instruction, and each locked instruction, to one phase of the handoff:

  publication  queue publication: parking B (the semaphore's wait path: the ledger or counter
               update that registers B, the lock, the link, the waiter's allocation, slot and
               outstanding-work count)
  completion   waiter completion: the grant (the release path: the ledger, the unlink, handing B
               over to the completion that will deliver it)
  scheduling   continuation scheduling: delivering B's completion to its executor (the post or
               the engine's trampoline), the scheduler's queue (its run loop's share per
               dispatched delivery) and B's resumption, up to kevlar's engine taking over
  limiter      the rest of the limiter's strategy callbacks: A's ready take, B's failed take,
               the capacity check, the strategy's own bookkeeping
  engine       kevlar's execution engine for both executions (shield entry, steps, outcome,
               context, the engine's block cache and trampoline levels)
  floor        Asio's floor: everything else (the pair harness, the promise, the operations'
               own completion hops, the scheduler's share for those, coroutine machinery)

The mapping is the RULES list below: an instruction belongs to the first rule that names any
function on its inline chain (DWARF inline information, read with addr2line, so code inlined
into another function keeps its own name). An instruction no rule names (allocators, Asio's
executor and post internals, libc's mutex, shared_ptr counts) takes the phase of its caller,
through the call arcs callgrind records, weighted by the arcs' inclusive counts; a dispatcher's
own cost (the scheduler's run loop) is split over the handlers it runs, by call count.

Locked instructions: the addresses of lock-prefixed instructions and of xchg with a memory
operand (implicitly locked), from objdump -d of each object, counted by their execution counts.

Python 3 standard library only. Needs valgrind, objdump and addr2line (binutils).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

PHASES = ["publication", "completion", "scheduling", "limiter", "engine", "floor"]
TITLES = {
    "publication": "queue publication (park B: ledger, lock, link, work count)",
    "completion": "waiter completion (grant: ledger, unlink, hand-over)",
    "scheduling": "continuation scheduling (delivery, scheduler queue, B resumes)",
    "limiter": "limiter callbacks (A's ready take, B's failed take, bookkeeping)",
    "engine": "kevlar engine (both executions)",
    "floor": "Asio floor (harness, promise, operation hops, coroutines)",
}
DISPATCH = "dispatch"

# (phase, regex on the normalised function name, regex on the full name or None, line range or
# None). A line range (file, function marker, first-line marker, last-line marker) restricts the
# rule to the lines of that file from the first line containing `first` to the first following
# line containing `last`, searched from the line containing `function`. First match wins.
RULES = [
    # The two-object control limiters keep B's registration and the grant decision in their
    # strategy callbacks: those lines are the controls' ledger work in publication / completion.
    ("publication", r"TwoObjectLimiter::on_start$", None,
     ("two_object_limiter.hpp", "on_start(", "waiters_.fetch_add", "StepAccess::point_at")),
    ("completion", r"TwoObjectLimiter::on_inner_complete$", None,
     ("two_object_limiter.hpp", "on_inner_complete(", "available_.fetch_add", "sem_.release()")),
    ("completion", r"TwoObjectLimiter::on_wait_complete$", None,
     ("two_object_limiter.hpp", "on_wait_complete(", "waiters_.fetch_sub", "waiters_.fetch_sub")),
    # B's delivery: the executor operation or function carrying the semaphore's delivery or the
    # execution's wait handler, the semaphore's own delivery code, the handler's invocation.
    ("scheduling", r"(executor_op|executor_function|executor_function::impl|work_dispatcher)::",
     r"(::WaiterDelivery<.*|kevlar::bench::ControlWaitHandler|kevlar::detail::QueueWaitHandler)"
     r"[,>]", None),
    ("scheduling", r"BasicUnpairedSemaphore::AcquireOp::(schedule|deliver|run_inline|"
     r"still_running_here|reschedule_job)", None, None),
    # The limiter's embedded queue wait: its completion is the hand-over decision (schedule's).
    ("scheduling", r"EmbeddedQueueWait::(on_complete|post|deliver|run_inline|"
     r"still_running_here|reschedule_job)", None, None),
    ("scheduling", r"^kevlar::detail::WaiterDelivery::", None, None),
    ("scheduling", r"MutexDequeSemaphore::Node::complete$", None, None),
    ("scheduling", r"^boost::asio::experimental::detail::channel_send_op::do_action$", None, None),
    ("scheduling", r"^kevlar::(detail::QueueWaitHandler|bench::ControlWaitHandler)::operator\(\)",
     None, None),
    # Asio's own completion hops of the operations A and B run (the promise, the answer) and
    # the coroutine machinery: the floor, also in no_limiter_control.
    ("floor", r"(executor_op|executor_function|executor_function::impl)::",
     r"(ExecutorAttemptHandler|PairDriver|awaitable|co_spawn|ParkedOp|OneShot)", None),
    ("floor", r"^boost::asio::detail::(awaitable_|co_spawn|coro_)", None, None),
    ("floor", r"^boost::asio::(awaitable|detail::awaitable)", None, None),
    # The semaphores' wait paths.
    ("publication", r"BasicUnpairedSemaphore::(start_acquire|park$|Initiation::|async_acquire$|"
     r"AcquireOp::(create|install|track_work|AcquireOp$|CancelHandler))", None, None),
    # The step's operation that chooses the embedded wait or the general one, and the embedded
    # wait's start (built in the execution and parked).
    ("publication", r"(EmbeddedQueueWait::(start$|EmbeddedQueueWait$|CancelHandler)|"
     r"QueueSemaphore::start$|ControlQueue::start$|SemaphoreAccess::park$|"
     r"^kevlar::detail::plain_io_context$)",
     None, None),
    ("publication", r"MutexDequeSemaphore::(start$|async_acquire$|Node::Node$|Cancel::Cancel$)",
     None, None),
    ("publication", r"ChannelSemaphore::async_acquire$", None, None),
    # The semaphores' release paths (the grant).
    ("completion", r"BasicUnpairedSemaphore::(release$|AcquireOp::on_complete$)", None, None),
    ("completion", r"^kevlar::detail::complete_all$", None, None),
    ("completion", r"MutexDequeSemaphore::release$", None, None),
    ("completion", r"ChannelSemaphore::release$", None, None),
    # The limiter strategies' callbacks and ledgers outside the semaphore's slow paths.
    ("limiter", r"(ConcurrencyLimitStrategy::|BasicStrategy::on_|LimiterLedger::|"
     r"TwoObjectLimiter::|BasicUnpairedSemaphore::(try_acquire|snapshot|ledger)$)", None, None),
    # The scheduler's run loop hands its own cost to the handlers it runs.
    (DISPATCH, r"^boost::asio::detail::scheduler::(run|do_run_one|run_one|poll|poll_one)$",
     None, None),
    # Everything else of kevlar is the execution engine (also where the harness inlines it). The
    # intrusive list serves the semaphore's queue and the engine's alike: it takes its callers'
    # phases (it is unnamed).
    ("engine", r"^kevlar::(?!bench::|testing::|detail::IntrusiveList::)", None, None),
    # shield_control's one layer: the callbacks of its strategy, where the other cells have their
    # limiter's.
    ("limiter", r"^kevlar::bench::PassThrough::", None, None),
    # The harness and the pair's operations.
    ("floor", r"^kevlar::(bench|testing)::", None, None),
    ("floor", r"^(main|\(anonymous namespace\)::)", None, None),
]


def strip_balanced(s: str, open_c: str, close_c: str, keep: str = "") -> str:
    out, depth = [], 0
    for ch in s:
        if ch == open_c:
            if depth == 0 and keep:
                out.append(keep)
            depth += 1
        elif ch == close_c and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


_norm_cache: dict[str, str] = {}


def normalise(full: str) -> str:
    """`void ns::Class<T>::fn<U>(args) const [clone .isra.0]'2` -> `ns::Class::fn`."""
    if full in _norm_cache:
        return _norm_cache[full]
    s = re.sub(r"'\d+$", "", full)
    s = re.sub(r" \[clone [^\]]*\]", "", s)
    s = s.replace("operator()", "operator\x01").replace("operator<<", "operator\x02")
    s = s.replace("operator<", "operator\x03").replace("operator>", "operator\x04")
    s = s.replace("->", "\x05")
    s = strip_balanced(s, "<", ">")
    s = re.sub(r"\{lambda\(", "{lambda\x06(", s)
    s = s.strip()
    s = re.sub(r"\s+const$", "", s)
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            if s[i] == ")":
                depth += 1
            elif s[i] == "(":
                depth -= 1
                if depth == 0:
                    s = s[:i]
                    break
    s = strip_balanced(s, "(", ")", keep="()")
    s = s.split(" ")[-1] if " " in s else s
    s = s.replace("\x01", "()").replace("\x02", "<<").replace("\x03", "<").replace("\x04", ">")
    s = s.replace("\x05", "->").replace("\x06", "")
    _norm_cache[full] = s
    return s


class Mapping:
    def __init__(self, source_root: str):
        self.rules = []
        for phase, name_re, full_re, lines in RULES:
            rng = None
            if lines is not None:
                rng = (lines[0], *self._line_range(source_root, *lines))
            self.rules.append((phase, re.compile(name_re),
                               re.compile(full_re) if full_re else None, rng))

    @staticmethod
    def _line_range(root: str, fname: str, func: str, first: str, last: str) -> tuple[int, int]:
        path = None
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            if fname in files:
                path = os.path.join(d, fname)
                break
        if path is None:
            raise SystemExit(f"handoff-profile: {fname} not found under {root}")
        text = open(path, encoding="utf-8").read().splitlines()
        start = next(i for i, t in enumerate(text) if func in t)
        a = next(i for i in range(start, len(text)) if first in text[i])
        b = next(i for i in range(a, len(text)) if last in text[i])
        return a + 1, b + 1

    def classify(self, frames) -> str | None:
        """frames: [(full name, file, line)], innermost first. A phase, DISPATCH or None."""
        for phase, name_re, full_re, rng in self.rules:
            for full, path, line in frames:
                if not name_re.search(normalise(full)):
                    continue
                if full_re is not None and not full_re.search(full):
                    continue
                if rng is not None:
                    if not path.endswith("/" + rng[0]) or not rng[1] <= line <= rng[2]:
                        continue
                return phase
        return None


# ---- callgrind output ------------------------------------------------------------------------

def parse_callgrind(path: str):
    """Self Ir per (object, function, address) and call arcs per (object, function, call site
    address, callee object, callee function): [calls, inclusive Ir]."""
    self_ir: dict = collections.Counter()
    arcs: dict = collections.defaultdict(lambda: [0, 0])
    names: dict = {}

    def name(kind, v):
        m = re.match(r"\((\d+)\)(?: (.*))?$", v)
        if not m:
            return v
        key = (kind, m.group(1))
        if m.group(2) is not None:
            names[key] = m.group(2)
        return names[key]

    ob = fn = cob = cfn = None
    call = None
    total = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            c = line[0]
            if c == "0" or c.isdigit() or c in "+-*":
                parts = line.split()
                if len(parts) < 3:
                    continue
                addr = int(parts[0], 16)
                if call is not None:
                    a = arcs[(ob, fn, addr, call[0], call[1])]
                    a[0] += call[2]
                    a[1] += int(parts[2])
                    call = None
                else:
                    self_ir[(ob, fn, addr)] += int(parts[2])
                continue
            if line.startswith(("summary:", "totals:")):
                total = int(line.split(":", 1)[1].split()[0])
                continue
            key, _, v = line.rstrip("\n").partition("=")
            if key == "ob":
                ob = name("ob", v)
            elif key == "fn":
                fn = name("fn", v)
            elif key == "cob":
                cob = name("ob", v)
            elif key == "cfn":
                cfn = name("fn", v)
                if cob is None:
                    cob = ob
            elif key == "calls":
                call = (cob if cob is not None else ob, cfn, int(v.split()[0]))
                cob = None
    return self_ir, arcs, total


def run_callgrind(exe: str, mode: str, n: int, out: str, instr: bool = True) -> int:
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    if instr:
        cmd += ["--dump-instr=yes", "--compress-strings=no", "--compress-pos=no"]
    cmd += [os.path.realpath(exe), mode, str(n)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"handoff-profile: {' '.join(cmd)} failed")
    m = re.search(r"Collected : (\d+)", p.stderr)
    return int(m.group(1)) if m else 0


# ---- objects: locked instructions and inline chains --------------------------------------------

_locked_cache: dict[str, dict] = {}


def locked_addresses(obj: str) -> dict:
    """Addresses of lock-prefixed instructions and of xchg with a memory operand, with their
    text."""
    if obj in _locked_cache:
        return _locked_cache[obj]
    found = {}
    if os.path.isfile(obj):
        p = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True,
                           text=True)
        for line in p.stdout.splitlines():
            m = re.match(r"\s*([0-9a-f]+):\s+(.*)$", line)
            if not m:
                continue
            ins = m.group(2).strip()
            if ins.startswith("lock ") or (ins.startswith("xchg") and "(" in ins):
                found[int(m.group(1), 16)] = re.sub(r"\s+", " ", ins.split("#")[0]).strip()
    _locked_cache[obj] = found
    return found


_chain_cache: dict[tuple, list] = {}


def inline_chains(obj: str, addrs) -> None:
    """Fills _chain_cache[(obj, addr)] with [(function, file, line)], innermost first."""
    todo = sorted(a for a in set(addrs) if (obj, a) not in _chain_cache)
    if not todo or not os.path.isfile(obj):
        return
    p = subprocess.run(["addr2line", "-e", obj, "-a", "-f", "-i", "-C"],
                       input="".join(f"{a:#x}\n" for a in todo), capture_output=True, text=True)
    cur = None
    lines = p.stdout.splitlines()
    i = 0
    while i < len(lines):
        t = lines[i]
        if re.match(r"^0x[0-9a-f]+$", t):
            cur = int(t, 16)
            _chain_cache[(obj, cur)] = []
            i += 1
            continue
        fn = t
        loc = lines[i + 1] if i + 1 < len(lines) else "??:0"
        i += 2
        path, _, ln = loc.partition(":")
        m = re.match(r"(\d+)", ln)
        if fn != "??" and cur is not None:
            _chain_cache[(obj, cur)].append((fn, path, int(m.group(1)) if m else 0))


# ---- attribution -------------------------------------------------------------------------------

def onehot(phase: str) -> dict:
    return {phase: 1.0}


def mix(parts) -> dict | None:
    """Weighted sum of distributions [(weight, dist)], normalised; None if nothing."""
    acc: dict = collections.Counter()
    w_total = 0.0
    for w, d in parts:
        if d is None or w <= 0:
            continue
        for k, v in d.items():
            acc[k] += w * v
        w_total += w
    if w_total <= 0:
        return None
    return {k: v / w_total for k, v in acc.items()}


def attribute(mapping: Mapping, self_pp: dict, arcs_pp: dict, exe: str):
    """Per-phase instructions and locked instructions per pair."""
    # Inline chains for every executed address and call site of the driver.
    inline_chains(exe, [a for (ob, _, a) in self_pp if ob == exe] +
                  [a for (ob, _, a, _, _) in arcs_pp if ob == exe])

    def frames(ob, fn, addr):
        chain = list(_chain_cache.get((ob, addr), [])) if ob == exe else []
        # callgrind's function is the outermost frame (the chain may lack it).
        if not chain or normalise(chain[-1][0]) != normalise(fn):
            chain.append((fn, "", 0))
        return chain

    fn_class: dict = {}

    def function_class(ob, fn):  # the function's own (outermost) name
        if (ob, fn) not in fn_class:
            fn_class[(ob, fn)] = mapping.classify([(fn, "", 0)])
        return fn_class[(ob, fn)]

    # Self costs: a phase, or pooled per function for its callers (None) or its callees.
    direct = collections.Counter()
    direct_locked = collections.Counter()
    detail = collections.defaultdict(lambda: [0.0, 0.0])  # (phase, function) -> [Ir, locked]
    lock_sites = []  # (class, executions per pair, function, instruction, frames)
    pooled = collections.defaultdict(lambda: [0.0, 0.0])  # (ob, fn, kind) -> [Ir, locked]
    for (ob, fn, addr), ir in self_pp.items():
        if ir == 0:
            continue
        lock_text = locked_addresses(ob).get(addr)
        locked = ir if lock_text is not None else 0.0
        c = mapping.classify(frames(ob, fn, addr))
        if lock_text is not None:
            lock_sites.append((c, ir, normalise(fn), lock_text, frames(ob, fn, addr)))
        if c is None or c == DISPATCH:
            p = pooled[(ob, fn, c)]
            p[0] += ir
            p[1] += locked
        else:
            direct[c] += ir
            direct_locked[c] += locked
            d = detail[(c, normalise(fn))]
            d[0] += ir
            d[1] += locked

    # Call arcs, classified by their call site.
    into = collections.defaultdict(list)   # callee -> [(weight, caller, site class)]
    out_of = collections.defaultdict(list)  # caller -> [(calls, callee)]
    for (ob, fn, addr, cob, cfn), (calls, incl) in arcs_pp.items():
        if calls <= 0 and incl <= 0:
            continue
        site = mapping.classify(frames(ob, fn, addr))
        into[(cob, cfn)].append((incl if incl > 0 else calls, (ob, fn), site))
        out_of[(ob, fn)].append((calls, (cob, cfn)))

    # Downwards: what a function dispatched by the scheduler stands for (its own class, or the
    # classes of what it calls, by call count).
    down_cache: dict = {}

    def down(key, depth=0):
        if key in down_cache:
            return down_cache[key]
        c = function_class(*key)
        if c is not None and c != DISPATCH:
            r = onehot(c)
        elif c == DISPATCH or depth > 6:
            r = None
        else:
            down_cache[key] = None  # cycle guard
            r = mix((calls, down(callee, depth + 1)) for calls, callee in out_of.get(key, []))
        down_cache[key] = r
        return r

    # Upwards: the context a function's unnamed code runs in, from its call arcs (fixed point).
    ctx: dict = {}
    dispatch_mix: dict = {}
    keys = set(into) | {(ob, fn) for (ob, fn, _) in pooled}
    for key in keys:
        if function_class(*key) == DISPATCH or any(k[:2] == key and k[2] == DISPATCH
                                                   for k in pooled):
            dispatch_mix[key] = mix((calls, down(callee)) for calls, callee in out_of.get(key, []))
    for _ in range(60):
        changed = False
        for key in keys:
            parts = []
            for w, caller, site in into.get(key, []):
                if site is not None and site != DISPATCH:
                    parts.append((w, onehot(site)))
                elif site == DISPATCH or function_class(*caller) == DISPATCH:
                    parts.append((w, down(key) or dispatch_mix.get(caller) or ctx.get(caller)))
                else:
                    parts.append((w, ctx.get(caller)))
            new = mix(parts)
            if new != ctx.get(key):
                if new is None or key not in ctx or any(
                        abs(new.get(k, 0) - ctx[key].get(k, 0)) > 1e-12 for k in PHASES):
                    changed = True
                ctx[key] = new
        if not changed:
            break

    totals = collections.Counter(direct)
    locked = collections.Counter(direct_locked)
    for (ob, fn, kind), (ir, lk) in pooled.items():
        key = (ob, fn)
        if kind == DISPATCH:
            d = dispatch_mix.get(key) or ctx.get(key) or onehot("floor")
        else:
            d = ctx.get(key) or onehot("floor")
        for k, v in d.items():
            totals[k] += ir * v
            locked[k] += lk * v
            e = detail[(k, normalise(fn) + (" [run loop]" if kind == DISPATCH else " [caller's]"))]
            e[0] += ir * v
            e[1] += lk * v
    # The locked instructions, each with the phase (or phases) it went to.
    sites = []
    for c, n, name, text, fr in lock_sites:
        if c is None or c == DISPATCH:
            key = next(k for k in pooled if normalise(k[1]) == name and k[2] == c)
            d = (dispatch_mix.get(key[:2]) if c == DISPATCH else None) or ctx.get(key[:2]) \
                or onehot("floor")
        else:
            d = onehot(c)
        inner = next((normalise(f[0]) for f in fr if not normalise(f[0]).startswith("std::")),
                     name)
        sites.append((d, n, name, inner, text))
    return totals, locked, detail, sites


def per_pair(a: dict, b: dict, n: int) -> dict:
    out = {}
    for k in set(a) | set(b):
        v = b.get(k, 0) - a.get(k, 0)
        if v:
            out[k] = v / n
    return out


def arcs_per_pair(a: dict, b: dict, n: int) -> dict:
    out = {}
    for k in set(a) | set(b):
        ca, ia = a.get(k, (0, 0))
        cb, ib = b.get(k, (0, 0))
        if cb - ca or ib - ia:
            out[k] = ((cb - ca) / n, (ib - ia) / n)
    return out


def round_to_total(values: dict, total: int) -> dict:
    """Largest-remainder rounding: whole numbers that add up to `total`."""
    floors = {k: int(v // 1) for k, v in values.items()}
    left = total - sum(floors.values())
    order = sorted(values, key=lambda k: values[k] - floors[k], reverse=True)
    for k in order[:max(0, left)]:
        floors[k] += 1
    return floors


def profile_cell(exe: str, cell: str, n: int, mapping: Mapping, tmp: str, compare: str | None):
    mode = "pair_" + cell
    runs = []
    for k in (1, 2):
        out = os.path.join(tmp, f"{cell}.{k}.out")
        run_callgrind(exe, mode, k * n, out)
        runs.append(parse_callgrind(out))
    (s1, a1, t1), (s2, a2, t2) = runs
    self_pp = per_pair(s1, s2, n)
    arcs_pp = arcs_per_pair(a1, a2, n)
    ir, lk, detail, sites = attribute(mapping, self_pp, arcs_pp, os.path.realpath(exe))
    total = (t2 - t1) / n
    gate = None
    if compare:
        c1 = run_callgrind(compare, mode, n, os.devnull, instr=False)
        c2 = run_callgrind(compare, mode, 2 * n, os.devnull, instr=False)
        gate = (c2 - c1) // n
    return {"ir": ir, "locked": lk, "total": total, "gate": gate, "detail": detail, "sites": sites}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", required=True, help="kevlar_count_instructions (built with -g)")
    ap.add_argument("--pairs", type=int, default=2000, help="N (the runs use N and 2N pairs)")
    ap.add_argument("--cells", default="unpaired,mutex_control,channel_control,shield_control,"
                                        "no_limiter_control")
    ap.add_argument("--callers", default="callback,coroutine")
    ap.add_argument("--compare", help="another driver build whose per-pair total is reported "
                                      "beside (the gate's Release build)")
    ap.add_argument("--source-root", default=os.path.dirname(os.path.dirname(
        os.path.realpath(__file__))))
    ap.add_argument("--explain", action="store_true",
                    help="also list, per cell and phase, the functions it was made of")
    ap.add_argument("--check", action="store_true",
                    help="fail unless every phase row is printed and the phases add up to the "
                         "callgrind total of each cell")
    args = ap.parse_args()

    mapping = Mapping(args.source_root)
    cells = args.cells.split(",")
    status = 0
    with tempfile.TemporaryDirectory(prefix="handoff-profile.") as tmp:
        for caller in args.callers.split(","):
            results = {}
            for cell in cells:
                results[cell] = profile_cell(args.exe, f"{cell}_{caller}", args.pairs, mapping,
                                             tmp, args.compare)
            print(f"\n{caller} pairs: instructions per pair (locked instructions in brackets), "
                  f"N = {args.pairs} and {2 * args.pairs} pairs\n")
            print("| phase | " + " | ".join(cells) + " |")
            print("|---|" + "---:|" * len(cells))
            rounded = {}
            for cell in cells:
                r = results[cell]
                rounded[cell] = (round_to_total(r["ir"] | {p: r["ir"].get(p, 0.0) for p in PHASES},
                                                round(sum(r["ir"].values()))),
                                 round_to_total(r["locked"] | {p: r["locked"].get(p, 0.0)
                                                               for p in PHASES},
                                                round(sum(r["locked"].values()))))
            for p in PHASES:
                row = [f"{rounded[c][0][p]:,} ({rounded[c][1][p]})" for c in cells]
                print(f"| {TITLES[p]} | " + " | ".join(row) + " |")
            print("| **total** | " + " | ".join(
                f"**{sum(rounded[c][0].values()):,}** ({sum(rounded[c][1].values())})"
                for c in cells) + " |")
            print("| callgrind total per pair (residual) | " + " | ".join(
                f"{results[c]['total']:,.0f} "
                f"({round(results[c]['total'] - sum(results[c]['ir'].values())):+d})"
                for c in cells) + " |")
            if args.compare:
                print("| gate's Release driver per pair (difference) | " + " | ".join(
                    f"{results[c]['gate']:,} ({round(results[c]['gate'] - results[c]['total']):+d})"
                    for c in cells) + " |")
            if args.explain:
                for c in cells:
                    print(f"\n{c}_{caller}: functions per phase (instructions, locked) per pair")
                    det = results[c]["detail"]
                    for p in PHASES:
                        items = sorted(((v, k[1]) for k, v in det.items() if k[0] == p),
                                       key=lambda x: -x[0][0])
                        print(f"  {p}:")
                        for (v_ir, v_lk), name in items:
                            if v_ir >= 0.5:
                                print(f"    {v_ir:8.1f} {v_lk:5.1f}  {name}")
                    print("  locked instructions (executions per pair, phase shares):")
                    for d, n, name, inner, text in sorted(results[c]["sites"],
                                                          key=lambda x: -x[1]):
                        if n >= 0.05:
                            share = ", ".join(f"{k} {v:.2f}" for k, v in sorted(d.items()))
                            print(f"    {n:5.2f}  {text:32} {inner} (in {name}) -> {share}")
            if args.check:
                for c in cells:
                    r = results[c]
                    # The mapping still finds the handoff's code: a limiter cell has all three
                    # handoff phases, shield_control its two executions, its layer and the floor
                    # and no handoff, the floor cell none but the floor.
                    for p in PHASES:
                        has = r["ir"].get(p, 0.0) >= 1
                        if c == "no_limiter_control":
                            want = p == "floor"
                        elif c == "shield_control":
                            want = p in ("limiter", "engine", "floor")
                        else:
                            want = p in ("publication", "completion", "scheduling", "floor") or has
                        if has != want:
                            print(f"handoff-profile: {c}_{caller}: phase {p} "
                                  f"{'unexpectedly present' if has else 'missing'} "
                                  f"({r['ir'].get(p, 0.0):.1f} instructions)", file=sys.stderr)
                            status = 1
                    if abs(r["total"] - sum(r["ir"].values())) > 1 or r["total"] <= 0:
                        print(f"handoff-profile: {c}_{caller}: phases add up to "
                              f"{sum(r['ir'].values()):.1f}, callgrind counted {r['total']:.1f}",
                              file=sys.stderr)
                        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
