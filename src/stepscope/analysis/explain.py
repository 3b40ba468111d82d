"""Explain slow repeats: find them, diff their flame graphs against the fast ones, name the cause.

A *repeat* is one occurrence of the unit being compared: a denoising step (windows from the step
table) or one call of a span name. Each repeat has a time window on one thread; the samples of that
thread inside the window are its flame graph.

Slow repeats: the one rule of ``analysis.slow`` (median + 3 robust sigma and 1.2 x median; "too noisy
to call" when the fast repeats vary too much), the same rule the step table uses. Common shapes are recognised: the first repeat alone ("first"), every k-th repeat
("every k"), otherwise "irregular".

The cause: per function, the mean self time per repeat in the slow group minus the fast group. Sorted
by that difference, the fewest functions that cover ``COVER`` (80%) of the gap are named, with the share
of the gap each explains. The *entry* is the deepest function whose extra *total* time still covers
``COVER`` of the gap: where the extra time enters the call tree (a callback, a hook).

When the slow repeats hold too few samples (``MIN_SAMPLES`` per repeat on average), no cause is named:
the explanation says so and which sampling rate would do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..limits import HZ_MAX
from ..model import RunData, Span
from ..profiling.calltree import CallNode, ProfileIndex
from ..tracing.steps import STEP_ATTR
from .slow import MAD_K, MIN_RATIO, call_slow, shape_of  # noqa: F401  (re-exported: the rule's constants, shapes)
from .spans import span_stats, step_table
from .table import SpanTable, as_table

COVER = 0.8
MIN_SAMPLES = 8


class ExplainError(ValueError):
    """Nothing to explain (no such span name, fewer than 3 repeats...); the message says what.
    ``names``: for an unknown span name, the run's span names and their call counts, most calls first."""

    def __init__(self, message: str, names: list[tuple[str, int]] | None = None) -> None:
        super().__init__(message)
        self.names = names or []


@dataclass(slots=True)
class Repeat:
    """One repeat: its index in order, duration (ns), window and thread, samples inside, group ("slow",
    "fast", "warm-up": the first repeat set apart by the rule, or "other": left out by ``--fast``)."""

    index: int
    label: str
    duration_ns: int
    start_ns: int
    end_ns: int
    thread_id: int
    samples: int = 0
    group: str = "fast"  # "slow", "fast" or "other"


@dataclass(slots=True)
class Cause:
    """A function whose self time grew in the slow repeats. Times are ns per repeat (group means)."""

    function: str
    file: str
    line: int
    slow_ns: float
    fast_ns: float
    delta_ns: float
    share_of_gap: float


@dataclass(slots=True)
class DiffNode:
    """A node of the differential call tree: time per repeat in the slow and the fast group (ns)."""

    name: str
    slow_ns: float
    fast_ns: float
    children: list["DiffNode"] = field(default_factory=list)

    @property
    def delta_ns(self) -> float:
        return self.slow_ns - self.fast_ns


@dataclass(slots=True)
class Explanation:
    """The result of ``explain``. ``unit``: "diffusion.step" or the span name compared. ``gap_ns``: mean
    slow duration minus mean fast duration (per repeat). ``causes``: as described in the module doc;
    empty when ``enough_samples`` is False (then ``advice`` says what to do). ``path``: the call path
    the extra time takes (``extra_path``), from where it starts to where it is spent."""

    unit: str
    rule: str
    shape: str
    repeats: list[Repeat]
    median_ns: float
    slow_mean_ns: float
    fast_mean_ns: float
    gap_ns: float
    causes: list[Cause]
    covered: float
    entry: Cause | None
    enough_samples: bool
    samples_per_slow_repeat: float
    advice: str
    tree: DiffNode | None
    path: list[str] = field(default_factory=list)
    #: whether the slow repeats coincide with memory growth (``analysis.memory.repeats_note``), or None
    memory_note: str | None = None

    @property
    def slow(self) -> list[Repeat]:
        return [r for r in self.repeats if r.group == "slow"]


def _has_steps(spans) -> bool:
    """Whether any span carries ``diffusion.step`` (what makes ``step_table`` not None), without building it."""
    if isinstance(spans, SpanTable):
        return any(STEP_ATTR in a for a in spans.attrs.values())
    return any(STEP_ATTR in s.attrs for s in spans)


def _span_name(t: SpanTable, unit: str) -> str:
    """The name of the first span (in time) named ``unit`` or ending with it; ``unit`` when none is."""
    codes = [k for k, n in enumerate(t.names) if n == unit or n.endswith(unit)]
    if not codes:
        return unit
    rows = np.flatnonzero(np.isin(t.name, codes))
    return t.names[int(t.name[rows[0]])] if len(rows) else unit


def default_unit(data: RunData) -> str:
    """``"step"`` when spans carry ``diffusion.step``; else the span name with >= 3 calls and the most time
    (sync sites excluded)."""
    t = as_table(data.spans)
    if _has_steps(t):
        return "step"
    sync_names = {t.names[c] for c in np.unique(t.name[t.op_mask("sync")]).tolist()}
    stats = [s for s in span_stats(t, None) if s.count >= 3 and s.name not in sync_names]
    if not stats:
        raise ExplainError("no span name has 3 or more calls: trace a function that repeats (--trace), e.g. the loop body")
    return stats[0].name


def repeats_of(data: RunData, unit: str, index: ProfileIndex | None = None) -> list[Repeat]:
    """The repeats of ``unit``: "step" (denoising steps, windows as ``step_table`` draws them with
    ``index``) or a span name (exact, or a unique suffix)."""
    t = as_table(data.spans)
    table = step_table(t, index=index, max_rows=None) if unit == "step" else None
    if unit == "step" and table is None and not any(n.endswith("step") for n in t.names):
        raise ExplainError("no span carries diffusion.step: trace the UNet forward and the scheduler step, or pass --span NAME")
    if table is not None:
        return [Repeat(i, f"step {r.step}" + (f" (call {r.call})" if r.call else ""), r.wall_ns, r.start_ns, r.end_ns,
                       r.thread_id) for i, r in enumerate(table.rows)]
    names = set(t.names)
    if unit not in names:
        matches = sorted(n for n in names if n.endswith("." + unit) or n.endswith(unit))
        if len(matches) > 1:
            raise ExplainError(f"--span {unit}: no single span name matches (matches: {', '.join(matches[:4])})")
        if not matches:
            counts = dict(zip(t.names, np.bincount(t.name, minlength=len(t.names)).tolist()))
            listed = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            raise ExplainError(f"--span {unit}: no span of that name in run {data.run.id}"
                               + ("; its span names:" if listed else " (it has no spans: name functions with --trace)"),
                               listed)
        unit = matches[0]
    rows = np.flatnonzero(t.name == t.code(unit))  # in time order
    attrs = t.attrs
    return [Repeat(i, f"#{i}" + (f" step {attrs[r]['diffusion.step']}" if r in attrs and "diffusion.step" in attrs[r] else ""),
                   e - s, s, e, th)
            for i, (r, s, e, th) in enumerate(zip(rows.tolist(), t.start[rows].tolist(), t.end[rows].tolist(),
                                                  t.thread[rows].tolist()))]


def _window_samples(index: ProfileIndex, reps: list[Repeat]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each repeat, its samples (``ProfileIndex.select`` of its window and thread) as a range of ``pos``:
    ``(pos, lo, hi)``: repeat ``k``'s sample indices are ``pos[lo[k]:hi[k]]`` (one searchsorted per thread)."""
    th = np.fromiter((r.thread_id for r in reps), np.int64, len(reps))
    st = np.fromiter((r.start_ns for r in reps), np.int64, len(reps))
    en = np.fromiter((r.end_ns for r in reps), np.int64, len(reps))
    order = np.lexsort((np.arange(len(index)), index.thread))
    pos = order  # samples grouped by thread, in time order within a thread
    lo = np.zeros(len(reps), np.int64)
    hi = np.zeros(len(reps), np.int64)
    tids, first = np.unique(index.thread[order], return_index=True)
    last = np.append(first[1:], len(order))
    for tid, a, b in zip(tids.tolist(), first.tolist(), last.tolist()):
        sel = np.flatnonzero(th == tid)
        if len(sel):
            ts = index.t[order[a:b]]
            lo[sel] = a + np.searchsorted(ts, st[sel], "left")
            hi[sel] = a + np.searchsorted(ts, en[sel], "left")
    return pos, lo, hi


def _gather(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray, which: list[int]) -> np.ndarray:
    """The sample indices of the repeats ``which``, concatenated in that order."""
    w = np.asarray(which, np.int64)
    c = hi[w] - lo[w]
    total = int(c.sum())
    if not total:
        return np.zeros(0, np.int64)
    return pos[np.arange(total) - np.repeat(np.cumsum(c) - c, c) + np.repeat(lo[w], c)]


def classify(durations: np.ndarray) -> tuple[np.ndarray, float, str]:
    """``(slow mask, median, rule)`` for repeat durations (ns), by ``analysis.slow.call_slow``."""
    v = call_slow(durations)
    return v.mask, v.median, v.rule


def _parse_indices(spec: str, n: int, what: str) -> list[int]:
    try:
        out = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise ExplainError(f"--{what} {spec}: expected comma-separated repeat indices") from None
    bad = [i for i in out if not 0 <= i < n]
    if bad:
        raise ExplainError(f"--{what}: repeat {bad[0]} out of range 0..{n - 1}")
    return out


def explain(data: RunData, unit: str | None = None, slow: str | None = None, fast: str = "all",
            index: ProfileIndex | None = None, top: int = 5) -> Explanation:
    """Explain the slow repeats of ``unit`` (default: ``default_unit``).

    ``slow``: comma-separated repeat indices to treat as slow (default: the robust rule). ``fast``: "all"
    (every repeat not slow), "median" (the non-slow repeats no longer than 1.1 x the median), or indices.
    Raises ExplainError when there is nothing to compare.
    """
    index = index or ProfileIndex(data.profile)
    unit = unit or default_unit(data)
    reps = repeats_of(data, unit, index)
    t = as_table(data.spans)
    if unit != "step" or not _has_steps(t):
        unit = _span_name(t, unit)
    if len(reps) < 2:
        raise ExplainError(f"{unit}: {len(reps)} repeat(s); need at least 2 to compare")
    dur = np.array([r.duration_ns for r in reps], dtype=np.float64)
    verdict = call_slow(dur)
    mask, med, rule = verdict.mask, verdict.median, verdict.rule
    if slow is not None:
        chosen = _parse_indices(slow, len(reps), "slow")
        mask = np.zeros(len(reps), bool)
        mask[chosen] = True
        rule = f"slow: repeats {', '.join(map(str, chosen))} (as asked)"
    warm = np.zeros(len(reps), bool)
    if slow is None and verdict.warmup:
        warm[0] = True  # the first repeat, slow too: a warm-up, in neither group
    if fast == "all":
        fmask = ~mask & ~warm
    elif fast == "median":
        fmask = ~mask & ~warm & (dur <= 1.1 * med)
    else:
        fmask = np.zeros(len(reps), bool)
        fmask[_parse_indices(fast, len(reps), "fast")] = True
        fmask &= ~mask
    for r, s, f, w in zip(reps, mask, fmask, warm):
        r.group = "slow" if s else "fast" if f else "warm-up" if w else "other"
    pos, lo, hi = _window_samples(index, reps)
    for r, n in zip(reps, (hi - lo).tolist()):
        r.samples = n
    slow_r = [r for r in reps if r.group == "slow"]
    fast_r = [r for r in reps if r.group == "fast"]
    shape = shape_of([r.index for r in slow_r], len(reps))
    slow_mean = float(np.mean([r.duration_ns for r in slow_r])) if slow_r else 0.0
    fast_mean = float(np.mean([r.duration_ns for r in fast_r])) if fast_r else 0.0
    gap = slow_mean - fast_mean
    per_slow = float(np.mean([r.samples for r in slow_r])) if slow_r else 0.0
    from .memory import repeats_note

    base = dict(unit=unit, rule=rule, shape=shape, repeats=reps, median_ns=med, slow_mean_ns=slow_mean,
                fast_mean_ns=fast_mean, gap_ns=gap, samples_per_slow_repeat=per_slow,
                memory_note=repeats_note(data, reps))
    if not slow_r or not fast_r:
        return Explanation(**base, causes=[], covered=0.0, entry=None, enough_samples=bool(slow_r), tree=None,
                           advice=("too noisy to call: the fast repeats vary too much to tell slow ones apart "
                                   "(pass --slow to compare chosen repeats)" if verdict.noisy and slow is None else
                                   "no slow repeats: every repeat is within the rule") if not slow_r
                           else "every repeat is slow: nothing fast to compare with (pass --fast)")
    if per_slow < MIN_SAMPLES:
        hz_now = data.profile.hz or 101
        need = math.ceil(MIN_SAMPLES * 2 / max(slow_mean / 1e9, 1e-6))
        return Explanation(**base, causes=[], covered=0.0, entry=None, enough_samples=False, tree=None,
                           advice=(f"too few samples to name a cause: the slow repeats hold {per_slow:.1f} samples each "
                                   f"at {hz_now:g} Hz; " + (
                                       "the Sentry SDK samples at a fixed rate: record the same code with `stepscope run "
                                       f"--hz {min(max(need, 2 * int(hz_now)), HZ_MAX)}`"
                                       if data.run.env.get("source") == "sentry" else
                                       f"record again with --hz {min(max(need, 2 * int(hz_now)), HZ_MAX)}")
                                   + (" (or more repeats)" if need > HZ_MAX else "")))
    s_idx = _gather(pos, lo, hi, [r.index for r in slow_r])
    f_idx = _gather(pos, lo, hi, [r.index for r in fast_r])
    s_self, s_total = index.function_times(s_idx)
    f_self, f_total = index.function_times(f_idx)
    ns, nf = len(slow_r), len(fast_r)
    d_self = s_self / ns - f_self / nf
    d_total = s_total / ns - f_total / nf
    funcs = index.functions
    denom = gap if gap > 0 else float(d_self[d_self > 0].sum()) or 1.0

    def cause(fid: int, use_total: bool = False) -> Cause:
        f = funcs[fid]
        s, fa = (s_total, f_total) if use_total else (s_self, f_self)
        d = d_total[fid] if use_total else d_self[fid]
        return Cause(f.name, f.file, f.line, float(s[fid] / ns), float(fa[fid] / nf), float(d), float(d / denom))

    causes, acc = [], 0.0
    for fid in np.argsort(-d_self).tolist():
        if d_self[fid] <= 0 or len(causes) >= top:
            break
        causes.append(cause(fid))
        acc += d_self[fid]
        if acc >= COVER * denom:
            break
    entry = _entry(index, s_idx, d_total, COVER * denom)
    tree = diff_tree(index.tree(s_idx), index.tree(f_idx), ns, nf)
    return Explanation(**base, causes=causes, covered=float(acc / denom), entry=cause(entry, True) if entry is not None else None,
                       enough_samples=True, tree=tree, advice="", path=extra_path(tree, gap))


def extra_path(tree: DiffNode, gap: float, share: float = 0.5) -> list[str]:
    """The path of the extra time through the differential tree: from the root, follow the child with the
    largest extra time while it holds at least ``share`` of the gap; keep the part from the first node
    that is mostly new work (its fast-group time under a quarter of its slow-group time; else the last
    four nodes), e.g. ``on_step_end ->
    render_preview -> encode_png -> Image.save -> PngImagePlugin._save``. Empty when nothing qualifies."""
    if gap <= 0:
        return []
    chain: list[DiffNode] = []
    node = tree
    while node.children:
        best = max(node.children, key=lambda c: c.delta_ns)
        if best.delta_ns < share * gap:
            break
        chain.append(best)
        node = best
    start = next((k for k, n in enumerate(chain) if n.fast_ns < 0.25 * n.slow_ns), max(0, len(chain) - 4))
    return [n.name for n in chain[start:]]


def _entry(index: ProfileIndex, s_idx: np.ndarray, d_total: np.ndarray, need: float) -> int | None:
    """The deepest function on the slow repeats' stacks whose extra total time is at least ``need``."""
    best, best_depth = None, -1
    uniq, _, _ = index.stack_weights(s_idx)
    for sid in uniq.tolist():
        for depth, fid in enumerate(index.stack_funcs[sid]):
            if d_total[fid] >= need and depth > best_depth:
                best, best_depth = fid, depth
    return best


def diff_tree(slow: CallNode, fast: CallNode, n_slow: int, n_fast: int, min_share: float = 0.005) -> DiffNode:
    """Merge two call trees into a differential tree (ns per repeat); drops nodes under ``min_share`` of
    the larger root in both groups."""
    limit = min_share * max(slow.total_ns / max(n_slow, 1), fast.total_ns / max(n_fast, 1))

    def merge(a: CallNode | None, b: CallNode | None, name: str) -> DiffNode:
        node = DiffNode(name, (a.total_ns / n_slow) if a else 0.0, (b.total_ns / n_fast) if b else 0.0)
        keys = set(a.children if a else ()) | set(b.children if b else ())
        for k in keys:
            ca = a.children.get(k) if a else None
            cb = b.children.get(k) if b else None
            sv = ca.total_ns / n_slow if ca else 0.0
            fv = cb.total_ns / n_fast if cb else 0.0
            if max(sv, fv) < limit:
                continue
            node.children.append(merge(ca, cb, (ca or cb).name))
        node.children.sort(key=lambda c: -c.slow_ns)
        return node

    return merge(slow, fast, "all")
