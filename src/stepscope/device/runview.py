"""The device timeline of a recorded run: the Kineto trace rebased onto the run's clock and joined
with its spans and sync sites.

Rebasing: the capture recorded ``stepscope.clock_sync <label> <perf_counter_ns>`` ranges (at the start,
at each denoising step, at the end). At each marker, offset = Kineto time - clock reading; between
markers it is interpolated linearly, since Kineto's clock and ``perf_counter_ns`` drift apart by tens of
ppm (61 us over 2.4 s was seen here). A span's window ``[start, end)`` maps to
``[start + offset(start), end + offset(end))``. Kineto's ``tid`` is the OS thread id, which the run
stored for each Python thread (``Profile.native_ids``).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..core.spantable import as_table
from ..core.model import RunData, Span
from .analysis import DeviceSummary, SyncPoint, self_times, summarize_device
from ..record.device.capture import MARKER
from .flops import op_dtype, trace_flops
from .kineto import CAT, KinetoTrace


class AlignError(ValueError):
    """The trace has no clock markers (not recorded by ``stepscope run --device-trace``)."""


@dataclass(frozen=True, slots=True)
class ClockMap:
    """Run clock -> Kineto time: offsets (ns) measured at marker times (run clock, ns), interpolated."""

    at: np.ndarray
    offset: np.ndarray

    def to_trace(self, t_ns):
        """Kineto time (ns) of a run-clock time (scalar or array)."""
        return t_ns + np.rint(np.interp(t_ns, self.at, self.offset)).astype(np.int64)

    def to_run(self, k_ns):
        """Run-clock time (ns) of a Kineto time (scalar or array)."""
        return k_ns - np.rint(np.interp(k_ns, self.at + self.offset, self.offset)).astype(np.int64)


MARKER_WINDOW_NS = 500_000_000


def clock_map(trace: KinetoTrace) -> ClockMap:
    """The run clock -> Kineto time map from the capture's markers. Raises AlignError without markers."""
    pts = []
    for i in np.nonzero(trace.mask("user_annotation", "cpu_op"))[0].tolist():
        name = trace.name_of(i)
        if name.startswith(MARKER + " "):
            try:
                mono = int(name.rsplit(" ", 1)[1])
            except ValueError:
                continue
            pts.append((mono, int(trace.ts[i]) - mono))
    if not pts:
        raise AlignError(f"{trace.path}: no {MARKER} markers; record with `stepscope run --device-trace`")
    return clock_map_from(pts)


def clock_map_from(pts: list[tuple[int, int]]) -> ClockMap:
    """The map from ``(clock reading, trace time - clock reading)`` pairs (ns), one per marker (non-empty)."""
    pts = sorted(pts)
    at = np.array([p[0] for p in pts], np.int64)
    off = np.array([p[1] for p in pts], np.int64)
    # a marker's offset is the true offset plus the delay between reading the clock and the range's start,
    # which is >= 0 and sometimes large (a marker thread waiting for the GIL): keep the lower envelope,
    # the smallest offset within MARKER_WINDOW_NS around each marker (drift is far slower than that)
    lo = np.searchsorted(at, at - MARKER_WINDOW_NS, "left")
    hi = np.searchsorted(at, at + MARKER_WINDOW_NS, "right")
    env = np.array([off[a:b].min() for a, b in zip(lo.tolist(), hi.tolist())], np.int64)
    return ClockMap(at, env)


@dataclass(slots=True)
class SpanDevice:
    """Per span name: calls, host (span) time, time in host ops (top-level cpu_op, ns), device time
    (kernels/copies launched inside the span windows, ns), the top host ops by self time, FLOPs of the
    ops inside (from recorded shapes), achieved FLOP/s and its share of the peak. The share is against the peak
    measured in each op's own dtype (``flops_by_dtype``; ``device_probe.json``'s ``peaks``, falling back to its
    float32 ``peak_flops``): sum over dtypes of FLOPs / peak, over the time; ``peak_dtype``: the dtype with most
    FLOPs (a float16 UNet's share is of the float16 matmul peak). Device figures cover the
    ``recorded`` calls that lie within the trace (``--device-steps`` records a few steps only), and
    achieved FLOP/s is FLOPs over those calls' time (``recorded_ns``). ``device_flops_s`` and ``device_of_peak``: the
    same over the time of the kernels and copies they launched (``device_ns``): how fast the device ran the work,
    apart from the host time around it (a host-bound UNet: 0.3% of the peak over its span, 18% on the device).
    ``top_kernels``: device time per kernel/copy launched inside the span (ns)."""

    name: str
    count: int
    host_ns: int
    op_ns: int
    device_ns: int
    top_ops: list[tuple[str, int]] = field(default_factory=list)
    flops: float = 0.0
    achieved_flops_s: float = 0.0
    of_peak: float | None = None
    recorded: int = 0
    recorded_ns: int = 0
    top_kernels: list[tuple[str, int]] = field(default_factory=list)
    flops_by_dtype: dict[str, float] = field(default_factory=dict)
    peak_dtype: str | None = None
    device_flops_s: float = 0.0
    device_of_peak: float | None = None


@dataclass(slots=True)
class SyncSiteStat:
    """Sync sites of the run (spans with op "sync") grouped by kind and Python line: calls, total cost
    (ns), the traced spans they ran in."""

    kind: str
    where: str
    function: str
    count: int
    total_ns: int
    inside: list[str]


@dataclass(slots=True)
class RunDevice:
    """The run-aware device report: the trace's own summary (syncs attributed to spans and lines), per
    span device figures, and the sync-site inventory."""

    summary: DeviceSummary | None
    offset_ns: int | None
    spans: list[SpanDevice]
    sync_sites: list[SyncSiteStat]
    peak: dict | None = None
    compile: dict | None = None


def _innermost(spans: list[Span], tid: int, t: int, ops: tuple[str, ...] | None = None) -> Span | None:
    best = None
    for s in spans:
        if s.thread_id == tid and s.start_ns <= t < s.end_ns and (ops is None or s.op in ops):
            if best is None or s.duration_ns < best.duration_ns:
                best = s
    return best


#: Which sync spans can cause a Kineto sync event (by the event's name).
_CAUSES = {"aten::item": (".item()", ".__bool__()", ".tolist()"), "aten::nonzero": (".nonzero()", "torch.nonzero"),
           "aten::tolist": (".tolist()",)}
_COPY_CAUSES = (".item()", ".__bool__()", ".tolist()", ".cpu()", ".numpy()")
#: How far (ns) a Kineto event may fall outside its sync span after rebasing (Kineto's CPU clock is
#: TSC-based and wanders by tens of us against perf_counter_ns between markers).
MATCH_TOLERANCE_NS = 300_000


def _sync_site(sync_spans: list[Span], tid: int, t: int, event_name: str) -> Span | None:
    """The sync span that most likely caused a Kineto sync event: same thread, a compatible kind, the
    nearest window within ``MATCH_TOLERANCE_NS``."""
    kinds = _CAUSES.get(event_name, _COPY_CAUSES)
    best, best_d = None, MATCH_TOLERANCE_NS + 1
    for s in sync_spans:
        if s.thread_id != tid or s.attrs.get("sync") not in kinds:
            continue
        d = 0 if s.start_ns <= t < s.end_ns else min(abs(t - s.start_ns), abs(t - s.end_ns))
        if d < best_d:
            best, best_d = s, d
    return best


def _where(s: Span) -> str:
    f = s.attrs.get("code.filepath")
    return f"{os.path.basename(f)}:{s.attrs.get('code.lineno')}" if f else "?"


def sync_sites(data: RunData) -> list[SyncSiteStat]:
    """The sync-site inventory from the run's sync spans (works without a device trace). ``data.spans``: Span
    objects or a ``SpanTable``; only the sync spans become objects."""
    t = as_table(data.spans)
    rows = np.flatnonzero(t.op_mask("sync"))
    if not len(rows):
        return []
    prow = t.parent_rows()
    sync = t.op_mask("sync")
    up = prow[rows]  # each sync span's nearest enclosing span that is not a sync span (-1: none)
    while True:
        more = (up >= 0) & sync[np.maximum(up, 0)]
        if not more.any():
            break
        up[more] = prow[up[more]]
    groups: dict[tuple, list[tuple[Span, int]]] = defaultdict(list)
    for s, u in zip(t.spans(rows), up.tolist()):
        groups[(s.attrs.get("sync", s.name), _where(s), s.attrs.get("code.function", "?"))].append((s, u))
    out = []
    for (kind, where, fn), members in groups.items():
        inside: dict[str, None] = {}
        for m, u in members:
            if u >= 0:
                inside[t.names[int(t.name[u])]] = None
        out.append(SyncSiteStat(kind, where, fn, len(members), sum(m.duration_ns for m, _ in members), list(inside)))
    out.sort(key=lambda x: -x.total_ns)
    return out


def run_device(data: RunData, trace: KinetoTrace | None, peak: dict | None = None, compile: dict | None = None) -> RunDevice:
    """Join a run with its device trace (None: only the sync-site inventory), the measured peak
    (``device_probe.json``) and the compile report. ``data.spans``: Span objects or a ``SpanTable``: per span
    name counts and host time are computed on the columns; only the spans that overlap the trace's window (a
    few steps: what the device trace recorded) become objects, however long the run."""
    sites = sync_sites(data)
    if trace is None:
        return RunDevice(None, None, [], sites, peak, compile)
    summary = summarize_device(trace)
    cmap = clock_map(trace)
    prof = data.profile
    by_native = prof.all_native()
    t = as_table(data.spans)
    work = ~t.op_mask("transaction")
    is_sync = t.op_mask("sync")
    t_lo = int(trace.ts.min()) if len(trace) else 0  # calls outside the recorded window are not counted
    t_hi = int(trace.end.max()) if len(trace) else 0
    r_lo, r_hi = (int(cmap.to_run(t_lo)), int(cmap.to_run(t_hi))) if len(trace) else (0, -1)
    near = work & (t.end >= r_lo - MATCH_TOLERANCE_NS) & (t.start <= r_hi + MATCH_TOLERANCE_NS)
    sync_spans = t.spans(np.flatnonzero(near & is_sync))  # (table order: start, then id, as the store's reader gives them)
    plain = t.spans(np.flatnonzero(near & ~is_sync))
    for sp in summary.syncs:
        tid = by_native.get(sp.tid)
        t_run = int(cmap.to_run(sp.ts_ns))
        if tid is None:
            continue
        enclosing = _innermost(plain, tid, t_run)
        if enclosing is not None:
            sp.annotation = enclosing.name
        site = _sync_site(sync_spans, tid, t_run, sp.name)
        if site is not None and sp.python is None:
            sp.python = f"{_where(site)}: {site.attrs.get('code.function', '?')}"
    # per span name: time in top-level host ops and device activity launched inside
    cpu = np.nonzero(trace.mask("cpu_op"))[0]
    dev = np.nonzero(np.isin(trace.cat, [CAT["kernel"], CAT["gpu_memcpy"], CAT["gpu_memset"]]))[0]
    rt = np.nonzero(trace.mask("cuda_runtime", "cuda_driver") & (trace.correlation >= 0))[0]
    launch = dict(zip(trace.correlation[rt].tolist(), zip(trace.ts[rt].tolist(), trace.tid[rt].tolist())))
    dev_launch_ts = np.array([launch.get(int(c), (-1, -1))[0] for c in trace.correlation[dev]], dtype=np.int64)
    dev_launch_tid = np.array([launch.get(int(c), (-1, -1))[1] for c in trace.correlation[dev]], dtype=np.int64)
    self_ns = dict(zip(cpu.tolist(), self_times(trace, cpu).tolist()))
    flops = trace_flops(trace)[cpu]
    dtypes = [op_dtype(trace.args[int(i)]) if f else None for i, f in zip(cpu.tolist(), flops.tolist())]
    per: dict[str, SpanDevice] = {}
    rows = np.flatnonzero(work & ~is_sync)  # every call, per name: count and host time on the columns
    codes = t.name[rows]
    uniq, first, inv, counts = np.unique(codes, return_index=True, return_inverse=True, return_counts=True)
    host = np.zeros(len(uniq), np.int64)
    np.add.at(host, inv, t.dur[rows])
    for k in np.argsort(first, kind="stable").tolist():  # names in the order of their first call
        name = t.names[int(uniq[k])]
        per[name] = SpanDevice(name, int(counts[k]), int(host[k]), 0, 0)
    op_acc: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    kern_acc: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in plain:
        ktid = prof.native_at(s.thread_id, s.start_ns)
        a, b = int(cmap.to_trace(s.start_ns)), int(cmap.to_trace(s.end_ns))
        sd = per[s.name]
        if ktid is None or a < t_lo or b > t_hi:
            continue
        sd.recorded += 1
        sd.recorded_ns += s.duration_ns
        inside = cpu[(trace.tid[cpu] == ktid) & (trace.ts[cpu] >= a) & (trace.ts[cpu] < b)]
        sd.op_ns += int(_top_level_ns(trace, inside))
        for i in inside.tolist():
            op_acc[s.name][trace.name_of(i)] += int(self_ns.get(i, 0))
        if len(inside):
            pos = np.searchsorted(cpu, inside)
            sd.flops += float(flops[pos].sum())
            for p in pos[flops[pos] > 0].tolist():
                d = dtypes[p] or "float32"
                sd.flops_by_dtype[d] = sd.flops_by_dtype.get(d, 0.0) + float(flops[p])
        m = (dev_launch_tid == ktid) & (dev_launch_ts >= a) & (dev_launch_ts < b)
        sd.device_ns += int(trace.dur[dev[m]].sum())
        for i in dev[m].tolist():
            kern_acc[s.name][trace.name_of(i)] += int(trace.dur[i])
    peak_flops = (peak or {}).get("peak_flops")
    peaks = (peak or {}).get("peaks") or {}
    for name, sd in per.items():
        sd.top_ops = sorted(op_acc[name].items(), key=lambda kv: -kv[1])[:5]
        sd.top_kernels = sorted(kern_acc[name].items(), key=lambda kv: -kv[1])[:5]
        sd.achieved_flops_s = sd.flops / (sd.recorded_ns / 1e9) if sd.recorded_ns else 0.0
        sd.peak_dtype = max(sd.flops_by_dtype, key=sd.flops_by_dtype.get) if sd.flops_by_dtype else None
        sd.device_flops_s = sd.flops / (sd.device_ns / 1e9) if sd.device_ns else 0.0
        need = [(f, peaks.get(d) or peak_flops) for d, f in sd.flops_by_dtype.items()]
        if sd.recorded_ns and need and all(p for _, p in need):  # seconds the ops would take at their peaks
            at_peak = sum(f / p for f, p in need)
            sd.of_peak = at_peak / (sd.recorded_ns / 1e9)
            sd.device_of_peak = at_peak / (sd.device_ns / 1e9) if sd.device_ns else None
        else:
            sd.of_peak = sd.achieved_flops_s / peak_flops if peak_flops else None
            sd.device_of_peak = sd.device_flops_s / peak_flops if peak_flops and sd.device_ns else None
    return RunDevice(summary, int(np.median(cmap.offset)), sorted(per.values(), key=lambda x: -x.host_ns), sites, peak,
                     compile)


def _top_level_ns(trace: KinetoTrace, idx: np.ndarray) -> int:
    if not len(idx):
        return 0
    ts, end = trace.ts[idx], trace.ts[idx] + trace.dur[idx]
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], end[order]
    total, cur_end = 0, -1
    for a, b in zip(ts.tolist(), end.tolist()):
        if a >= cur_end:
            total += b - a
            cur_end = b
        elif b > cur_end:
            total += b - cur_end
            cur_end = b
    return total


__all__ = ["AlignError", "ClockMap", "RunDevice", "SpanDevice", "SyncPoint", "SyncSiteStat", "clock_map", "clock_map_from", "run_device",
           "sync_sites"]
