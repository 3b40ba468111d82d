"""Span aggregates, the span tree, and per-step / per-repeat tables (slow by ``analysis.slow``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..model import Span
from ..tracing.steps import NESTED_ATTR, STEP_ATTR, kind_of_name
from .slow import call_slow, shape_of, slow_cells

@dataclass(slots=True)
class SpanStat:
    """Aggregate of all spans with one name. Times in ns; ``share`` = total / run wall time (0..1+)."""

    name: str
    count: int
    total_ns: int
    mean_ns: float
    p50_ns: float
    p95_ns: float
    max_ns: int
    share: float
    errors: int


def span_stats(spans: list[Span], wall_ns: int | None) -> list[SpanStat]:
    """One SpanStat per span name (transactions excluded), by total time, largest first."""
    by_name: dict[str, list[int]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    for s in spans:
        if s.op == "transaction":
            continue
        by_name[s.name].append(s.duration_ns)
        if s.status == "error":
            errors[s.name] += 1
    out = []
    for name, durs in by_name.items():
        a = np.asarray(durs, dtype=np.int64)
        total = int(a.sum())
        out.append(SpanStat(name, len(a), total, float(a.mean()), float(np.percentile(a, 50)),
                            float(np.percentile(a, 95)), int(a.max()), total / wall_ns if wall_ns else 0.0,
                            errors.get(name, 0)))
    out.sort(key=lambda s: -s.total_ns)
    return out


def children_index(spans: list[Span]) -> dict[int | None, list[Span]]:
    """parent span id -> child spans (in start order)."""
    idx: dict[int | None, list[Span]] = defaultdict(list)
    for s in spans:
        idx[s.parent_id].append(s)
    return idx


def depths(spans: list[Span]) -> dict[int, int]:
    """span id -> nesting depth (0 for a span whose parent is unknown or None)."""
    by_id = {s.span_id: s for s in spans}
    out: dict[int, int] = {}

    def depth(s: Span) -> int:
        d = out.get(s.span_id)
        if d is not None:
            return d
        chain = []
        cur = s
        while cur is not None and cur.span_id not in out:
            chain.append(cur)
            cur = by_id.get(cur.parent_id) if cur.parent_id is not None else None
        base = out[cur.span_id] + 1 if cur is not None else 0
        for i, c in enumerate(reversed(chain)):
            out[c.span_id] = base + i
        return out[s.span_id]

    for s in spans:
        depth(s)
    return out


UNTRACED = "untraced"
#: The untraced time of a step is named (its sampled functions) when it is slow among the steps' untraced
#: times and over this share of the median step.
MIN_UNTRACED_SHARE = 0.1


@dataclass(slots=True)
class Fill:
    """A sampled function in a step's untraced time: self time (ns) at the leaf over the step's samples
    that fall outside every traced span; ``via``: the nearest caller that is the program's own code or a
    callback (the frame that entered the library), when it differs."""

    function: str
    file: str
    line: int
    self_ns: float
    via: str | None = None


@dataclass(slots=True)
class StepRow:
    """One denoising step (or one repeat of a span). ``call``: which pipeline call (0-based); ``step``:
    the ``diffusion.step`` index (or the repeat's index); ``wall_ns``: the step's window (see
    ``step_table``); ``by_name``: ns per traced name run inside the window (nested spans included);
    ``untraced_ns``: wall minus the time of the outermost traced spans inside the window (callbacks,
    previews, scheduler glue that nothing names); ``fill``: for a slow step (or a step whose untraced
    time is slow), the sampled functions in that untraced time, largest first; ``slow``: by the rule of
    ``analysis.slow``; ``slow_cells``: the columns ("wall", "untraced" or a traced name) that are slow
    among their column in a slow row; ``warmup``: the first row, slow, set apart as a warm-up (see
    ``analysis.slow``); ``start_ns``/``end_ns``/``thread_id``: the window; ``memory``: its memory (entry, exit,
    peak, growth: ``analysis.memory``), or None."""

    call: int
    step: int
    wall_ns: int
    start_ns: int
    end_ns: int
    thread_id: int
    by_name: dict[str, int] = field(default_factory=dict)
    untraced_ns: int = 0
    fill: list[Fill] = field(default_factory=list)
    slow: bool = False
    ratio: float = 1.0
    slow_cells: list[str] = field(default_factory=list)
    warmup: bool = False
    #: the window's memory (``analysis.memory.WindowMemory``), filled by ``analysis.memory.attach_steps``
    memory: object = None


@dataclass(slots=True)
class StepTable:
    """Per-step times. ``kind``: "diffusion.step" (steps from the attribute) or "repeat" (repeats of
    ``span_name``). ``columns``: traced names shown, by total time; ``rule``: how slow is decided, with
    its numbers (``analysis.slow``); ``noisy``: the repeats are too noisy to call (then no row is slow);
    ``shape``: of the slow rows (``analysis.slow.shape_of``: "first", "every k", "irregular", "none")."""

    kind: str
    span_name: str | None
    columns: list[str]
    rows: list[StepRow]
    median_ns: float
    rule: str
    noisy: bool = False
    shape: str = "none"

    @property
    def slow_rows(self) -> list[StepRow]:
        return [r for r in self.rows if r.slow]


def _is_pipeline_call(name: str) -> bool:
    return kind_of_name(name) == "scope" or (name.endswith(".__call__") and "Pipeline" in name)


class _ThreadSpans:
    """Spans of one thread by start time, for window queries."""

    __slots__ = ("spans", "starts")

    def __init__(self, spans: list[Span]) -> None:
        self.spans = sorted(spans, key=lambda s: (s.start_ns, -s.end_ns))
        self.starts = np.array([s.start_ns for s in self.spans], dtype=np.int64)

    def within(self, start: int, end: int) -> list[Span]:
        lo = int(np.searchsorted(self.starts, start, "left"))
        hi = int(np.searchsorted(self.starts, end, "left"))
        return self.spans[lo:hi]


def _content(inside: list[Span], start: int, end: int, skip: int | None = None) -> tuple[dict[str, int], list[tuple[int, int]]]:
    """``(ns per name, outermost traced intervals clipped to the window)`` of the spans ``inside`` a
    window (transactions and the span ``skip`` left out)."""
    ids = {s.span_id for s in inside}
    by_name: dict[str, int] = {}
    tops: list[tuple[int, int]] = []
    for s in inside:
        if s.op == "transaction" or s.span_id == skip:
            continue
        by_name[s.name] = by_name.get(s.name, 0) + s.duration_ns
        if s.parent_id not in ids or s.parent_id == skip:
            tops.append((s.start_ns, min(s.end_ns, end)))
    tops.sort()
    merged: list[tuple[int, int]] = []
    for a, b in tops:
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return by_name, merged


def _finish(rows: list[StepRow], intervals: list[list[tuple[int, int]]], totals: dict[str, int], index,
            max_columns: int) -> tuple[list[str], float, str, bool]:
    """Slow rows and cells by the one rule, the untraced fill of slow steps; returns ``(columns, median,
    rule, noisy)``."""
    verdict = call_slow([r.wall_ns for r in rows])
    med = verdict.median
    cols = sorted(totals, key=lambda k: -totals[k])[:max_columns]
    cells = {"wall": slow_cells(np.array([r.wall_ns for r in rows], float)),
             UNTRACED: slow_cells(np.array([r.untraced_ns for r in rows], float))}
    for c in cols:
        cells[c] = slow_cells(np.array([r.by_name.get(c, np.nan) for r in rows], float))
    # an untraced cell is only worth naming when it is a real part of a step (not 1 ms against 0.5)
    cells[UNTRACED] &= np.array([r.untraced_ns > MIN_UNTRACED_SHARE * med for r in rows], bool)
    for k, r in enumerate(rows):
        r.ratio = r.wall_ns / med if med else 1.0
        r.slow = bool(verdict.mask[k])
        r.warmup = bool(k == 0 and verdict.warmup)
        if r.slow:
            r.slow_cells = [c for c, m in cells.items() if m[k]]
        if index is not None and (r.slow or cells[UNTRACED][k]):
            r.fill = untraced_fill(index, r.start_ns, r.end_ns, r.thread_id, intervals[k])
    return cols, med, verdict.rule, verdict.noisy


def step_table(spans: list[Span], max_columns: int = 8, index=None) -> StepTable | None:
    """Steps from the ``diffusion.step`` attribute, or None when no span carries it.

    A step is the outermost denoiser calls (and scheduler steps) with one index in one pipeline call: a
    denoiser span inside another denoiser span (``diffusion.nested``, or a tagged ancestor) belongs to
    the outer one's step, never a step or call of its own. A pipeline call is the nearest traced
    pipeline ``__call__`` around the step (else the thread; a step index going back starts a new call).
    A step's window runs from its first span's start to the next step's first span's start, so that work
    between the traced calls (step callbacks, previews, Python glue) counts in its step; the last step of
    a call takes the traced calls that follow its spans and ran in the earlier steps too (a traced
    callback), up to the first other traced span, and ends where its loop iteration ends, read from the
    samples (``analysis.steploop``: the callback after the last step belongs to it). Every traced span that runs inside
    a window gets a column; ``untraced`` is the rest of the window. ``index``: the run's ProfileIndex
    (for the last step's end and the untraced fill), or None.
    """
    tagged = [s for s in spans if STEP_ATTR in s.attrs]
    if not tagged:
        return None
    by_id = {s.span_id: s for s in spans}
    tagged_ids = {s.span_id for s in tagged}

    def outer_of(s: Span) -> tuple[bool, int | None]:
        """(has a tagged ancestor, nearest pipeline-call ancestor id)."""
        nested, call = False, None
        p = by_id.get(s.parent_id) if s.parent_id is not None else None
        while p is not None:
            if p.span_id in tagged_ids:
                nested = True
            if call is None and _is_pipeline_call(p.name):
                call = p.span_id
            p = by_id.get(p.parent_id) if p.parent_id is not None else None
        return nested, call

    members: dict = defaultdict(list)  # call key -> top-level tagged spans
    for s in sorted(tagged, key=lambda s: s.start_ns):
        if s.attrs.get(NESTED_ATTR):
            continue
        nested, call = outer_of(s)
        if not nested:
            members[call if call is not None else ("thread", s.thread_id)].append(s)
    groups: list[tuple[int, int, list[Span], int | None]] = []  # (call, step, spans, limit ns)
    ncall = 0
    for key, ms in members.items():
        cur: dict[int, list[Span]] = {}
        last = -1
        for s in ms:
            k = int(s.attrs[STEP_ATTR])
            if k < last:  # the index went back: another pipeline call
                groups.extend((ncall, kk, v, None) for kk, v in cur.items())
                ncall, cur, last = ncall + 1, {}, -1
            cur.setdefault(k, []).append(s)
            last = max(last, k)
        limit = by_id[key].end_ns if not isinstance(key, tuple) else None
        groups.extend((ncall, kk, v, limit) for kk, v in cur.items())
        ncall += 1
    groups.sort(key=lambda g: (g[0], min(s.start_ns for s in g[2])))
    per_thread: dict[int, _ThreadSpans] = {}
    for s in spans:
        per_thread.setdefault(s.thread_id, []).append(s)  # type: ignore[arg-type]
    per_thread = {t: _ThreadSpans(v) for t, v in per_thread.items()}  # type: ignore[misc]
    rows = []
    for call, step, ms, _ in groups:
        start = min(s.start_ns for s in ms)
        end = max(s.end_ns for s in ms)
        rows.append(StepRow(call, step, end - start, start, end, ms[0].thread_id))
    for k, row in enumerate(rows):
        nxt = rows[k + 1] if k + 1 < len(rows) else None
        if nxt is not None and nxt.call == row.call and nxt.start_ns >= row.end_ns:
            row.end_ns = nxt.start_ns
            continue
        # the last step of a call: traced calls that ran in the earlier steps (a traced callback) and
        # follow its spans still belong to it, up to the first other traced span (the VAE decode)
        limit = groups[k][3]
        earlier = [r for r in rows[:k] if r.call == row.call]
        seen: set[str] = set()
        for r in earlier:
            seen.update(s.name for s in per_thread[r.thread_id].within(r.start_ns, r.end_ns))
        for s in per_thread[row.thread_id].within(row.end_ns, limit if limit is not None else 1 << 62):
            if s.name not in seen:
                limit = s.start_ns if limit is None else min(limit, s.start_ns)
                break
            row.end_ns = max(row.end_ns, s.end_ns)
        if index is not None:
            from .steploop import last_step_end

            row.end_ns = max(row.end_ns, last_step_end(index, [(r.start_ns, r.end_ns) for r in earlier], row.start_ns,
                                                       row.end_ns, row.thread_id, limit,
                                                       frozenset(s.name for s in groups[k][2])))
    for row in rows:
        row.wall_ns = row.end_ns - row.start_ns
    totals: dict[str, int] = defaultdict(int)
    intervals = []
    for row in rows:
        inside = per_thread[row.thread_id].within(row.start_ns, row.end_ns)
        row.by_name, tops = _content(inside, row.start_ns, row.end_ns)
        intervals.append(tops)
        row.untraced_ns = max(row.wall_ns - sum(b - a for a, b in tops), 0)
        for n, v in row.by_name.items():
            totals[n] += v
    cols, med, rule, noisy = _finish(rows, intervals, totals, index, max_columns)
    return StepTable("diffusion.step", None, cols, rows, med, rule, noisy, shape_of([k for k, r in enumerate(rows) if r.slow], len(rows)))


def repeat_table(spans: list[Span], name: str | None = None, max_columns: int = 8, index=None) -> StepTable | None:
    """Each call of span ``name`` as a row (default: the name with >= 3 calls and the most total time,
    sync sites excluded); the traced spans inside each call get columns, ``untraced`` is the call's own
    time outside them. ``index``: the run's ProfileIndex for the untraced fill of slow calls, or None."""
    if name is None:
        sync_names = {s.name for s in spans if s.op == "sync"}
        stats = [s for s in span_stats(spans, None) if s.count >= 3 and s.name not in sync_names]
        if not stats:
            return None
        name = stats[0].name
    members = sorted((s for s in spans if s.name == name), key=lambda s: s.start_ns)
    if not members:
        return None
    per_thread = {}
    for s in spans:
        per_thread.setdefault(s.thread_id, []).append(s)
    per_thread = {t: _ThreadSpans(v) for t, v in per_thread.items()}
    rows = []
    intervals = []
    totals: dict[str, int] = defaultdict(int)
    for i, s in enumerate(members):
        inside = per_thread[s.thread_id].within(s.start_ns, s.end_ns)
        by_name, tops = _content(inside, s.start_ns, s.end_ns, skip=s.span_id)
        by_name = {s.name: s.duration_ns, **{k: v for k, v in by_name.items() if k != s.name}}
        row = StepRow(0, i, s.duration_ns, s.start_ns, s.end_ns, s.thread_id, by_name)
        row.untraced_ns = max(s.duration_ns - sum(b - a for a, b in tops), 0)
        rows.append(row)
        intervals.append(tops)
        for k, v in by_name.items():
            totals[k] += v
    cols, med, rule, noisy = _finish(rows, intervals, totals, index, max_columns)
    return StepTable("repeat", name, cols, rows, med, rule, noisy, shape_of([k for k, r in enumerate(rows) if r.slow], len(rows)))


def untraced_fill(index, start: int, end: int, thread: int, traced: list[tuple[int, int]], top: int = 3) -> list[Fill]:
    """The sampled functions (self time) of ``thread`` in ``[start, end)`` outside the ``traced``
    intervals (sorted, disjoint), largest first, at most ``top``; each with ``via``: the deepest frame
    on its stacks that is the program's own code (``__main__`` or a file outside site-packages and the
    standard library) when that is not the function itself."""
    idx = index.select(start, end, thread)
    if not len(idx):
        return []
    t = index.t[idx]
    keep = np.ones(len(idx), bool)
    for a, b in traced:
        keep &= ~((t >= a) & (t < b))
    idx = idx[keep]
    if not len(idx):
        return []
    self_ns, _ = index.function_times(idx)
    out = []
    uniq, w, _ = index.stack_weights(idx)
    for fid in np.argsort(-self_ns)[:top].tolist():
        if self_ns[fid] <= 0:
            break
        f = index.functions[fid]
        via = None
        for sid in uniq[np.argsort(-w)].tolist():
            st = index.stack_funcs[sid]
            if st and st[-1] == fid:
                own = [g for g in st[:-1] if _own_code(index.functions[g])]
                if own:
                    via = index.functions[own[-1]].name
                break
        out.append(Fill(f.name, f.file, f.line, float(self_ns[fid]), via if via != f.name else None))
    return out


def _own_code(f) -> bool:
    """The program's own code: ``__main__`` or a file outside site-packages/dist-packages and the
    standard library (frozen modules included)."""
    if f.name.startswith("__main__."):
        return True
    file = f.file or ""
    if not file or file.startswith("<") or "site-packages" in file or "dist-packages" in file:
        return False
    import sysconfig

    return not file.startswith(sysconfig.get_paths()["stdlib"])
