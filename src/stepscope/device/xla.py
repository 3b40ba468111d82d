"""PyTorch/XLA profiler traces: graph compilations, graph executions, transfers and device idle gaps, per
step and per span.

Format: the trace-viewer JSON that the XLA profiler writes (read into columns by ``device.xla_load``).
Times here are int64 **ns**; a run joined with its trace: ``device.xla_run``.

What is read from it (the ``TraceMe`` names of torch_xla's runtime, 2.x):

- a *graph compilation*: ``XLAGraphExecutor::Compile`` (``args.graph_hash``), or
  ``PjRtComputationClient::Compile`` in traces without it; only compilations that missed the cache are
  recorded;
- a *graph execution*: ``*ComputationClient::ExecuteComputation`` / ``ExecuteReplicated``, which runs
  on a runtime thread; it is *launched* by the host thread's last ``ScheduleSyncTensorsGraph`` before it.
  Launched inside a ``StepMarker`` (``torch_xla.sync()``, ``xm.mark_step()``) it is the step's graph;
  launched elsewhere, a tensor read (``.item()``, ``.nonzero()``, ``if tensor:``, ``.cpu()``) cut the
  graph to get a value: the guide's "graph broken into smaller parts";
- transfers: ``*ComputationClient::TransferFromDevice`` / ``TransferToDevice`` on the host thread;
- device activity: on a TPU/GPU trace the ``/device:...`` processes (their ``XLA Ops`` thread when there
  is one); on XLA:CPU the HLO op events (``args.hlo_op``). Idle gaps are measured on their union.

*Steps*: for a stepscope run, the denoising steps (spans with ``diffusion.step``), each ending with the
first step marker after its last span; for a bare trace, the intervals that end with each ``StepMarker``
on the host thread that has the most of them. *Spans*: the run's spans (rebased onto the trace through
the ``stepscope.clock_sync`` markers, ``record.device.xla_capture``); in a bare trace, the ``xp.Trace`` labels
(host ranges outside torch_xla's own, which are told apart by name and by not lying inside one of
torch_xla's).

Recompilations: compilations in any step after the first one of its pipeline call (the graph of a
steady loop is compiled once and then found in the cache; a new shape or a value baked into the graph
compiles again).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..record.device.capture import MARKER
from .xla_load import XlaTrace

COMPILE = "XLAGraphExecutor::Compile"
COMPILE_FALLBACK = "PjRtComputationClient::Compile"
STEP_MARKER = "StepMarker"
LAUNCH = "ScheduleSyncTensorsGraph"
_EXECUTE = re.compile(r"ComputationClient::Execute(Computation|Replicated)$")
_FROM = re.compile(r"ComputationClient::TransferFromDevice$")
_TO = re.compile(r"ComputationClient::TransferToDevice$")
#: torch_xla's own host ranges (not user labels) besides any name with "::".
INTERNAL = {"StepMarker", "SyncTensorsGraph", "SyncTensorsGraphInternal", "SyncLiveTensorsGraph",
            "ScheduleSyncTensorsGraph", "TensorCollectionBarrier", "CollectSyncTensors", "ExtractIRAndPrepareXlaData_",
            "RunPostOrder", "SetTensorData", "Wait for donation holds", "Wait for usage holds", "D2H Dispatch",
            "H2D Dispatch", "SplitModule", "Codegen", "TensorsGraphInfo", "XlaDataToTensors", "GetTensors",
            "DeviceData", "InitXlaBackend", "ReplicateShardedData"}
#: Gaps shorter than this (ns) are not listed.
MIN_GAP_NS = 1_000
#: A metrics reading up to this long (ns) after a step's end (and before the next step) counts for it.
SNAPSHOT_GRACE_NS = 50_000_000


@dataclass(slots=True)
class Transfer:
    """One transfer: ``direction`` "from device"/"to device", host time ``ts_ns`` (trace clock), ``cost_ns``
    (the transfer call), the host ``tid``; the step and span it ran in, and, when a sync site of the run
    encloses it, its ``kind`` (".item()", ".nonzero()", ".__bool__()"...), line ``where`` ("file.py:123"),
    ``function`` and ``wait_ns`` (the whole call: the graph it compiled and ran, and the copy)."""

    direction: str
    ts_ns: int
    cost_ns: int
    tid: int
    step: str | None = None
    span: str | None = None
    kind: str | None = None
    where: str | None = None
    function: str | None = None
    wait_ns: int | None = None


@dataclass(slots=True)
class TransferSite:
    """Transfers grouped by direction and cause (sync kind + Python line, or the span when none):
    ``count``, ``cost_ns`` (transfer calls), ``wait_ns`` (the sync calls around them, when known),
    the steps and spans they ran in."""

    direction: str
    kind: str | None
    where: str | None
    function: str | None
    count: int
    cost_ns: int
    wait_ns: int
    steps: list[str]
    inside: list[str]


@dataclass(slots=True)
class Figures:
    """Counts and times (ns) of one step, one span name or the whole trace. ``compiles``/``compile_ns``:
    graph compilations; ``executions``/``execute_ns``: graph executions launched there, of which ``reads``
    were cut by a tensor read (not a step marker); ``from_device``/``to_device`` with ``*_ns``: transfers;
    ``host_ns``: wall time not covered by a graph execution (the host tracing, compiling, waiting);
    ``wall_ns``: the window (a step) or the calls' total (a span)."""

    compiles: int = 0
    compile_ns: int = 0
    executions: int = 0
    execute_ns: int = 0
    reads: int = 0
    from_device: int = 0
    from_device_ns: int = 0
    to_device: int = 0
    to_device_ns: int = 0
    host_ns: int = 0
    wall_ns: int = 0


@dataclass(slots=True)
class StepFigures:
    """One step: ``label`` ("0", "1"... for denoising steps; "sync 3" for a bare trace's intervals;
    "outside steps" for what ran in none), its window (trace clock, ns), figures, the torch_xla metrics
    counters' changes during it (``metrics``: name -> change; ``*Time`` in ns, ``*Data`` in bytes), and
    ``recompiles``: compilations in a step after the first of its pipeline call."""

    label: str
    start_ns: int
    end_ns: int
    figures: Figures
    metrics: dict[str, float] = field(default_factory=dict)
    recompiles: int = 0


@dataclass(slots=True)
class SpanFigures:
    """One span name (or ``xp.Trace`` label): calls, host time (ns) and the figures inside its calls."""

    name: str
    calls: int
    figures: Figures


@dataclass(slots=True)
class IdleGap:
    """An idle interval (ns, trace clock) on a device lane before its next activity, with the host span
    (or label) and step running when it began."""

    lane: str
    start_ns: int
    end_ns: int
    span: str | None
    step: str | None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(slots=True)
class Lane:
    """A device lane: activities, busy and idle time between its first start and last end (ns)."""

    lane: str
    activities: int
    span_ns: int
    busy_ns: int
    idle_ns: int


@dataclass(slots=True)
class XlaSummary:
    """What ``stepscope device`` reports for a PyTorch/XLA trace (a run's, or a bare capture)."""

    path: str
    hosts: int
    events: int
    span_ns: int
    total: Figures
    graphs: int
    recompiles: int
    step_source: str
    steps: list[StepFigures]
    spans: list[SpanFigures]
    transfers: list[TransferSite]
    lanes: list[Lane]
    gaps: list[IdleGap]
    unmirrored: dict[str, str] = field(default_factory=dict)
    metrics_error: str | None = None


@dataclass(slots=True)
class HostSpan:
    """A host range to attribute events to: name, trace-clock window (ns), trace thread, an optional
    denoising step, and sync-site details (``sync`` kind, ``where``, ``function``) when it is one."""

    name: str
    start: int
    end: int
    tid: int | None
    step: int | None = None
    sync: str | None = None
    where: str | None = None
    function: str | None = None
    scope: bool = False  # a pipeline call (its denoising steps restart at 0)


class _SpanIndex:
    """Host spans per trace thread, sorted by start, for "which spans enclose time t" queries."""

    def __init__(self, spans: list[HostSpan]) -> None:
        by: dict = defaultdict(list)
        for s in spans:
            by[s.tid].append(s)
        self.by: dict = {}
        for tid, ss in by.items():
            ss.sort(key=lambda s: s.start)
            self.by[tid] = (ss, np.array([s.start for s in ss], np.int64), np.array([s.end for s in ss], np.int64))

    def enclosing(self, tid, t: int) -> list[HostSpan]:
        got = self.by.get(tid)
        if got is None:
            return []
        ss, starts, ends = got
        k = int(np.searchsorted(starts, t, "right"))
        return [ss[i] for i in np.nonzero(ends[:k] > t)[0].tolist()]

    def innermost(self, tid, t: int) -> HostSpan | None:
        hit = self.enclosing(tid, t)
        return min(hit, key=lambda s: s.end - s.start) if hit else None


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _covered(union: list[tuple[int, int]], a: int, b: int) -> int:
    return sum(max(0, min(b, y) - max(a, x)) for x, y in union if x < b and y > a)


def _internal(name: str) -> bool:
    return "::" in name or name in INTERNAL or name.startswith(MARKER)


class _Events:
    """The torch_xla events of a trace, classified once."""

    def __init__(self, tr: XlaTrace) -> None:
        self.tr = tr
        names = tr.names
        has_exec_compile = COMPILE in names
        self.compiles = tr.where(lambda n: n == (COMPILE if has_exec_compile else COMPILE_FALLBACK))
        self.execs = tr.where(lambda n: bool(_EXECUTE.search(n)))
        self.froms = tr.where(lambda n: bool(_FROM.search(n)))
        self.tos = tr.where(lambda n: bool(_TO.search(n)))
        self.markers = tr.where(lambda n: n == STEP_MARKER)
        self.launches = tr.where(lambda n: n == LAUNCH)
        ts = tr.ts
        # each execution's launch: the last ScheduleSyncTensorsGraph that started before it
        lts = ts[self.launches]
        pos = np.searchsorted(lts, ts[self.execs], "right") - 1
        self.exec_launch_ts = np.where(pos >= 0, lts[np.maximum(pos, 0)], ts[self.execs]) if len(lts) else ts[self.execs]
        self.exec_launch_tid = (np.where(pos >= 0, tr.tid[self.launches][np.maximum(pos, 0)], tr.tid[self.execs])
                                if len(lts) else tr.tid[self.execs])
        # launched inside a step marker on its thread: the step's graph; else cut by a read
        by_tid: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for i in self.markers.tolist():
            by_tid[int(tr.tid[i])].append((int(ts[i]), int(ts[i] + tr.dur[i])))
        self.marker_windows = by_tid
        self.exec_read = np.array([not any(a <= t < b for a, b in by_tid.get(int(tid), ()))
                                   for t, tid in zip(self.exec_launch_ts.tolist(), self.exec_launch_tid.tolist())], bool)
        self.exec_union = _union([(int(ts[i]), int(ts[i] + tr.dur[i])) for i in self.execs.tolist()])


def device_lanes(tr: XlaTrace) -> dict[str, np.ndarray]:
    """Device activity per lane: each ``/device:`` process (its "XLA Ops" thread when it has one), and
    XLA:CPU's HLO op events (``args.hlo_op``) as one lane. Event indices, by lane name."""
    lanes: dict[str, np.ndarray] = {}
    for pid, pname in sorted(tr.processes.items()):
        if not pname.startswith("/device:"):
            continue
        sel = np.nonzero(tr.pid == pid)[0]
        ops = [t for (p, t), n in tr.threads.items() if p == pid and n == "XLA Ops"]
        if ops:
            sel = sel[np.isin(tr.tid[sel], ops)]
        if len(sel):
            lanes[pname] = sel
    hlo = np.array([i for i, a in enumerate(tr.args) if "hlo_op" in a], np.int64)
    if len(hlo):
        lanes["XLA:CPU (HLO ops)"] = hlo
    return lanes


def _gaps(tr: XlaTrace, lanes: dict[str, np.ndarray], top: int) -> tuple[list[Lane], list[IdleGap]]:
    out_lanes, gaps = [], []
    for lane, idx in lanes.items():
        u = _union([(int(tr.ts[i]), int(tr.ts[i] + tr.dur[i])) for i in idx.tolist()])
        if not u:
            continue
        busy = sum(b - a for a, b in u)
        span = u[-1][1] - u[0][0]
        out_lanes.append(Lane(lane, len(idx), span, busy, span - busy))
        gaps.extend(IdleGap(lane, a[1], b[0], None, None) for a, b in zip(u, u[1:]) if b[0] - a[1] >= MIN_GAP_NS)
    gaps.sort(key=lambda g: -g.duration_ns)
    return out_lanes, gaps[:top]


def label_spans(tr: XlaTrace, ev: _Events) -> list[HostSpan]:
    """The ``xp.Trace`` labels of a bare trace: host ranges on threads that run step markers or launches,
    not torch_xla's own and not inside one of torch_xla's."""
    host_tids = {int(t) for t in tr.tid[ev.markers]} | {int(t) for t in tr.tid[ev.launches]}
    out = []
    for tid in host_tids:
        sel = np.nonzero(tr.tid == tid)[0]
        sel = sel[np.lexsort((-tr.dur[sel], tr.ts[sel]))]
        internal_end = -1
        for i in sel.tolist():
            n = tr.name_of(i)
            a, b = int(tr.ts[i]), int(tr.ts[i] + tr.dur[i])
            if _internal(n):
                internal_end = max(internal_end, b)
                continue
            if a < internal_end:
                continue
            out.append(HostSpan(n, a, b, tid))
    return out


def analyze(tr: XlaTrace, spans: list[HostSpan] | None = None, snapshots: list[dict] | None = None,
            to_trace=None, top: int = 20, unmirrored: dict | None = None, metrics_error: str | None = None
            ) -> XlaSummary:
    """The whole analysis. ``spans``: the run's spans on the trace clock (None: a bare trace, whose
    ``xp.Trace`` labels stand in); ``snapshots``: torch_xla metrics readings (``xla_metrics.json``) with
    ``to_trace`` mapping their run-clock times onto the trace clock."""
    ev = _Events(tr)
    bare = spans is None
    if bare:
        spans = label_spans(tr, ev)
    windows, source = _windows(tr, ev, spans, bare)
    starts = [w[1] for w in windows]

    def step_at(t: int) -> int | None:
        k = int(np.searchsorted(starts, t, "right")) - 1
        return k if k >= 0 and windows[k][1] <= t < windows[k][2] else None

    plain = [s for s in spans if s.sync is None]
    syncs = [s for s in spans if s.sync is not None]
    spans_at = _SpanIndex(plain)
    syncs_at = _SpanIndex(syncs)

    step_figs = [Figures() for _ in windows]
    outside = Figures()
    total = Figures()
    span_figs: dict[str, Figures] = defaultdict(Figures)

    def add(kind: str, t: int, tid: int, dur: int, read: bool = False) -> None:
        k = step_at(t)
        targets = [total, step_figs[k] if k is not None else outside]
        for name in {s.name for s in spans_at.enclosing(tid, t)}:
            targets.append(span_figs[name])
        for f in targets:
            if kind == "compile":
                f.compiles += 1
                f.compile_ns += dur
            elif kind == "execute":
                f.executions += 1
                f.execute_ns += dur
                f.reads += int(read)
            elif kind == "from":
                f.from_device += 1
                f.from_device_ns += dur
            else:
                f.to_device += 1
                f.to_device_ns += dur

    ts, dur, tid = tr.ts, tr.dur, tr.tid
    for i in ev.compiles.tolist():
        add("compile", int(ts[i]), int(tid[i]), int(dur[i]))
    for n, i in enumerate(ev.execs.tolist()):
        add("execute", int(ev.exec_launch_ts[n]), int(ev.exec_launch_tid[n]), int(dur[i]), bool(ev.exec_read[n]))
    transfers: list[Transfer] = []
    for direction, idx in (("from device", ev.froms), ("to device", ev.tos)):
        for i in idx.tolist():
            t, th, d = int(ts[i]), int(tid[i]), int(dur[i])
            add("from" if direction == "from device" else "to", t, th, d)
            k = step_at(t)
            sp = spans_at.innermost(th, t)
            site = syncs_at.innermost(th, t)
            x = Transfer(direction, t, d, th, windows[k][0] if k is not None else None, sp.name if sp else None)
            if site is not None:
                x.kind, x.where, x.function, x.wait_ns = site.sync, site.where, site.function, site.end - site.start
            transfers.append(x)
    # wall and host time of steps and spans
    for k, (_, a, b, _) in enumerate(windows):
        step_figs[k].wall_ns = b - a
        step_figs[k].host_ns = (b - a) - _covered(ev.exec_union, a, b)
    calls: dict[str, int] = defaultdict(int)
    for s in plain:
        calls[s.name] += 1
        f = span_figs[s.name]
        f.wall_ns += s.end - s.start
        f.host_ns += (s.end - s.start) - _covered(ev.exec_union, s.start, s.end)
    span_ns = int((ts + dur).max() - ts.min()) if len(tr) else 0
    total.wall_ns = span_ns
    total.host_ns = span_ns - _covered(ev.exec_union, int(ts.min()) if len(tr) else 0, int((ts + dur).max()) if len(tr) else 0)
    # recompilations: compilations in a step after the first of its pipeline call
    steps_out = []
    recompiles = 0
    for k, (label, a, b, first) in enumerate(windows):
        rc = 0 if first else step_figs[k].compiles
        recompiles += rc
        steps_out.append(StepFigures(label, a, b, step_figs[k], recompiles=rc))
    if outside.compiles or outside.executions or outside.from_device or outside.to_device:
        steps_out.append(StepFigures("outside steps", 0, 0, outside))
    if snapshots and to_trace is not None:
        _metrics_per_step(steps_out, snapshots, to_trace)
    lanes, gaps = _gaps(tr, device_lanes(tr), top)
    host_tid = _main_host_tid(tr, ev)
    for g in gaps:
        sp = spans_at.innermost(host_tid, g.start_ns) if host_tid is not None else None
        g.span = sp.name if sp else None
        k = step_at(g.start_ns)
        g.step = windows[k][0] if k is not None else None
    graphs = len({h for i in ev.compiles.tolist() if isinstance(h := tr.args[i].get("graph_hash"), (str, int, float))
                  and h})
    return XlaSummary(
        path=tr.path, hosts=len(tr.files), events=len(tr), span_ns=span_ns, total=total,
        graphs=graphs or len(ev.compiles), recompiles=recompiles, step_source=source, steps=steps_out,
        spans=sorted((SpanFigures(n, calls.get(n, 0), f) for n, f in span_figs.items() if n in calls),
                     key=lambda s: -s.figures.wall_ns),
        transfers=_sites(transfers), lanes=lanes, gaps=gaps, unmirrored=dict(unmirrored or {}),
        metrics_error=metrics_error)


def _main_host_tid(tr: XlaTrace, ev: _Events) -> int | None:
    tids = tr.tid[ev.markers] if len(ev.markers) else tr.tid[ev.launches]
    if not len(tids):
        return None
    vals, counts = np.unique(tids, return_counts=True)
    return int(vals[np.argmax(counts)])


def _windows(tr: XlaTrace, ev: _Events, spans: list[HostSpan], bare: bool
             ) -> tuple[list[tuple[str, int, int, bool]], str]:
    """Step windows ``(label, start, end, first of its call)``, in time order, and how they were found."""
    stepped = sorted((s for s in spans if s.step is not None and s.sync is None), key=lambda s: s.start)
    if not bare and stepped:
        scopes = sorted((s.start, s.end) for s in spans if s.scope)
        groups: dict[tuple, list[HostSpan]] = defaultdict(list)
        last_step: dict = {}
        call: dict = defaultdict(int)
        for s in stepped:  # a step index lower than the thread's last one starts a new pipeline call
            if s.step < last_step.get(s.tid, -1):
                call[s.tid] += 1
            last_step[s.tid] = s.step
            groups[(s.tid, call[s.tid], s.step)].append(s)
        keys = sorted(groups, key=lambda k: min(s.start for s in groups[k]))
        out = []
        for n, key in enumerate(keys):
            members = groups[key]
            a = min(s.start for s in members)
            last = max(s.end for s in members)
            b = last
            for a_m, b_m in sorted(ev.marker_windows.get(key[0], ())):  # the step marker that ends the step
                if a_m >= last:
                    b = b_m
                    break
            if n + 1 < len(keys):
                b = min(b, min(s.start for s in groups[keys[n + 1]]))
            scope = next((sc for sc in scopes if sc[0] <= a < sc[1]), None)
            if scope is not None:
                b = min(b, scope[1])
            first = n == 0 or keys[n - 1][:2] != key[:2]
            out.append((str(key[2]), a, max(b, a), first))
        return out, "denoising steps (diffusion.step)"
    main = _main_host_tid(tr, ev)
    marks = sorted(ev.marker_windows.get(main, ())) if main is not None else []
    out = []
    prev = int(tr.ts.min()) if len(tr) else 0
    for n, (_a, b) in enumerate(marks):
        out.append((f"sync {n + 1}", prev, b, n == 0))
        prev = b
    return out, "step markers (torch_xla.sync / xm.mark_step)"


def _metrics_per_step(steps: list[StepFigures], snapshots: list[dict], to_trace) -> None:
    snaps = sorted(snapshots, key=lambda s: s["t_ns"])
    at = np.asarray(to_trace(np.asarray([s["t_ns"] for s in snaps], np.int64)), np.int64)

    def reading(t: int) -> dict | None:
        k = int(np.searchsorted(at, t, "right")) - 1
        return snaps[k] if k >= 0 else None

    # a step's figures: the readings at its boundaries; a reading taken just after a step ends (the one after
    # its step marker returns) belongs to it, up to the next step's start or SNAPSHOT_GRACE_NS
    win = [st for st in steps if st.label != "outside steps"]
    bounds = [min(win[k + 1].start_ns, st.end_ns + SNAPSHOT_GRACE_NS) if k + 1 < len(win)
              else st.end_ns + SNAPSHOT_GRACE_NS for k, st in enumerate(win)]
    begins = [(int(t), s) for t, s in zip(at.tolist(), snaps) if str(s.get("label", "")).startswith("begin ")]
    for k, st in enumerate(win):
        # the reading taken as the step's first denoiser call began, else the last one before the step
        near = [(abs(t - st.start_ns), n) for n, (t, s) in enumerate(begins)
                if st.start_ns - 1_000_000 <= t <= st.start_ns + SNAPSHOT_GRACE_NS
                and (k == 0 or t >= win[k - 1].end_ns) and (k + 1 == len(win) or t < win[k + 1].start_ns)]
        a = begins[min(near)[1]][1] if near else reading(st.start_ns)
        b = reading(bounds[k])
        if a is None or b is None or a is b:
            continue
        d: dict[str, float] = {}
        for name, v in b["counters"].items():
            dv = v - a["counters"].get(name, 0)
            if dv:
                d[name] = dv
        for name, (cnt, acc) in b["metrics"].items():
            c0, a0 = a["metrics"].get(name, (0, 0.0))
            if cnt - c0:
                d[name + ".count"] = cnt - c0
                d[name] = acc - a0
        st.metrics = d


def _sites(transfers: list[Transfer]) -> list[TransferSite]:
    groups: dict[tuple, list[Transfer]] = defaultdict(list)
    for x in transfers:
        key = (x.direction, x.kind, x.where, x.function) if x.where else (x.direction, None, None, None, x.span)
        groups[key].append(x)
    out = []
    for key, xs in groups.items():
        steps = list(dict.fromkeys(x.step for x in xs if x.step is not None))
        inside = list(dict.fromkeys(x.span for x in xs if x.span))
        out.append(TransferSite(key[0], key[1], key[2], key[3], len(xs), sum(x.cost_ns for x in xs),
                                sum(x.wait_ns or 0 for x in xs), steps, inside))
    out.sort(key=lambda s: (s.direction != "from device", -(s.wait_ns or s.cost_ns)))
    return out
