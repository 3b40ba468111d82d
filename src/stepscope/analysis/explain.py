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

When the slow repeats hold too few samples (``MIN_SAMPLES`` per repeat on average; a row that stands for several
periods, a waiting thread's, counts as that many: ``_looks``), no cause is named: the explanation says so and which
sampling rate would do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from ..core.limits import HZ_MAX
from ..core.units import fmt_ns
from ..core.model import RunData, Span
from .calltree import ProfileIndex
from .cpuwait import waits as cpu_waits
from ..core.spantable import SpanTable, as_table
from ..core.steprules import STEP_ATTR
from .difftree import DiffNode, diff_tree
from .slow import MAD_K, MIN_RATIO, call_slow, shape_of  # noqa: F401  (re-exported: the rule's constants, shapes)
from .spans import span_stats
from .steptable import step_table

COVER = 0.8
MIN_SAMPLES = 8
#: the differential tree's times as ``explain``'s JSON names them (side B: the slow repeats, A: the fast)
TREE_KEYS = {"b_ns": "slow_ns", "a_ns": "fast_ns"}


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


#: the groups a repeat can be in (``Repeats.group`` holds the index)
GROUPS = ("fast", "slow", "warm-up", "other")


class Repeats(Sequence):
    """The repeats as columns (numpy, one row per repeat: a million repeats make no object each); indexing gives a
    ``Repeat`` made on demand (changing it changes nothing here), a slice a list of them. ``index``: each row's
    index among all the repeats (``where`` keeps a subset); ``duration_ns``, ``start_ns``, ``end_ns``,
    ``thread_id``, ``samples``: as in ``Repeat``; ``group``: indices into ``GROUPS``. Labels: ``labels`` (one per
    repeat of all, e.g. "step 3 (call 1)"), else "#i" and ``suffix`` (repeat index -> text, " step 3")."""

    __slots__ = ("index", "duration_ns", "start_ns", "end_ns", "thread_id", "samples", "group", "labels", "suffix")

    def __init__(self, index, duration_ns, start_ns, end_ns, thread_id, samples=None, group=None,
                 labels: list[str] | None = None, suffix: dict[int, str] | None = None) -> None:
        self.index = np.asarray(index, np.int64)
        self.duration_ns = np.asarray(duration_ns, np.int64)
        self.start_ns = np.asarray(start_ns, np.int64)
        self.end_ns = np.asarray(end_ns, np.int64)
        self.thread_id = np.asarray(thread_id, np.int64)
        n = len(self.index)
        self.samples = np.zeros(n, np.int64) if samples is None else np.asarray(samples, np.int64)
        self.group = np.zeros(n, np.int8) if group is None else np.asarray(group, np.int8)
        self.labels = labels
        self.suffix = suffix or {}

    def __len__(self) -> int:
        return len(self.index)

    def label(self, i: int) -> str:
        """The label of repeat ``i`` (its index among all)."""
        return self.labels[i] if self.labels is not None else f"#{i}{self.suffix.get(i, '')}"

    def _one(self, k: int) -> Repeat:
        i = int(self.index[k])
        return Repeat(i, self.label(i), int(self.duration_ns[k]), int(self.start_ns[k]), int(self.end_ns[k]),
                      int(self.thread_id[k]), int(self.samples[k]), GROUPS[int(self.group[k])])

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self._one(j) for j in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self._one(k)

    def __iter__(self):
        return (self._one(k) for k in range(len(self)))

    def mask(self, group: str) -> np.ndarray:
        """Rows in ``group`` ("slow", "fast", "warm-up", "other")."""
        return self.group == GROUPS.index(group)

    def where(self, rows) -> "Repeats":
        """The rows ``rows`` (a mask or positions) as a ``Repeats`` of their own, indices and labels kept."""
        return Repeats(self.index[rows], self.duration_ns[rows], self.start_ns[rows], self.end_ns[rows],
                       self.thread_id[rows], self.samples[rows], self.group[rows], self.labels, self.suffix)

    def dicts(self, rows=None) -> list[dict]:
        """The rows (all, or positions ``rows``) as ``Repeat`` dicts (``dataclasses.asdict``'s), from the columns."""
        sel = np.arange(len(self)) if rows is None else np.asarray(rows, np.int64)
        cols = [self.index[sel].tolist(), self.duration_ns[sel].tolist(), self.start_ns[sel].tolist(),
                self.end_ns[sel].tolist(), self.thread_id[sel].tolist(), self.samples[sel].tolist(),
                self.group[sel].tolist()]
        return [{"index": i, "label": self.label(i), "duration_ns": d, "start_ns": a, "end_ns": b, "thread_id": t,
                 "samples": n, "group": GROUPS[g]} for i, d, a, b, t, n, g in zip(*cols)]


@dataclass(slots=True)
class Cause:
    """A function whose self time grew in the slow repeats. Times are ns per repeat (group means). ``line``: the
    first line a sample saw the function on; 0 when no sample saw it on one, and then ``line_note`` says why
    (``no_line_note``)."""

    function: str
    file: str
    line: int
    slow_ns: float
    fast_ns: float
    delta_ns: float
    share_of_gap: float
    line_note: str = ""


#: why a cause has no line: a traced function sampled only in the probe calls Python 3.11's instrumented code
#: adds (they run on no line; stepscope's own frames are not shown, so their time is the function's)
NO_LINE_TRACED = ("no line: sampled only in stepscope's probe calls at its entry and exit (a traced function on "
                  "Python 3.11: the calls added to its code have no line)")
#: why a cause has no line: any other function sampled only on instructions that have none
NO_LINE_OTHER = "no line: sampled only on instructions without a line number"


def no_line_note(spans, function: str) -> str:
    """Why function ``function`` (a ``Function.name``) was sampled on no line: ``NO_LINE_TRACED`` when it is
    traced (a span of ``spans`` has its name), else ``NO_LINE_OTHER``."""
    names = spans.names if isinstance(spans, SpanTable) else {s.name for s in spans}
    return NO_LINE_TRACED if function in names else NO_LINE_OTHER


@dataclass(slots=True)
class Explanation:
    """The result of ``explain``. ``unit``: "diffusion.step" or the span name compared. ``gap_ns``: mean
    slow duration minus mean fast duration (per repeat). ``causes``: as described in the module doc;
    empty when ``enough_samples`` is False (then ``advice`` says what to do). ``path``: the call path
    the extra time takes (``extra_path``), from where it starts to where it is spent."""

    unit: str
    rule: str
    shape: str
    repeats: Repeats
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
    def slow(self) -> Repeats:
        return self.repeats.where(self.repeats.mask("slow"))

    def to_dict(self) -> dict:
        """As ``dataclasses.asdict`` makes it (the repeats as a list of dicts, from the columns; the tree's times
        named ``slow_ns`` and ``fast_ns``: ``TREE_KEYS``)."""
        import dataclasses

        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["repeats"] = d["tree"] = None
        out = dataclasses.asdict(Explanation(**d))
        out["repeats"] = self.repeats.dicts()
        out["tree"] = self.tree.to_dict(TREE_KEYS) if self.tree is not None else None
        return out


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


def repeats_of(data: RunData, unit: str, index: ProfileIndex | None = None) -> Repeats:
    """The repeats of ``unit``: "step" (denoising steps, windows as ``step_table`` draws them with
    ``index``) or a span name (exact, or a unique suffix). Columns: no object per repeat."""
    t = as_table(data.spans)
    table = step_table(t, index=index, max_rows=None) if unit == "step" else None
    if unit == "step" and table is None and not any(n.endswith("step") for n in t.names):
        raise ExplainError("no span carries diffusion.step: trace the UNet forward and the scheduler step, or pass --span NAME")
    if table is not None:
        rows = table.rows
        return Repeats(np.arange(len(rows)), [r.wall_ns for r in rows], [r.start_ns for r in rows],
                       [r.end_ns for r in rows], [r.thread_id for r in rows],
                       labels=[f"step {r.step}" + (f" ({table.call_labels[r.call]})" if r.call in table.call_labels
                                                       else f" (call {r.call})" if r.call else "") for r in rows])
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
    suffix = {}  # the few rows with a step: their positions among the repeats (``rows`` is sorted)
    tagged = np.array([r for r, a in attrs.items() if STEP_ATTR in a], np.int64)
    if len(tagged) and len(rows):
        k = np.searchsorted(rows, tagged)
        hit = (k < len(rows)) & (rows[np.minimum(k, len(rows) - 1)] == tagged)
        for r, i in zip(tagged[hit].tolist(), k[hit].tolist()):
            suffix[i] = f" step {attrs[r]['diffusion.step']}"
    start, end = t.start[rows], t.end[rows]
    return Repeats(np.arange(len(rows)), end - start, start, end, t.thread[rows], suffix=suffix)


def _window_samples(index: ProfileIndex, reps: Repeats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each repeat, its samples (``ProfileIndex.select`` of its window and thread) as a range of ``pos``:
    ``(pos, lo, hi)``: repeat ``k``'s sample indices are ``pos[lo[k]:hi[k]]`` (one searchsorted per thread)."""
    th, st, en = reps.thread_id, reps.start_ns, reps.end_ns
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


def _looks(index: ProfileIndex, hz: float, pos: np.ndarray, lo: np.ndarray, hi: np.ndarray,
           reps: Repeats) -> np.ndarray:
    """Per repeat, how many sample periods its samples stand for (float): a row of a thread that stayed still
    stands for every period it stayed so (``sample_wall_ns``: the sampler looked, found its CPU clock unmoved, and
    wrote one row for the wait), so a repeat that waits (a sleep, a device sync) holds as many samples as its
    duration allows, where its rows alone would read as too few. The sampled time is capped at the repeat's duration;
    never fewer than its rows."""
    period = 1e9 / hz if hz else 1e7
    w = np.concatenate([[0.0], np.cumsum(np.nan_to_num(index.weight[pos]))])
    timed = np.minimum(w[hi] - w[lo], np.maximum(reps.end_ns - reps.start_ns, 0)) / period
    return np.maximum(timed, (hi - lo).astype(np.float64))


def _gather(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray, which) -> np.ndarray:
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
    dur = reps.duration_ns.astype(np.float64)
    verdict = call_slow(dur, cpu_waits(t, reps.thread_id, reps.start_ns, reps.end_ns))
    mask, med, rule = verdict.mask, verdict.median, verdict.rule
    if slow is not None:
        chosen = _parse_indices(slow, len(reps), "slow")
        mask = np.zeros(len(reps), bool)
        mask[chosen] = True
        rule = f"slow: repeats {', '.join(map(str, chosen))} (as asked)"
    warm = np.zeros(len(reps), bool)
    if slow is None and verdict.warmup:
        warm[0] = True  # the first repeat, slow too: a warm-up, in neither group
    if verdict.waited is not None:  # slow only by a wait for a CPU (a busy machine): in neither group either
        warm |= verdict.waited
    if fast == "all":
        fmask = ~mask & ~warm
    elif fast == "median":
        fmask = ~mask & ~warm & (dur <= 1.1 * med)
    else:
        fmask = np.zeros(len(reps), bool)
        fmask[_parse_indices(fast, len(reps), "fast")] = True
        fmask &= ~mask
    first_warm = np.zeros(len(reps), bool)
    first_warm[0] = slow is None and verdict.warmup
    reps.group = np.where(mask, GROUPS.index("slow"), np.where(fmask, GROUPS.index("fast"), np.where(
        first_warm, GROUPS.index("warm-up"), GROUPS.index("other")))).astype(np.int8)
    pos, lo, hi = _window_samples(index, reps)
    reps.samples = hi - lo
    slow_i = np.flatnonzero(mask)  # positions = repeat indices (``repeats_of`` gives every repeat, in order)
    fast_i = np.flatnonzero(reps.group == GROUPS.index("fast"))
    shape = shape_of(slow_i.tolist(), len(reps))
    slow_mean = float(np.mean(reps.duration_ns[slow_i])) if len(slow_i) else 0.0
    fast_mean = float(np.mean(reps.duration_ns[fast_i])) if len(fast_i) else 0.0
    gap = slow_mean - fast_mean
    per_slow = float(np.mean(_looks(index, data.profile.hz, pos, lo, hi, reps)[slow_i])) if len(slow_i) else 0.0
    from .memory import repeats_note

    base = dict(unit=unit, rule=rule, shape=shape, repeats=reps, median_ns=med, slow_mean_ns=slow_mean,
                fast_mean_ns=fast_mean, gap_ns=gap, samples_per_slow_repeat=per_slow,
                memory_note=repeats_note(data, reps))
    if not len(slow_i) or not len(fast_i):
        return Explanation(**base, causes=[], covered=0.0, entry=None, enough_samples=bool(len(slow_i)), tree=None,
                           advice=("too noisy to call: the fast repeats vary too much to tell slow ones apart "
                                   "(pass --slow to compare chosen repeats)" if verdict.noisy and slow is None else
                                   "no slow repeats: every repeat is within the rule") if not len(slow_i)
                           else "every repeat is slow: nothing fast to compare with (pass --fast)")
    advice = None
    if per_slow < MIN_SAMPLES and not len(data.profile) and data.run.env.get("source") not in (None, "sentry"):
        advice = (f"no samples in this run (spans only: sent as {data.run.env['source']}): record the same code with "
                  "`stepscope run` to name a cause from its stacks")
    elif per_slow < MIN_SAMPLES:
        hz_now = data.profile.hz or 101
        need = math.ceil(MIN_SAMPLES * 2 / max(slow_mean / 1e9, 1e-6))
        hz = min(max(need, 2 * int(hz_now)), HZ_MAX)
        if need > 10 * HZ_MAX:  # (no rate helps: a slow repeat is shorter than a tenth of a period at the highest)
            advice = (f"too few samples to name a cause: the slow repeats last {fmt_ns(slow_mean)} each, shorter than "
                      f"one sample period even at {HZ_MAX} Hz; trace the functions they call (--trace) to time them "
                      "per repeat, or explain a longer span that holds many of them")
        else:
            advice = (f"too few samples to name a cause: the slow repeats hold {per_slow:.1f} samples each at "
                      f"{hz_now:g} Hz; " + (
                          f"the Sentry SDK samples at a fixed rate: record the same code with `stepscope run --hz {hz}`"
                          if data.run.env.get("source") == "sentry" else f"record again with --hz {hz}")
                      + (" (or more repeats)" if need > HZ_MAX else ""))
    if advice is not None:
        return Explanation(**base, causes=[], covered=0.0, entry=None, enough_samples=False, tree=None, advice=advice)
    s_idx = _gather(pos, lo, hi, slow_i)
    f_idx = _gather(pos, lo, hi, fast_i)
    s_self, s_total = index.function_times(s_idx)
    f_self, f_total = index.function_times(f_idx)
    ns, nf = len(slow_i), len(fast_i)
    d_self = s_self / ns - f_self / nf
    d_total = s_total / ns - f_total / nf
    funcs = index.functions
    denom = gap if gap > 0 else float(d_self[d_self > 0].sum()) or 1.0

    def cause(fid: int, use_total: bool = False) -> Cause:
        f = funcs[fid]
        s, fa = (s_total, f_total) if use_total else (s_self, f_self)
        d = d_total[fid] if use_total else d_self[fid]
        return Cause(f.name, f.file, f.line, float(s[fid] / ns), float(fa[fid] / nf), float(d), float(d / denom),
                     "" if f.line else no_line_note(data.spans, f.name))

    causes, acc = [], 0.0
    for fid in np.argsort(-d_self).tolist():
        if d_self[fid] <= 0 or len(causes) >= top:
            break
        causes.append(cause(fid))
        acc += d_self[fid]
        if acc >= COVER * denom:
            break
    entry = _entry(index, s_idx, d_total, COVER * denom)
    tree = diff_tree(index.tree(f_idx), nf, index.tree(s_idx), ns, order="b")  # A: the fast group, B: the slow one
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
    start = next((k for k, n in enumerate(chain) if n.a_ns < 0.25 * n.b_ns), max(0, len(chain) - 4))
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
