"""A span table's rows grouped by thread and ordered by start, for the window queries of the step and repeat
tables (``analysis.steptable``): which spans of a thread start inside a window."""

from __future__ import annotations

import numpy as np

from ..core.spantable import SpanTable


def thread_rows(t: SpanTable) -> "ThreadRows":
    """``ThreadRows`` of ``t``, made once per table (``SpanTable.memo``)."""
    return t.memo("thread_rows", lambda: ThreadRows(t))


class ThreadRows:
    """A table's rows grouped by thread, each thread's by ``(start, -end)`` (then table order), for window
    queries. ``rows``: the rows in that order; ``pos[row]``: a row's position in it."""

    __slots__ = ("rows", "starts", "pos", "blocks")

    def __init__(self, t: SpanTable) -> None:
        n = len(t)
        self.rows = thread_order(t)
        self.starts = t.start[self.rows]
        self.pos = np.empty(n, np.int64)
        self.pos[self.rows] = np.arange(n)
        th = t.thread[self.rows]  # (grouped by thread: runs, no sort)
        first = np.concatenate(([0], np.flatnonzero(th[1:] != th[:-1]) + 1)) if n else np.zeros(0, np.int64)
        uniq = th[first]
        last = np.append(first[1:], n)
        self.blocks = {int(u): (int(a), int(b)) for u, a, b in zip(uniq, first, last)}

    def within(self, thread: int, start: int, end: int) -> tuple[int, int]:
        """Positions ``[lo, hi)`` of the thread's spans that start in ``[start, end)``."""
        a, b = self.blocks.get(int(thread), (0, 0))
        seg = self.starts[a:b]
        return a + int(np.searchsorted(seg, start, "left")), a + int(np.searchsorted(seg, end, "left"))

    def within_many(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``within`` for many windows at once (arrays of the same length)."""
        lo = np.zeros(len(thread), np.int64)
        hi = np.zeros(len(thread), np.int64)
        for tid, (a, b) in self.blocks.items():
            sel = np.flatnonzero(thread == tid)
            if len(sel):
                seg = self.starts[a:b]
                lo[sel] = a + np.searchsorted(seg, start[sel], "left")
                hi[sel] = a + np.searchsorted(seg, end[sel], "left")
        return lo, hi


def thread_order(t: SpanTable) -> np.ndarray:
    """Rows by ``(thread, start, -end, row)`` (int64 positions). The table is in start order already, so a stable sort by thread
    (none with one thread) gives it wherever no two spans of a thread start at the same ns; else a ``lexsort``."""
    n = len(t)
    th = t.thread
    if n and (th[1:] == th[:-1]).all():
        order = np.arange(n)
    else:
        order = np.argsort(th, kind="stable")
    s, tt = t.start[order], th[order]
    if n > 1 and ((s[1:] == s[:-1]) & (tt[1:] == tt[:-1])).any():
        return np.lexsort((np.arange(n), -t.end, t.start, t.thread))
    return order
