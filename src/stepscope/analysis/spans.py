"""Span aggregates, the span tree, and per-step / per-repeat tables."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..model import Span
from ..tracing.steps import STEP_ATTR

#: A step (or repeat) is marked slow above this multiple of the median.
SLOW_FACTOR = 1.5


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


@dataclass(slots=True)
class StepRow:
    """One denoising step (or one repeat of a span). ``call``: which pipeline call (0-based); ``step``:
    the ``diffusion.step`` index (or the repeat's index); ``wall_ns``: from the first span of the step to
    the end of its last; ``by_name``: ns per traced name inside the step (nested spans included);
    ``slow``: wall time over ``SLOW_FACTOR`` x the median; ``start_ns``/``end_ns``/``thread_id``: the window
    (see ``step_table`` for how a step's window is drawn)."""

    call: int
    step: int
    wall_ns: int
    start_ns: int
    end_ns: int
    thread_id: int
    by_name: dict[str, int] = field(default_factory=dict)
    slow: bool = False
    ratio: float = 1.0


@dataclass(slots=True)
class StepTable:
    """Per-step times. ``kind``: "diffusion.step" (steps from the attribute) or "repeat" (repeats of
    ``span_name``). ``columns``: traced names shown, by total time; ``rule``: how slow is decided."""

    kind: str
    span_name: str | None
    columns: list[str]
    rows: list[StepRow]
    median_ns: float
    rule: str

    @property
    def slow_rows(self) -> list[StepRow]:
        return [r for r in self.rows if r.slow]


def _mark_slow(rows: list[StepRow]) -> float:
    if not rows:
        return 0.0
    med = float(np.median([r.wall_ns for r in rows]))
    for r in rows:
        r.ratio = r.wall_ns / med if med else 1.0
        r.slow = bool(med and r.wall_ns > SLOW_FACTOR * med)
    return med


def _descendant_times(root: Span, kids: dict, into: dict[str, int]) -> None:
    stack = list(kids.get(root.span_id, ()))
    while stack:
        s = stack.pop()
        into[s.name] = into.get(s.name, 0) + s.duration_ns
        stack.extend(kids.get(s.span_id, ()))


def step_table(spans: list[Span], max_columns: int = 8) -> StepTable | None:
    """Steps from the ``diffusion.step`` attribute, or None when no span carries it.

    Spans with the same parent and step index form one step; a pipeline call is one parent. A step's
    window runs from its first span's start to the next step's first span's start, so that work between
    the traced calls (step callbacks, Python glue) counts in its step; the last step of a call ends at
    its last span's end.
    """
    tagged = [s for s in spans if STEP_ATTR in s.attrs]
    if not tagged:
        return None
    kids = children_index(spans)
    groups: dict[tuple, list[Span]] = defaultdict(list)
    call_of_parent: dict = {}
    for s in tagged:
        call = call_of_parent.setdefault(s.parent_id, len(call_of_parent))
        groups[(call, int(s.attrs[STEP_ATTR]))].append(s)
    rows = []
    totals: dict[str, int] = defaultdict(int)
    for (call, step), members in sorted(groups.items()):
        by_name: dict[str, int] = {}
        for s in members:
            by_name[s.name] = by_name.get(s.name, 0) + s.duration_ns
            _descendant_times(s, kids, by_name)
        for k, v in by_name.items():
            totals[k] += v
        start = min(s.start_ns for s in members)
        end = max(s.end_ns for s in members)
        rows.append(StepRow(call, step, end - start, start, end, members[0].thread_id, by_name))
    for row, nxt in zip(rows, rows[1:]):
        if nxt.call == row.call and nxt.start_ns >= row.end_ns:
            row.end_ns = nxt.start_ns
            row.wall_ns = row.end_ns - row.start_ns
    med = _mark_slow(rows)
    cols = sorted(totals, key=lambda k: -totals[k])[:max_columns]
    return StepTable("diffusion.step", None, cols, rows, med,
                     f"slow: step wall time > {SLOW_FACTOR} x median ({med / 1e6:.1f} ms)")


def repeat_table(spans: list[Span], name: str | None = None, max_columns: int = 8) -> StepTable | None:
    """Each call of span ``name`` as a row (default: the name with >= 3 calls and the most total time,
    sync sites excluded)."""
    if name is None:
        sync_names = {s.name for s in spans if s.op == "sync"}
        stats = [s for s in span_stats(spans, None) if s.count >= 3 and s.name not in sync_names]
        if not stats:
            return None
        name = stats[0].name
    members = [s for s in spans if s.name == name]
    if not members:
        return None
    kids = children_index(spans)
    rows = []
    totals: dict[str, int] = defaultdict(int)
    for i, s in enumerate(members):
        by_name = {s.name: s.duration_ns}
        _descendant_times(s, kids, by_name)
        for k, v in by_name.items():
            totals[k] += v
        rows.append(StepRow(0, i, s.duration_ns, s.start_ns, s.end_ns, s.thread_id, by_name))
    med = _mark_slow(rows)
    cols = sorted(totals, key=lambda k: -totals[k])[:max_columns]
    return StepTable("repeat", name, cols, rows, med,
                     f"slow: call time > {SLOW_FACTOR} x median ({med / 1e6:.1f} ms)")
