"""The one device view of a recorded run, which ``stepscope device``, the HTML report and the web UI's pages
all show: the Kineto trace joined with the run (``runview.run_device``: idle gaps, syncs with their span and
Python line, per-span device figures, the sync-site inventory), the device probe's matmul peaks
(``DEVICE_PROBE``), the torch.compile report (``COMPILE_REPORT``) and the run's PyTorch/XLA trace joined with
it (``xla_run.run_xla``: compilations, executions, transfers per step and span, metrics per step).

Every file is read through ``Store.run_file(run_id, NAME)``; a file that is there but cannot be read is one
line (``TraceError``, ``AlignError``), the same line wherever the view is shown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.model import RunData
from ..core.jsondepth import small_json
from ..store.db import COMPILE_REPORT, DEVICE_PROBE, DEVICE_TRACE, XLA_METRICS, XLA_TRACE_DIR
from .kineto import TraceError

if TYPE_CHECKING:
    from .kineto import KinetoTrace
    from .runview import ClockMap, RunDevice
    from .xla import XlaSummary

#: rows kept of the XLA analysis's ranked tables (transfer sites, idle gaps) by default: the CLI keeps
#: ``max(--top, XLA_TOP)``
XLA_TOP = 20

#: the run's files the device view reads (``Store.run_file`` names), in the order they are read
DEVICE_FILES = (DEVICE_TRACE, DEVICE_PROBE, COMPILE_REPORT, XLA_TRACE_DIR, XLA_METRICS)


@dataclass(slots=True)
class DeviceView:
    """A run's device facts. ``kineto``: the Kineto join (``summary`` None without a Kineto trace; its
    ``sync_sites`` from the run's sync spans, its ``peak``: the probe's document, its ``compile``: the compile
    report, each None when the run has none); ``trace`` and ``clock``: the Kineto trace and its run clock ->
    trace time map (None without a trace), for the device lanes; ``xla``: the XLA trace's analysis joined with
    the run (None without an XLA trace)."""

    run_id: str
    kineto: RunDevice
    trace: KinetoTrace | None
    clock: ClockMap | None
    xla: XlaSummary | None
    #: the job's processes that recorded a Kineto trace of their own (``--device-trace`` in every rank), in start
    #: order: ``ProcessTrace``s; [] for a run of one process
    processes: list["ProcessTrace"] = field(default_factory=list)

    @property
    def peak(self) -> dict | None:
        """The device probe (``device_probe.json``): ``name``, ``peak_flops`` (float32, FLOP/s), ``peaks``
        (dtype -> FLOP/s)...; None without one."""
        return self.kineto.peak

    @property
    def compile(self) -> dict | None:
        """The compile report: ``{"graph_breaks": [...], "recompiles": [...]}``; None without one."""
        return self.kineto.compile

    @property
    def empty(self) -> bool:
        """Nothing to show: no Kineto or XLA trace, no sync sites, no compile report."""
        k = self.kineto
        return (self.xla is None and k.summary is None and not k.sync_sites and k.compile is None
                and not self.processes)


@dataclass(slots=True)
class ProcessTrace:
    """One process of a job with its own Kineto trace: ``label`` (``rank N (pid P)`` or the command), ``rank`` (None:
    not a rank), ``trace`` and ``clock`` (its trace time <-> the run's clock: one host, one monotonic clock)."""

    run_id: str
    label: str
    rank: int | None
    trace: KinetoTrace
    clock: ClockMap


def process_traces(store, data: RunData) -> list[ProcessTrace]:
    """The job's process runs that recorded a Kineto trace, loaded and aligned, in start order ([] for one process).
    Raises TraceError / AlignError (one line) for a trace that cannot be read or aligned."""
    from ..store.jobjoin import process_label
    from .kineto import load
    from .runview import clock_map

    out = []
    for r in data.processes:
        f = store.run_file(r.id, DEVICE_TRACE)
        if f.is_file():
            trace = load(f)
            out.append(ProcessTrace(r.id, process_label(r), (r.process or {}).get("rank"), trace, clock_map(trace)))
    return out


def run_trace(store, run_id: str) -> KinetoTrace | None:
    """The run's Kineto trace (``DEVICE_TRACE``), None when it has none. Raises TraceError (one line) for a
    file that cannot be read."""
    p = store.run_file(run_id, DEVICE_TRACE)
    if not p.exists():
        return None
    from .kineto import load

    return load(p)


def _small_doc(store, run_id: str, name: str) -> dict | None:
    f = store.run_file(run_id, name)
    if not f.exists():
        return None
    try:
        return small_json(f.read_bytes(), str(f))
    except ValueError as e:  # not JSON, nested too deeply: the file's one line
        raise TraceError(str(e)) from None


def device_view(store, run_id: str, data: RunData, top: int = XLA_TOP) -> DeviceView:
    """Assemble run ``run_id``'s device view (``data``: the run, ``store.reader.load_run``; its spans as
    columns: only those the device trace covers become objects). ``top``: rows of the XLA analysis's ranked
    tables. Raises TraceError for a run file that cannot be read and AlignError for a trace without
    stepscope's clock markers (one line each); the first met, in this order: the Kineto trace read, the probe,
    the compile report, the XLA capture (read, then aligned) with its metrics, the Kineto trace aligned."""
    from .runview import clock_map, run_device

    trace = run_trace(store, run_id)
    peak = _small_doc(store, run_id, DEVICE_PROBE)
    compile_report = _small_doc(store, run_id, COMPILE_REPORT)
    xla = None
    xla_trace = store.run_file(run_id, XLA_TRACE_DIR)
    if xla_trace.is_dir():
        from .xla_run import run_xla

        xla = run_xla(data, xla_trace, store.run_file(run_id, XLA_METRICS), top=top)
    kineto = run_device(data, trace, peak=peak, compile=compile_report)
    return DeviceView(run_id, kineto, trace, clock_map(trace) if trace is not None else None, xla,
                      process_traces(store, data))


def files_state(store, run_id: str) -> tuple[int, ...]:
    """The modification times (ns, 0 when missing) of the run's device files, the XLA capture's folders and the
    job's processes' traces included: changes whenever the device view would (for a cache key)."""
    out = []
    for name in DEVICE_FILES:
        p = store.run_file(run_id, name)
        try:
            t = p.stat().st_mtime_ns
        except OSError:
            t = 0
        if name == XLA_TRACE_DIR and t:
            for root, dirs, _ in os.walk(p):  # a capture adds plugins/profile/<time>/ below the folder
                for d in dirs:
                    try:
                        t = max(t, os.stat(os.path.join(root, d)).st_mtime_ns)
                    except OSError:
                        pass
        out.append(t)
    for r in store.process_runs(run_id):  # the job's ranks' traces
        try:
            out.append(store.run_file(r.id, DEVICE_TRACE).stat().st_mtime_ns)
        except OSError:
            out.append(0)
    return tuple(out)
