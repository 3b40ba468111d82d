"""speedscope JSON (https://www.speedscope.app/file-format-schema.json, ``src/lib/file-format-spec.ts``).

One shared frame table (functions, as flame graphs merge them; span names too). Per thread: a
``sampled`` profile (stacks root first, weights = sampled ns) and, when the thread has spans, an
``evented`` profile of its spans (open/close events). speedscope requires evented profiles to nest;
spans that overlap without nesting (concurrent asyncio tasks on one thread) are left out and counted
in the exporter note. A job of several processes (``export.procs``): each process's profiles together, named
after it (``rank 1 (pid 4242): samples: thread MainThread``), each thread under its own name.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

import numpy as np
import orjson

from ... import __version__
from ...core.spantable import as_table
from ...core.model import RunData
from ...analysis.calltree import ProfileIndex
from .procs import ThreadProcesses, process_name


def to_speedscope(data: RunData, index: ProfileIndex | None = None) -> dict[str, Any]:
    """The run as a speedscope document (a dict ready for JSON). Values are ns from the run's start.
    ``write_speedscope`` streams the same document to a file without holding it."""
    buf = io.BytesIO()
    write_speedscope(data, buf, index)
    return orjson.loads(buf.getvalue())


_CHUNK = 8192


def write_speedscope(data: RunData, out: BinaryIO, index: ProfileIndex | None = None) -> int:
    """Write the run's speedscope document (``to_speedscope``) to the binary file ``out`` as it is made (span
    events a chunk at a time, from the columns). Returns the bytes written."""
    index = index or ProfileIndex(data.profile)
    run = data.run
    t0 = run.start_ns
    t = as_table(data.spans)
    end = max([run.end_ns or t0] + ([int(t.end.max())] if len(t) else []) + ([int(index.t[-1])] if len(index) else []))
    frames: list[dict] = [{"name": f.name, "file": f.file, "line": f.line} for f in index.functions]
    # one frame per span name, in the order the threads' spans first use them
    tr = np.lexsort((np.arange(len(t)), -t.end, t.start, t.thread))
    first = np.full(len(t.names), len(t), np.int64)
    np.minimum.at(first, t.name[tr], np.arange(len(t)))
    span_frame: dict[int, int] = {}
    for code in np.argsort(first, kind="stable").tolist():
        if first[code] < len(t):
            span_frame[code] = len(frames)
            frames.append({"name": t.names[code]})
    written = 0

    def put(b: bytes) -> None:
        nonlocal written
        out.write(b)
        written += len(b)

    put(b'{"$schema":"https://www.speedscope.app/file-format-schema.json","shared":{"frames":' + orjson.dumps(frames)
        + b'},"profiles":[')
    procs = ThreadProcesses(data)

    def title(what: str, tid: int) -> str:  # (a job's processes: each profile says whose it is)
        head = ""
        if data.processes:
            p = procs.process_of(tid)
            head = f"{process_name(data.run) if p.index == 0 else p.name} (pid {p.pid}): "
        return f"{head}{what}: thread {procs.thread_name(tid)}"

    sep = b""
    for tid in np.unique(index.thread).tolist():
        idx = np.nonzero(index.thread == tid)[0]
        put(sep + orjson.dumps({
            "type": "sampled", "name": title("samples", tid), "unit": "nanoseconds",
            "startValue": 0, "endValue": end - t0,
            "samples": [list(index.stack_funcs[s]) for s in index.stack[idx].tolist()],
            "weights": [int(w) for w in index.weight[idx].tolist()],
        }))
        sep = b","
    skipped = 0
    th_sorted = t.thread[tr]
    tids, starts = np.unique(th_sorted, return_index=True)
    stops = np.append(starts[1:], len(tr))
    for tid, a, b in zip(tids.tolist(), starts.tolist(), stops.tolist()):
        head = orjson.dumps({"type": "evented", "name": title("spans", tid), "unit": "nanoseconds",
                             "startValue": 0, "endValue": end - t0})
        put(sep + head[:-1] + b',"events":[')
        sep = b","
        esep = b""
        open_: list[tuple[int, int]] = []  # (end ns, frame)
        events: list[dict] = []
        for lo in range(a, b, _CHUNK):
            rows = tr[lo:min(b, lo + _CHUNK)]
            for st, en, nm in zip(t.start[rows].tolist(), t.end[rows].tolist(), t.name[rows].tolist()):
                while open_ and open_[-1][0] <= st:
                    e_, f_ = open_.pop()
                    events.append({"type": "C", "frame": f_, "at": e_ - t0})
                if open_ and open_[-1][0] < en:
                    skipped += 1
                    continue
                fi = span_frame[nm]
                events.append({"type": "O", "frame": fi, "at": st - t0})
                open_.append((en, fi))
            if events:
                put(esep + orjson.dumps(events)[1:-1])
                esep = b","
                events = []
        while open_:
            e_, f_ = open_.pop()
            events.append({"type": "C", "frame": f_, "at": e_ - t0})
        if events:
            put(esep + orjson.dumps(events)[1:-1])
        put(b"]}")
    exporter = f"stepscope {__version__}" + (f" ({skipped} overlapping spans left out)" if skipped else "")
    put(b'],"name":' + orjson.dumps(f"stepscope run {run.id}") + b',"activeProfileIndex":0,"exporter":'
        + orjson.dumps(exporter) + b"}")
    return written
