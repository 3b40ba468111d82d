"""Chrome Trace Event Format (JSON object form; loads in Perfetto and chrome://tracing).

Spans are complete events (``ph: "X"``) on their thread; sampled stacks become begin/end events
(``B``/``E``) on a companion track per thread (``<thread> (samples)``), emitted where consecutive
samples' stacks differ, as py-spy's chrometrace output does. ``ts``/``dur`` are microseconds from the
run's start; ``otherData`` carries the run's wall-clock start (ns since the Unix epoch).
Spec: "Trace Event Format", Google, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import __version__
from ..model import RunData
from ..profiling.calltree import ProfileIndex

SAMPLE_TID_OFFSET = 100_000


def to_chrome_trace(data: RunData, index: ProfileIndex | None = None, device=None) -> dict[str, Any]:
    """The run as a Chrome trace document (a dict ready for JSON).

    ``device``: the run's ``(KinetoTrace, ClockMap)``; its events are added on the run's clock, as
    processes of their own ("torch profiler: host", "torch profiler: GPU n").
    """
    index = index or ProfileIndex(data.profile)
    run = data.run
    t0 = run.start_ns
    pid = run.pid or 1
    names = data.profile.thread_names
    tids: dict[int, int] = {}

    def tid_of(t: int) -> int:
        if t not in tids:
            tids[t] = len(tids) + 1
        return tids[t]

    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"stepscope run {run.id}: {' '.join(run.command)[:80]}"}}]
    for s in data.spans:
        args: dict[str, Any] = {"name": s.name, "span_id": s.span_id}
        if s.parent_id is not None:
            args["parent_id"] = s.parent_id
        if s.attrs:
            args.update(s.attrs)
        if s.error_type:
            args["error"] = s.error_type
        ev.append({"ph": "X", "name": s.name.rsplit(".", 2)[-2] + "." + s.name.rsplit(".", 1)[-1] if s.name.count(".") >= 2 else s.name,
                   "cat": s.op, "pid": pid, "tid": tid_of(s.thread_id), "ts": (s.start_ns - t0) / 1e3,
                   "dur": s.duration_ns / 1e3, "args": args})
    funcs = index.functions
    for thread in np.unique(index.thread).tolist():
        tid = SAMPLE_TID_OFFSET + tid_of(thread)
        idx = np.nonzero(index.thread == thread)[0]
        prev: tuple = ()
        last_t = 0.0
        for i in idx.tolist():
            t = (int(index.t[i]) - t0) / 1e3
            stack = index.stack_funcs[int(index.stack[i])]
            k = 0
            while k < len(prev) and k < len(stack) and prev[k] == stack[k]:
                k += 1
            for fid in reversed(prev[k:]):
                ev.append({"ph": "E", "pid": pid, "tid": tid, "ts": t})
            for fid in stack[k:]:
                f = funcs[fid]
                ev.append({"ph": "B", "name": f.name, "cat": "sample", "pid": pid, "tid": tid, "ts": t,
                           "args": {"file": f.file, "line": f.line}})
            prev, last_t = stack, t
        end = last_t + (1e6 / data.profile.hz if data.profile.hz else 0)
        for _ in prev:
            ev.append({"ph": "E", "pid": pid, "tid": tid, "ts": end})
    for thread, tid in list(tids.items()):
        nm = names.get(thread, str(thread))
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": nm}})
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": SAMPLE_TID_OFFSET + tid, "args": {"name": f"{nm} (samples)"}})
    if device is not None:
        ev.extend(_device_events(*device, t0))
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"exporter": f"stepscope {__version__}", "run_id": run.id, "start_wall_ns": run.anchor_wall_ns}}


DEVICE_PID_BASE = 1_000_000


def _device_events(trace, cmap, t0: int) -> list[dict]:
    """Kineto complete events rebased onto the run's clock (us from the run's start)."""
    from ..device.kineto import CATEGORIES, DEVICE_CATS

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
