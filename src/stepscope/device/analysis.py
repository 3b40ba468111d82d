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
    thread when the gap began (None when unknown)."""

    device: int
    stream: int
    start_ns: int
    end_ns: int
    category: str
    next_name: str
    host_op: str | None = None
    annotation: str | None = None

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


def idle_breakdown(trace: KinetoTrace, kernel_wait_ns: int = KERNEL_WAIT_NS, attribute_top: int = 20
                   ) -> tuple[list[StreamIdle], list[Gap]]:
    """Per-stream idle breakdown and every gap, largest first; the ``attribute_top`` largest gaps get
    their host op and annotation."""
    dev_idx = np.nonzero(np.isin(trace.cat, DEVICE_CATS) & (trace.stream >= 0))[0]
    rt = np.nonzero(trace.mask("cuda_runtime", "cuda_driver") & (trace.correlation >= 0))[0]
    # launches by correlation id, sorted: a gap's launch is found by binary search (the last launch of an id wins,
    # as a dict built in trace order would have it)
    rt_corr = trace.correlation[rt]
    order = np.argsort(rt_corr, kind="stable")
    rt_corr, rt_sorted = rt_corr[order], rt[order]
    streams: list[StreamIdle] = []
    gaps: list[Gap] = []
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
        label = np.where(host, 0, np.where(kernel, 1, 2)).tolist()
        names = trace.names
        tids = np.where(found, trace.tid[launch] if len(rt_corr) else -1, -1).tolist()
        for st, en, c, nm, tid in zip(start.tolist(), ts[k + 1].tolist(), label, trace.name[nxt].tolist(), tids):
            gp = Gap(dev, stream, st, en, _GAP_CATS[c], names[nm])
            gp.host_op = tid  # the launching thread (-1: unknown) for now; resolved below for the largest gaps
            gaps.append(gp)
        span = int(end.max() - ts.min()) if len(sel) else 0
        streams.append(StreamIdle(dev, stream, len(sel), span, busy, span - busy, cats["host_wait"], cats["kernel_wait"],
                                  cats["other"]))
    gaps.sort(key=lambda g: -g.duration_ns)
    ops = _HostIndex(trace, ("cpu_op",))
    notes = _HostIndex(trace, ("user_annotation",))
    for n, g in enumerate(gaps[:attribute_top]):
        tid = g.host_op
        g.host_op = None
        if tid == -1:
            continue
        o = ops.enclosing(tid, g.start_ns, outermost=True)
        a = notes.enclosing(tid, g.start_ns, outermost=False)
        g.host_op = trace.name_of(o) if o is not None else None
        g.annotation = trace.name_of(a) if a is not None else None
    for g in gaps[attribute_top:]:
        g.host_op = None
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
    on the same thread (events nest by time). Returns an array aligned with ``idx``."""
    out = trace.dur[idx].astype(np.int64)
    tids = trace.tid[idx]
    for tid in np.unique(tids).tolist():
        where = np.nonzero(tids == tid)[0]  # positions in idx
        sel = idx[where]
        order = np.lexsort((-trace.dur[sel], trace.ts[sel]))
        where, sel = where[order], sel[order]
        ts, dur = trace.ts[sel].tolist(), trace.dur[sel].tolist()
        sub = [0] * len(sel)
        stack: list[int] = []  # positions in sel, and their ends
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
        out[where] -= np.asarray(sub, np.int64)
    return out


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
    streams, gaps = idle_breakdown(trace, kernel_wait_ns)
    syncs = host_syncs(trace)
    counts: dict[str, int] = defaultdict(int)
    for s in syncs:
        counts[s.kind] += 1
    span = int(trace.end.max() - trace.ts.min()) if len(trace) else 0
    return DeviceSummary(trace.path, trace.device_name, len(trace), span, streams, gaps[:50], syncs,
                         op_stats(trace, ("cpu_op",), top), op_stats(trace, ("kernel",), top), dict(counts))
