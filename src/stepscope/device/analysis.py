"""Analyses of a device timeline: idle gaps per stream, host-device syncs, top ops and kernels.

All functions take a ``KinetoTrace`` and return data (ns, bytes); none prints or plots.

Idle time per stream follows Holistic Trace Analysis's idle time breakdown (HTA
``BreakdownAnalysis._analyze_idle_time_for_stream``, MIT): device activity on a stream sorted by start;
the gap before each activity is

- *host wait* when the runtime call that launched it (same ``correlation``) started after the stream's
  previous activity had ended: the CPU did not enqueue work fast enough;
- *kernel wait* when it is not host wait and shorter than ``kernel_wait_ns`` (30 us: HTA's default
  ``consecutive_kernel_delay=30`` is documented as ns but applied to its microsecond timestamps): the
  fixed overhead of back-to-back launches;
- *other* otherwise (waiting on an event, a dependency on another stream...).

Unlike HTA, a gap is measured in ns from the latest end of *all* previous activities on the stream (not
the previous one's), so overlapping activities never produce negative idle time, and only kernels,
memcpys and memsets count as activity. HTA also rounds every timestamp and duration to whole us,
drops the last ProfilerStep's events, and sums negative gaps; on ``v100_training_rank0`` the two agree on
the shares of each category (``benchmarks/device_vs_hta.py`` prints both), not on the last microsecond.
Each gap is attributed to the host op and annotation running on the launching thread when it began.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .kineto import CAT, DEVICE_CATS, KinetoTrace

KERNEL_WAIT_NS = 30_000

SYNC_RUNTIME = {"cudaStreamSynchronize": "stream sync", "cudaDeviceSynchronize": "device sync",
                "cudaEventSynchronize": "event sync", "cudaMemcpy": "blocking memcpy"}
SYNC_OPS = {"aten::item": ".item()", "aten::_local_scalar_dense": ".item() (scalar read)", "aten::nonzero": ".nonzero()",
            "aten::is_nonzero": "bool(tensor)", "aten::equal": "torch.equal", "aten::tolist": ".tolist()",
            "aten::masked_select": "masked_select", "aten::unique": "unique"}


@dataclass(slots=True)
class Gap:
    """An idle interval on a stream (ns) before ``next_name``; ``category``: host_wait/kernel_wait/other.
    ``host_op``/``annotation``: the outermost cpu_op and innermost user annotation on the launching
    thread when the gap began; ``launched_in``: the outermost cpu_op that launched ``next_name`` (where the host
    spent the gap when it was not in ``host_op``: a 1 s gap that begins in ``aten::linear`` and ends with a launch
    from ``aten::scaled_dot_product_attention`` was spent building an attention plan). None when unknown."""

    device: int
    stream: int
    start_ns: int
    end_ns: int
    category: str
    next_name: str
    host_op: str | None = None
    annotation: str | None = None
    launched_in: str | None = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(slots=True)
class StreamIdle:
    """Busy and idle time of one stream between its first activity's start and its last one's end (ns)."""

    device: int
    stream: int
    activities: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int

    @property
    def idle_share(self) -> float:
        return self.idle_ns / self.span_ns if self.span_ns else 0.0


@dataclass(slots=True)
class SyncPoint:
    """A place where the host waits for the device (or would, on a GPU). ``cost_ns``: the host call's
    duration; ``enclosing_op``: the outermost cpu_op around it; ``annotation``: innermost user annotation
    (a stepscope span mirrored by ``record_function``); ``python``: innermost Python frame from the
    profiler's stacks ("file.py(123): function"), when recorded."""

    kind: str
    name: str
    ts_ns: int
    cost_ns: int
    tid: int
    enclosing_op: str | None = None
    annotation: str | None = None
    python: str | None = None
    nbytes: int = -1


@dataclass(slots=True)
class OpStat:
    """Per name: calls, total and self time (ns; self = minus child events of the same kind on the thread)."""

    name: str
    count: int
    total_ns: int
    self_ns: int


@dataclass(slots=True)
class DeviceSummary:
    """What ``stepscope device`` reports for one trace."""

    path: str
    device: str | None
    events: int
    span_ns: int
    streams: list[StreamIdle]
    gaps: list[Gap]
    syncs: list[SyncPoint]
    top_ops: list[OpStat]
    top_kernels: list[OpStat]
    sync_counts: dict[str, int] = field(default_factory=dict)


class _HostIndex:
    """Per thread, host events of some categories sorted by start, for 'what ran at time t' queries."""

    def __init__(self, trace: KinetoTrace, cats: tuple[str, ...]) -> None:
        self.trace = trace
        m = trace.mask(*cats)
        idx = np.nonzero(m)[0]
        self.by_tid: dict[int, np.ndarray] = {}
        for tid in np.unique(trace.tid[idx]).tolist():
            sel = idx[trace.tid[idx] == tid]
            self.by_tid[tid] = sel[np.argsort(trace.ts[sel], kind="stable")]

    def enclosing(self, tid: int, t: int, outermost: bool) -> int | None:
        """Index of the outermost/innermost event on ``tid`` with ``ts <= t < end`` (None if none)."""
        sel = self.by_tid.get(tid)
        if sel is None or not len(sel):
            return None
        tr = self.trace
        hi = int(np.searchsorted(tr.ts[sel], t, "right"))
        lo = max(0, hi - 4096)  # nested events start shortly before t; bounded look-back
        cand = sel[lo:hi]
        hit = cand[tr.ts[cand] + tr.dur[cand] > t]
        if not len(hit):
            return None
        if outermost:
            return int(hit[np.argmax(tr.dur[hit])])
        return int(hit[np.argmin(tr.dur[hit])])


def idle_breakdown(trace: KinetoTrace, kernel_wait_ns: int = KERNEL_WAIT_NS, attribute_top: int = 20,
                   keep: int | None = None) -> tuple[list[StreamIdle], list[Gap]]:
    """Per-stream idle breakdown and the gaps, largest first (ties: by stream, then time): every gap, or the
    ``keep`` largest (only those become ``Gap`` objects); the ``attribute_top`` largest get their host op and
    annotation."""
    dev_idx = np.nonzero(np.isin(trace.cat, DEVICE_CATS) & (trace.stream >= 0))[0]
    rt = np.nonzero(trace.mask("cuda_runtime", "cuda_driver") & (trace.correlation >= 0))[0]
    # launches by correlation id, sorted: a gap's launch is found by binary search (the last launch of an id wins,
    # as a dict built in trace order would have it)
    rt_corr = trace.correlation[rt]
    order = np.argsort(rt_corr, kind="stable")
    rt_corr, rt_sorted = rt_corr[order], rt[order]
    streams: list[StreamIdle] = []
    gaps: list[Gap] = []
    parts: list[tuple] = []  # per stream: its gaps' stream position, start, end, category, next name, thread
    dev_of, stream_of = trace.device[dev_idx], trace.stream[dev_idx]
    for dev, stream in sorted(set(zip(dev_of.tolist(), stream_of.tolist()))):
        sel = dev_idx[(dev_of == dev) & (stream_of == stream)]
        sel = sel[np.argsort(trace.ts[sel], kind="stable")]
        ts, end = trace.ts[sel], trace.ts[sel] + trace.dur[sel]
        prev_end = np.maximum.accumulate(end)
        gap = np.maximum(ts[1:] - prev_end[:-1], 0)
        busy = _union_ns(ts, end)
        k = np.nonzero(gap > 0)[0]
        nxt = sel[k + 1]
        corr = trace.correlation[nxt]
        pos = np.searchsorted(rt_corr, corr, "right") - 1
        found = (pos >= 0) & (rt_corr[np.maximum(pos, 0)] == corr) if len(rt_corr) else np.zeros(len(k), bool)
        launch = rt_sorted[np.maximum(pos, 0)] if len(rt_corr) else np.zeros(len(k), np.int64)
        start = prev_end[k]
        host = found & (trace.ts[launch] > start) if len(rt_corr) else found
        kernel = ~host & (gap[k] < kernel_wait_ns)
        other = ~host & ~kernel
        g = gap[k]
        cats = {"host_wait": int(g[host].sum()), "kernel_wait": int(g[kernel].sum()), "other": int(g[other].sum())}
        parts.append((np.full(len(k), len(streams), np.int64), start, ts[k + 1], np.where(host, 0, np.where(kernel, 1, 2)),
                      trace.name[nxt], np.where(found, launch, -1)))
        span = int(end.max() - ts.min()) if len(sel) else 0
        streams.append(StreamIdle(dev, stream, len(sel), span, busy, span - busy, cats["host_wait"], cats["kernel_wait"],
                                  cats["other"]))
    if parts:
        which, start, stop, label, name, by = (np.concatenate(c) for c in zip(*parts))
        order = np.argsort(start - stop, kind="stable")[:keep]  # largest first; ties keep stream and time order
        names = trace.names
        for w, st, en, c, nm in zip(which[order].tolist(), start[order].tolist(), stop[order].tolist(),
                                    label[order].tolist(), name[order].tolist()):
            gaps.append(Gap(streams[w].device, streams[w].stream, st, en, _GAP_CATS[c], names[nm]))
        launches = by[order[:attribute_top]].tolist()  # the next activity's launch (-1: unknown)
        ops = _HostIndex(trace, ("cpu_op",))
        notes = _HostIndex(trace, ("user_annotation",))
        for g, r in zip(gaps, launches):
            if r < 0:
                continue
            tid = int(trace.tid[r])
            o = ops.enclosing(tid, g.start_ns, outermost=True)
            a = notes.enclosing(tid, g.start_ns, outermost=False)
            li = ops.enclosing(tid, int(trace.ts[r]), outermost=True)
            g.host_op = trace.name_of(o) if o is not None else None
            g.annotation = trace.name_of(a) if a is not None else None
            g.launched_in = trace.name_of(li) if li is not None else None
    return streams, gaps


_GAP_CATS = ("host_wait", "kernel_wait", "other")


def _union_ns(ts: np.ndarray, end: np.ndarray) -> int:
    if not len(ts):
        return 0
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    run_end = np.maximum.accumulate(end)
    starts_new = np.ones(len(ts), bool)
    starts_new[1:] = ts[1:] > run_end[:-1]
    group = np.cumsum(starts_new) - 1
    g_start = ts[starts_new]
    g_end = np.zeros(len(g_start), np.int64)
    np.maximum.at(g_end, group, end)
    return int((g_end - g_start).sum())


def host_syncs(trace: KinetoTrace) -> list[SyncPoint]:
    """Every host-device sync point in time order: sync runtime calls, DtoH copies, scalar reads and
    data-dependent ops (``.item()``, ``.nonzero()``...), and Kineto's ``cuda_sync`` records."""
    out: list[SyncPoint] = []
    ops = _HostIndex(trace, ("cpu_op",))
    notes = _HostIndex(trace, ("user_annotation",))
    py = _HostIndex(trace, ("python_function",))
    names = trace.names
    # per name, then per event by its name index: only the candidates are looked at one by one
    is_dtoh = np.array([("DtoH" in n) for n in names] + [False], bool)[trace.name]
    m = (trace.cat == CAT["gpu_memcpy"]) & is_dtoh
    dtoh_corr = dict(zip(trace.correlation[m].tolist(), trace.nbytes[m].tolist()))
    rt_sync = np.array([n in SYNC_RUNTIME for n in names] + [False], bool)[trace.name]
    rt_copy = np.array([n.startswith("cudaMemcpy") for n in names] + [False], bool)[trace.name]
    op_sync = np.array([n in SYNC_OPS and n not in ("aten::_local_scalar_dense", "aten::is_nonzero") for n in names]
                       + [False], bool)[trace.name]  # those two are reported through their caller (aten::item)
    is_rt = trace.cat == CAT["cuda_runtime"]
    copies = is_rt & rt_copy & ~rt_sync
    if dtoh_corr and copies.any():
        copies &= np.isin(trace.correlation, np.fromiter(dtoh_corr, np.int64, len(dtoh_corr)))
    else:
        copies[:] = False
    cand = np.nonzero((is_rt & rt_sync) | copies | ((trace.cat == CAT["cpu_op"]) & op_sync))[0]
    for i in cand.tolist():
        nm = names[trace.name[i]]
        nbytes = -1
        if trace.cat[i] == CAT["cuda_runtime"]:
            if nm in SYNC_RUNTIME:
                kind = SYNC_RUNTIME[nm]
            else:
                kind = "device-to-host copy"
                nbytes = dtoh_corr[int(trace.correlation[i])]
        else:
            kind = SYNC_OPS[nm]
        tid, t = int(trace.tid[i]), int(trace.ts[i])
        o = ops.enclosing(tid, t, outermost=True)
        a = notes.enclosing(tid, t, outermost=False)
        p = py.enclosing(tid, t, outermost=False)
        out.append(SyncPoint(kind, nm, t, int(trace.dur[i]), tid,
                             trace.name_of(o) if o is not None and o != i else None,
                             trace.name_of(a) if a is not None else None,
                             trace.name_of(p) if p is not None else None, nbytes))
    return out


def self_times(trace: KinetoTrace, idx: np.ndarray) -> np.ndarray:
    """Self time (ns) of each event in ``idx``: its duration minus its direct children's among ``idx``
    on the same thread (events nest by time; ties in start: the longer is the parent). Returns an array aligned
    with ``idx``.

    Vectorised per thread (``_children_ns``): an event's depth is how many earlier events are still open at its
    start, its parent the last earlier event one level up. Where events overlap without nesting (Kineto's rounding
    can make a child outlast its parent), that top-level event's group goes through the stack walk
    (``_children_ns_stack``), which keeps an overlapping event as a child of the one open before it."""
    out = trace.dur[idx].astype(np.int64)
    pos = np.flatnonzero(out > 0)  # a zero-length event is nobody's parent and adds nothing to one
    if len(pos) < 2:
        return out
    sel = idx[pos]
    ts, dur, tid = trace.ts[sel], out[pos], trace.tid[sel]
    order = np.lexsort((-dur, ts, tid))
    ts, dur, tid, pos = ts[order], dur[order], tid[order], pos[order]
    cut = np.flatnonzero(tid[1:] != tid[:-1]) + 1
    sub = np.zeros(len(ts), np.int64)
    for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(ts)].tolist()):
        if b - a > 1:
            sub[a:b] = _children_ns(ts[a:b], dur[a:b])
    out[pos] -= sub
    return out


def _children_ns(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The summed duration of each event's direct children (events sorted by start, longer first; durations > 0).

    The depth of event k is k minus the events ended by its start (all of them earlier); its parent is the last
    earlier event of depth - 1. Each parent is checked: open at its child's start and outlasting it (then the open
    events at any start are exactly its ancestors, and this is the stack walk's result). A group of events between
    two moments when nothing is open (a top-level event and what runs inside it) that fails the check, where events
    overlap without nesting, goes through the stack walk (``_children_ns_stack``) on its own."""
    m = len(ts)
    out = np.zeros(m, np.int64)
    end = ts + dur
    depth = np.arange(m) - np.searchsorted(np.sort(end), ts, side="right")
    top = int(depth.max()) if m else 0
    if top == 0:
        return out
    by_depth = np.argsort(depth, kind="stable")  # positions, grouped by depth, in order within each depth
    edges = np.searchsorted(depth[by_depth], np.arange(top + 2))
    parent = np.zeros(m, np.int64)
    ok = np.ones(m, bool)
    for d in range(1, top + 1):
        above, here = by_depth[edges[d - 1]:edges[d]], by_depth[edges[d]:edges[d + 1]]
        j = np.searchsorted(above, here) - 1
        ok[here] = j >= 0
        parent[here] = above[np.maximum(j, 0)] if len(above) else 0
    kids = np.flatnonzero(depth > 0)
    p = parent[kids]
    ok[kids] &= (end[kids] <= end[p]) & (ts[kids] < end[p])
    group = np.cumsum(depth == 0) - 1  # the top-level event each event runs under
    bad = np.unique(group[kids[~ok[kids]]])
    if len(bad):
        fine = ~np.isin(group[kids], bad)
        kids, p = kids[fine], p[fine]
    np.add.at(out, p, dur[kids])
    if len(bad):
        starts = np.flatnonzero(depth == 0)
        stops = np.r_[starts[1:], m]
        for g in bad.tolist():
            a, b = int(starts[g]), int(stops[g])
            out[a:b] = _children_ns_stack(ts[a:b].tolist(), dur[a:b].tolist())
    return out


def _children_ns_stack(ts: list[int], dur: list[int]) -> np.ndarray:
    """``_children_ns`` by a stack walk, for events that overlap without nesting."""
    sub = [0] * len(ts)
    stack: list[int] = []
    ends: list[int] = []
    for k in range(len(ts)):
        t = ts[k]
        while ends and ends[-1] <= t:
            stack.pop()
            ends.pop()
        if stack:
            sub[stack[-1]] += dur[k]
        stack.append(k)
        ends.append(t + dur[k])
    return np.asarray(sub, np.int64)


def op_stats(trace: KinetoTrace, cats: tuple[str, ...], top: int = 15) -> list[OpStat]:
    """Calls, total and self time per name for events of ``cats``, by self time, largest first."""
    idx = np.nonzero(trace.mask(*cats))[0]
    selfs_of = self_times(trace, idx)
    names = trace.name[idx]
    n = len(trace.names)
    count = np.bincount(names, minlength=n)
    total = np.zeros(n, np.int64)
    np.add.at(total, names, trace.dur[idx])
    selfs = np.zeros(n, np.int64)
    np.add.at(selfs, names, selfs_of)
    used = np.nonzero(count)[0]
    first = np.full(n, len(idx), np.int64)  # ties in self time keep the order names first appear in
    np.minimum.at(first, names, np.arange(len(idx)))
    ranked = used[np.lexsort((first[used], -selfs[used]))][:top]
    return [OpStat(trace.names[j], int(count[j]), int(total[j]), int(selfs[j])) for j in ranked.tolist()]


def summarize_device(trace: KinetoTrace, top: int = 15, kernel_wait_ns: int = KERNEL_WAIT_NS) -> DeviceSummary:
    """The whole device analysis of one trace."""
    streams, gaps = idle_breakdown(trace, kernel_wait_ns, keep=50)
    syncs = host_syncs(trace)
    counts: dict[str, int] = defaultdict(int)
    for s in syncs:
        counts[s.kind] += 1
    span = int(trace.end.max() - trace.ts.min()) if len(trace) else 0
    return DeviceSummary(trace.path, trace.device_name, len(trace), span, streams, gaps, syncs,
                         op_stats(trace, ("cpu_op",), top), op_stats(trace, ("kernel",), top), dict(counts))
