"""The memory lane as columns (``Lane``) and what it says of one window of time (``WindowMemory``): entry, exit,
peak and growth of a span, a step or a repeat, from the run's memory samples (``model.MemoryTrack``, recorded by
``record.memory.history``) and a span's own exact readings. The analyses of ``analysis.memory`` (per span name,
stages, the step table's memory, ``explain``'s note) read every window through it.

Figures are bytes. For each window (a span, a step):

- **entry / exit**: exact where the span's probe read them (``attrs["memory.rss_in"]``...: step-level spans);
  otherwise *sampled*, from the window's own samples only: a reading taken outside it belongs to whatever ran
  then (a sample taken after a span ended is the next span's). Exit: the last sample inside. Entry: the last
  sample at or before the start within ``NEAR_PERIODS`` sampling periods (the level the window began with: its
  first sample inside comes after whatever its first C call allocated), but never above the first sample
  inside (a level that fell before the start is not the window's), else the first sample inside. No sample
  inside: unknown (None).
- **peak**: the highest of the samples inside the window and of the exact entry/exit/peak readings, so never
  below the entry or the exit; exact where the kernel's RSS high-water mark (CUDA: the allocator's peak) rose
  inside the span (a new high of the run). A window with no sample inside and no exact reading has no figure:
  ``note`` says it is shorter than the sampling period, rather than a figure being made up.
- **growth**: peak minus entry: the memory the window needed on top of what was held when it began.

RSS counts what the process holds from the OS: memory that the allocator keeps after a free is still counted,
so a later window needing less than an earlier one shows no growth (CUDA's allocated bytes have no such lag).

In a job's joined lane (``MemoryTrack.process``) each window is read in the lane of its thread's process.
``Lane.windows`` reads any number of windows at once in a few numpy passes; ``Lane.window`` reads one, with a
span's exact readings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.jobids import process_index
from ..core.model import MemoryTrack

#: A sampled entry/exit figure is taken only from a sample this many sampling periods from the boundary.
NEAR_PERIODS = 2.5


@dataclass(slots=True)
class WindowMemory:
    """Memory over one window (see the module doc). ``kind``: "rss" or "cuda" (allocated bytes).
    ``entry``/``exit``/``peak``/``growth``: bytes or None; ``exact_*``: read at the span's boundary / a new high
    inside, not sampled; ``samples``: memory samples inside; ``note``: why a figure is missing."""

    kind: str
    entry: int | None = None
    exit: int | None = None
    peak: int | None = None
    growth: int | None = None
    exact_entry: bool = False
    exact_exit: bool = False
    exact_peak: bool = False
    samples: int = 0
    note: str | None = None


class Lane:
    """A run's memory lane as numpy columns for window queries. ``period_ns``: the sampling period (from the
    run's rate; the median gap between samples when the rate is unknown)."""

    def __init__(self, track: MemoryTrack, hz: float = 0.0) -> None:
        self.track, self.hz = track, hz
        #: a job's joined lane (``MemoryTrack.process``): each process's own lane, for the windows of its spans
        self.proc = np.asarray(track.process, np.int64) if len(track.process) == len(track.t_ns) else None
        self.multi = self.proc is not None and len(self.proc) > 0 and bool((self.proc != self.proc[0]).any())
        self._subs: dict[int, Lane | None] = {}
        self.t = np.asarray(track.t_ns, dtype=np.int64)
        self.rss = np.array([-1 if v is None else v for v in track.rss], dtype=np.int64)
        self.cuda = np.array([-1 if v is None else v for v in track.cuda_allocated], dtype=np.int64)
        self.reserved = np.array([-1 if v is None else v for v in track.cuda_reserved], dtype=np.int64)
        self.has_rss = bool(len(self.rss) and (self.rss >= 0).any())
        self.has_cuda = bool(len(self.cuda) and (self.cuda >= 0).any())
        if hz and hz > 0:
            self.period_ns = int(1e9 / hz)
        elif len(self.t) > 1:
            self.period_ns = int(np.median(np.diff(self.t)))
        else:
            self.period_ns = 10_000_000

    def __len__(self) -> int:
        return len(self.t)

    def of_process(self, k: int) -> "Lane | None":
        """Process ``k``'s own lane in a job's joined lane (None: it has no memory sample)."""
        if k not in self._subs:
            sel = np.flatnonzero(self.proc == k).tolist()
            tr = self.track
            self._subs[k] = Lane(MemoryTrack([tr.t_ns[i] for i in sel], [tr.rss[i] for i in sel],
                                             [tr.cuda_allocated[i] for i in sel], [tr.cuda_reserved[i] for i in sel]),
                                 self.hz) if sel else None
        return self._subs[k]

    def column(self, kind: str) -> np.ndarray:
        return self.rss if kind == "rss" else self.cuda

    def _valid_index(self, col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(prev, next)`` for ``col``: per sample index, the nearest index at or before it (-1: none) / at or after
        it (``len(col)``: none; one more entry, for an index past the end) holding a reading (>= 0)."""
        n = len(col)
        at = np.arange(n, dtype=np.int64)
        valid = col >= 0
        prev = np.maximum.accumulate(np.where(valid, at, -1)) if n else at
        nxt = np.append(np.minimum.accumulate(np.where(valid, at, n)[::-1])[::-1], n)
        return prev, nxt

    def windows(self, starts: np.ndarray, ends: np.ndarray, kind: str = "rss",
                threads: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Sampled figures of many windows at once (clock ns; no exact readings): ``(entry, exit, peak, samples)``
        in bytes, -1 where unknown, each as ``window`` reads it without attrs. Vectorised: any number of windows in
        a few numpy passes (searchsorted over all windows, ``np.maximum.reduceat`` for the peaks). In a job's
        joined lane each window is read in the lane of its thread's process (``threads``; None: the top program's)."""
        starts = np.asarray(starts, np.int64)
        ends = np.asarray(ends, np.int64)
        n = len(starts)
        if self.multi:
            procs = process_index(threads) if threads is not None else np.zeros(n, np.int64)
            out = (np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64))
            for k in np.unique(procs).tolist():
                sub = self.of_process(k)
                if sub is not None:
                    m = procs == k
                    for o, v in zip(out, sub.windows(starts[m], ends[m], kind)):
                        o[m] = v
            return out
        col = self.column(kind)
        if not len(col) or not n:
            z = np.full(n, -1, np.int64)
            return z, z.copy(), z.copy(), np.zeros(n, np.int64)
        near = NEAR_PERIODS * self.period_ns
        lo = np.searchsorted(self.t, starts, "left")
        hi = np.searchsorted(self.t, ends, "right")
        valid = (col >= 0).astype(np.int64)
        cum = np.concatenate([[0], np.cumsum(valid)])
        count = np.where(hi > lo, cum[hi] - cum[np.minimum(lo, hi)], 0)
        has = count > 0
        peaks = np.full(n, -1, np.int64)
        entry = np.full(n, -1, np.int64)
        exit_ = np.full(n, -1, np.int64)
        if has.any():
            padded = np.append(col, -1)
            idx = np.empty(2 * int(has.sum()), np.int64)
            idx[0::2], idx[1::2] = lo[has], hi[has]
            peaks[has] = np.maximum.reduceat(padded, idx)[0::2]
            prev, nxt = self._valid_index(col)
            first = col[nxt[lo[has]]]  # the first reading inside (there is one: count > 0)
            exit_[has] = col[prev[hi[has] - 1]]  # the last reading inside
            # the last reading at or before the start, within NEAR_PERIODS: the level the window began at, never
            # above the first reading inside (a level read before the start that fell by then is not the window's)
            j = np.searchsorted(self.t, starts[has], "right") - 1
            b = np.where(j >= 0, prev[np.maximum(j, 0)], -1)
            ok = (b >= 0) & (starts[has] - self.t[np.maximum(b, 0)] <= near)
            entry[has] = np.where(ok, np.minimum(col[np.maximum(b, 0)], first), first)
        return entry, exit_, peaks, count

    def window(self, start: int, end: int, attrs: dict | None = None, kind: str = "rss",
               thread: int | None = None) -> WindowMemory:
        """Memory of ``kind`` over ``[start, end]`` (clock ns), with a span's exact readings from ``attrs``.

        Only readings inside the window (or the span's own exact ones) are its figures: the exit is the last
        sample inside (a sample after the end was taken in whatever ran next), the peak the highest inside; the
        entry is the last sample at or before the start within ``NEAR_PERIODS`` periods (what the window began
        with: a span's first sample inside comes after whatever it allocated in its first C call), but never
        above the first sample inside (a level that fell before the start is not the window's), else the first
        inside. A window with no sample inside and no exact reading has no figure. The peak is at least the
        entry and the exit."""
        if self.multi:  # a job's joined lane: the lane of the thread's process (``windows``)
            sub = self.of_process(int(process_index([thread or 0])[0]))
            if sub is None:
                return WindowMemory(kind, note="no memory sample in this process")
            return sub.window(start, end, attrs, kind)
        attrs = attrs or {}
        col = self.column(kind)
        out = WindowMemory(kind)
        near = NEAR_PERIODS * self.period_ns
        key = "rss" if kind == "rss" else "cuda"
        lo = int(np.searchsorted(self.t, start, "left"))
        hi = int(np.searchsorted(self.t, end, "right"))
        inside = col[lo:hi]
        inside = inside[inside >= 0]
        out.samples = int(len(inside))
        v = attrs.get(f"memory.{key}_in")
        if isinstance(v, (int, float)) and v >= 0:
            out.entry, out.exact_entry = int(v), True
        elif len(inside):
            out.entry = int(inside[0])
            j = int(np.searchsorted(self.t, start, "right")) - 1
            while j >= 0 and col[j] < 0 and start - self.t[j] <= near:
                j -= 1
            if j >= 0 and col[j] >= 0 and start - self.t[j] <= near:
                out.entry = min(int(col[j]), out.entry)
        v = attrs.get(f"memory.{key}_out")
        if isinstance(v, (int, float)) and v >= 0:
            out.exit, out.exact_exit = int(v), True
        elif len(inside):
            out.exit = int(inside[-1])
        vals = list(inside.tolist())
        if out.exact_entry:
            vals.append(out.entry)
        if out.exact_exit:
            vals.append(out.exit)
        v = attrs.get(f"memory.{key}_peak")
        exact_peak = isinstance(v, (int, float)) and v >= 0 and (kind == "rss" or attrs.get("memory.cuda_peak_exact"))
        if isinstance(v, (int, float)) and v >= 0:
            vals.append(int(v))
        if vals:
            out.peak = int(max(vals))  # >= the entry and the exit: they are among the values, or below inside[0]
            out.exact_peak = bool(exact_peak) and out.peak == int(v)
        else:
            dur = (end - start) / 1e6
            out.note = (f"no memory sample inside: {dur:.2f} ms is shorter than the {self.period_ns / 1e6:.1f} ms "
                        "sampling period" if end - start < self.period_ns else "no memory sample inside")
        if out.peak is not None and out.entry is not None:
            out.growth = max(out.peak - out.entry, 0)
        return out
