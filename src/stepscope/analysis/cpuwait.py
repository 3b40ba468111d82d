"""Each repeat's wait for a CPU: the time its thread was ready to run while other threads or processes held every
CPU (the scheduler's run-queue delay, ``record.steps.cpuwait``), so that a step slowed by a busy machine is told
apart from a step the program made slow (``analysis.slow.call_slow``'s ``waits``).

The readings are the counter at the entry of each step-level span (``cpu.wait_in``, ns) and at its exit (that plus
``cpu.wait_ns``): per thread, a series of (time, counter) points. A window's wait is the counter's rise between its
start and its end, each read off the series by linear interpolation between the two readings around it (a window
from one step's start to the next one's is exact: both ends are readings). Past the first or the last reading the
counter is taken as flat, so that a window that runs past them (the last step's, to its loop iteration's end) gets
the wait known inside it, a lower bound; a window with no reading inside or around it has no wait (NaN).
"""

from __future__ import annotations

import numpy as np

from ..core.spantable import SpanTable
from ..core.steprules import WAIT_IN, WAIT_NS


def series(t: SpanTable) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """thread id -> ``(times ns, counter ns)``, both sorted by time: the readings of the spans that carry them."""
    pts: dict[int, list[tuple[int, int]]] = {}
    for r, a in t.attrs.items():
        w0 = a.get(WAIT_IN)
        if not isinstance(w0, int):
            continue
        p = pts.setdefault(int(t.thread[r]), [])
        p.append((int(t.start[r]), w0))
        w = a.get(WAIT_NS)
        if isinstance(w, int) and w >= 0:
            p.append((int(t.end[r]), w0 + w))
    out = {}
    for tid, p in pts.items():
        p.sort()
        a = np.array(p, np.int64)
        out[tid] = (a[:, 0], np.maximum.accumulate(a[:, 1]))  # (a counter never goes back: a reading out of order)
    return out


def waits(t: SpanTable, threads, starts, ends) -> np.ndarray | None:
    """The wait for a CPU (ns, float; NaN where unknown) of each window ``[starts[k], ends[k])`` on thread
    ``threads[k]``; None when the run has no readings at all."""
    sr = series(t)
    if not sr:
        return None
    threads, starts, ends = (np.asarray(x, np.int64) for x in (threads, starts, ends))
    out = np.full(len(starts), np.nan)
    for tid in np.unique(threads).tolist():
        s = sr.get(tid)
        if s is None:
            continue
        ts, cs = s
        k = np.flatnonzero(threads == tid)
        a, b = starts[k], ends[k]
        known = (b >= ts[0]) & (a <= ts[-1])
        w = np.interp(b, ts, cs) - np.interp(a, ts, cs)
        out[k[known]] = np.maximum(w[known], 0.0)
    return out
