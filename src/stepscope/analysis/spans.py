"""Span aggregates and the span tree (the per-step / per-repeat tables: ``analysis.steptable``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..core.model import Span
from ..core.spantable import as_table


@dataclass(slots=True)
class SpanStat:
    """Aggregate of all spans with one name. Times in ns; ``share`` = total / the wall time given to ``span_stats``
    (the summary gives the work's, start-up and shutdown apart, else the run's) (0..1+)."""

    name: str
    count: int
    total_ns: int
    mean_ns: float
    p50_ns: float
    p95_ns: float
    max_ns: int
    share: float
    errors: int


def span_stats(spans, wall_ns: int | None) -> list[SpanStat]:
    """One SpanStat per span name (transactions excluded), by total time, largest first (ties: the name seen
    first). ``spans``: Span objects or a ``SpanTable`` (columns: no object per span)."""
    t = as_table(spans)
    g = span_groups(t)
    if g is None:
        return []
    sc, sd, lo, hi, first, nerr = g
    out = []
    for a, b in sorted(zip(lo.tolist(), hi.tolist()), key=lambda ab: first[sc[ab[0]]]):
        a_ = sd[a:b]
        total = int(a_.sum())
        code = int(sc[a])
        out.append(SpanStat(t.names[code], b - a, total, float(a_.mean()), sorted_percentile(a_, 50),
                            sorted_percentile(a_, 95), int(a_[-1]), total / wall_ns if wall_ns else 0.0,
                            int(nerr[code])))
    out.sort(key=lambda s: -s.total_ns)
    return out


def span_groups(t) -> tuple | None:
    """Of a ``SpanTable``, once per table (``SpanTable.memo``): the spans' durations (ns) grouped by name
    (transactions left out), each group ascending: ``(codes, durations, group starts, group ends, first row of each
    name, errors per name)``, arrays; None when there are none."""
    return t.memo("span_groups", lambda: _groups(t))


def _groups(t) -> tuple | None:
    keep = ~t.op_mask("transaction")
    codes = t.name[keep]
    if not len(codes):
        return None
    dur = t.dur[keep]
    err = t.error[keep] >= 0
    d0 = int(dur.min())
    width = int(dur.max()) - d0 + 1
    if len(t.names) * width < 2 ** 62:  # (name, duration) as one int64 key: one sort, no index array
        key = np.sort(codes.astype(np.int64) * width + (dur - d0))
        sc, sd = key // width, key % width + d0
    else:
        order = np.lexsort((dur, codes))
        sc, sd = codes[order], dur[order]
    bounds = np.flatnonzero(np.diff(sc)) + 1
    lo = np.concatenate(([0], bounds))
    hi = np.concatenate((bounds, [len(sc)]))
    first = np.full(len(t.names), len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    nerr = np.bincount(codes[err], minlength=len(t.names))
    return sc, sd, lo, hi, first, nerr


def sorted_percentile(a: np.ndarray, q: float) -> float:
    """``np.percentile(a, q)`` (its default "linear" method, Hyndman & Fan's type 7) of an ascending array, read
    off by index instead of partitioning: the two neighbours of the virtual index ``q/100 * (n-1)``, interpolated
    as numpy's ``_lerp`` does (the same float64 result)."""
    n = len(a)
    v = q / 100 * (n - 1)
    i = int(np.floor(v))
    if i >= n - 1:
        return float(a[n - 1])
    g = v - i
    x, y = float(a[i]), float(a[i + 1])
    d = y - x
    return y - d * (1 - g) if g >= 0.5 else x + d * g


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
