"""Chrome Trace Event Format (JSON object form; loads in Perfetto and chrome://tracing).

Spans are complete events (``ph: "X"``) on their thread; sampled stacks become begin/end events
(``B``/``E``) on a companion track per thread (``<thread> (samples)``), emitted where consecutive
samples' stacks differ, as py-spy's chrometrace output does. Each process of a job (``export.procs``) is a
process of its own: its OS pid, a ``process_name`` (``rank N``, or its command) and its threads under their own
names, as Kineto's per-rank traces are. ``ts``/``dur`` are microseconds from the
run's start; ``otherData`` carries the run's wall-clock start (ns since the Unix epoch).
Spec: "Trace Event Format", Google, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

import numpy as np
import orjson

from ... import __version__
from ...core.spantable import NO_PARENT, as_table
from ...core.model import RunData
from ...analysis.calltree import ProfileIndex
from .procs import ThreadProcesses

SAMPLE_TID_OFFSET = 100_000


def to_chrome_trace(data: RunData, index: ProfileIndex | None = None, device=None) -> dict[str, Any]:
    """The run as a Chrome trace document (a dict ready for JSON; ``write_chrome_trace`` streams the same
    document to a file without holding it).

    ``device``: the run's ``(KinetoTrace, ClockMap)``; its events are added on the run's clock, as
    processes of their own ("torch profiler: host", "torch profiler: GPU n").
    """
    buf = io.BytesIO()
    write_chrome_trace(data, buf, index, device)
    return orjson.loads(buf.getvalue())


_CHUNK = 8192


def write_chrome_trace(data: RunData, out: BinaryIO, index: ProfileIndex | None = None, device=None) -> int:
    """Write the run's Chrome trace document (``to_chrome_trace``) to the binary file ``out`` as it is made:
    spans are read from the columns a chunk at a time, so memory stays bounded whatever the run. Returns the
    bytes written."""
    index = index or ProfileIndex(data.profile)
    run = data.run
    t0 = run.start_ns
    procs = ThreadProcesses(data)
    pids: dict[int, int] = {}  # thread -> its process's pid
    tids: dict[int, int] = {}
    written = 0

    def tid_of(t: int) -> int:
        if t not in tids:
            tids[t] = len(tids) + 1
            pids[t] = procs.process_of(t).pid
        return tids[t]

    def emit(events: list[dict], first: bool = False) -> None:
        nonlocal written
        if not events:
            return
        blob = (b"" if first else b",") + orjson.dumps(events)[1:-1]
        out.write(blob)
        written += len(blob)

    head = b'{"traceEvents":['
    out.write(head)
    written += len(head)
    emit([e for p in procs.processes for e in (
        {"ph": "M", "name": "process_name", "pid": p.pid, "tid": 0, "args": {"name": p.name}},
        {"ph": "M", "name": "process_sort_index", "pid": p.pid, "tid": 0, "args": {"sort_index": p.index}})],
        first=True)
    t = as_table(data.spans)
    short = [n.rsplit(".", 2)[-2] + "." + n.rsplit(".", 1)[-1] if n.count(".") >= 2 else n for n in t.names]
    for lo in range(0, len(t), _CHUNK):
        rows = np.arange(lo, min(len(t), lo + _CHUNK))
        ev = []
        for r, sid, par, nm, op, st, du, th, er in zip(
                rows.tolist(), t.id[rows].tolist(), t.parent[rows].tolist(), t.name[rows].tolist(), t.op[rows].tolist(),
                ((t.start[rows] - t0) / 1e3).tolist(), (t.dur[rows] / 1e3).tolist(), t.thread[rows].tolist(),
                t.error[rows].tolist()):
            args: dict[str, Any] = {"name": t.names[nm], "span_id": sid}
            if par != NO_PARENT:
                args["parent_id"] = par
            a = t.attrs.get(r) if t.attrs else None
            if a:
                args.update(a)
            if er >= 0:
                args["error"] = t.errors[er]
            tid = tid_of(th)
            ev.append({"ph": "X", "name": short[nm], "cat": t.ops[op], "pid": pids[th], "tid": tid, "ts": st,
                       "dur": du, "args": args})
        emit(ev)
    funcs = index.functions
    for thread in np.unique(index.thread).tolist():
        tid = SAMPLE_TID_OFFSET + tid_of(thread)
        pid = pids[thread]
        idx = np.nonzero(index.thread == thread)[0]
        prev: tuple = ()
        last_t = 0.0
        ev = []
        for i in idx.tolist():
            ts = (int(index.t[i]) - t0) / 1e3
            stack = index.stack_funcs[int(index.stack[i])]
            k = 0
            while k < len(prev) and k < len(stack) and prev[k] == stack[k]:
                k += 1
            for fid in reversed(prev[k:]):
                ev.append({"ph": "E", "pid": pid, "tid": tid, "ts": ts})
            for fid in stack[k:]:
                f = funcs[fid]
                ev.append({"ph": "B", "name": f.name, "cat": "sample", "pid": pid, "tid": tid, "ts": ts,
                           "args": {"file": f.file, "line": f.line}})
            prev, last_t = stack, ts
            if len(ev) >= _CHUNK:
                emit(ev)
                ev = []
        end = last_t + (1e6 / data.profile.hz if data.profile.hz else 0)
        for _ in prev:
            ev.append({"ph": "E", "pid": pid, "tid": tid, "ts": end})
        emit(ev)
    ev = []
    for thread, tid in list(tids.items()):
        nm, pid = procs.thread_name(thread), pids[thread]
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": nm}})
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": SAMPLE_TID_OFFSET + tid, "args": {"name": f"{nm} (samples)"}})
    emit(ev)
    if device is not None:
        emit(_device_events(*device, t0))
    tail = b'],"displayTimeUnit":"ms","otherData":' + orjson.dumps(
        {"exporter": f"stepscope {__version__}", "run_id": run.id, "start_wall_ns": run.anchor_wall_ns}) + b"}"
    out.write(tail)
    return written + len(tail)


#: the torch profiler's processes: above every OS pid and ``procs.SPARE_PID_BASE``'s
DEVICE_PID_BASE = 1 << 23


def _device_events(trace, cmap, t0: int) -> list[dict]:
    """Kineto complete events rebased onto the run's clock (us from the run's start)."""
    from ...device.kineto import CATEGORIES, DEVICE_CATS

    ts_run = cmap.to_run(trace.ts)
    pids: dict[int, int] = {}
    out: list[dict] = []
    for i in range(len(trace)):
        on_device = int(trace.cat[i]) in DEVICE_CATS
        key = int(trace.pid[i])
        pid = pids.get(key)
        if pid is None:
            pid = pids[key] = DEVICE_PID_BASE + len(pids)
            label = f"torch profiler: GPU {trace.device[i]}" if on_device else "torch profiler: host"
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        args = trace.args[i]
        out.append({"ph": "X", "name": trace.names[trace.name[i]], "cat": CATEGORIES[int(trace.cat[i])], "pid": pid,
                    "tid": int(trace.stream[i]) if on_device else int(trace.tid[i]),
                    "ts": (int(ts_run[i]) - t0) / 1e3, "dur": int(trace.dur[i]) / 1e3,
                    "args": {k: v for k, v in args.items() if k in ("correlation", "External id", "stream", "bytes",
                                                                   "Input Dims", "device")}})
    return out
