"""speedscope JSON (https://www.speedscope.app/file-format-schema.json, ``src/lib/file-format-spec.ts``).

One shared frame table (functions, as flame graphs merge them; span names too). Per thread: a
``sampled`` profile (stacks root first, weights = sampled ns) and, when the thread has spans, an
``evented`` profile of its spans (open/close events). speedscope requires evented profiles to nest;
spans that overlap without nesting (concurrent asyncio tasks on one thread) are left out and counted
in the exporter note.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from .. import __version__
from ..model import RunData
from ..profiling.calltree import ProfileIndex


def to_speedscope(data: RunData, index: ProfileIndex | None = None) -> dict[str, Any]:
    """The run as a speedscope document (a dict ready for JSON). Values are ns from the run's start."""
    index = index or ProfileIndex(data.profile)
    run = data.run
    t0 = run.start_ns
    end = max([run.end_ns or t0] + [s.end_ns for s in data.spans] + ([int(index.t[-1])] if len(index) else []))
    frames: list[dict] = [{"name": f.name, "file": f.file, "line": f.line} for f in index.functions]
    span_frame: dict[str, int] = {}
    profiles: list[dict] = []
    names = data.profile.thread_names
    for tid in np.unique(index.thread).tolist():
        idx = np.nonzero(index.thread == tid)[0]
        profiles.append({
            "type": "sampled", "name": f"samples: thread {names.get(tid, tid)}", "unit": "nanoseconds",
            "startValue": 0, "endValue": end - t0,
            "samples": [list(index.stack_funcs[s]) for s in index.stack[idx].tolist()],
            "weights": [int(w) for w in index.weight[idx].tolist()],
        })
    by_thread = defaultdict(list)
    for s in data.spans:
        by_thread[s.thread_id].append(s)
    skipped = 0
    for tid, spans in by_thread.items():
        spans.sort(key=lambda s: (s.start_ns, -s.end_ns))
        events: list[dict] = []
        open_: list = []
        for s in spans:
            while open_ and open_[-1].end_ns <= s.start_ns:
                top = open_.pop()
                events.append({"type": "C", "frame": span_frame[top.name], "at": top.end_ns - t0})
            if open_ and open_[-1].end_ns < s.end_ns:
                skipped += 1
                continue
            fi = span_frame.get(s.name)
            if fi is None:
                fi = span_frame[s.name] = len(frames)
                frames.append({"name": s.name})
            events.append({"type": "O", "frame": fi, "at": s.start_ns - t0})
            open_.append(s)
        while open_:
            top = open_.pop()
            events.append({"type": "C", "frame": span_frame[top.name], "at": top.end_ns - t0})
        profiles.append({"type": "evented", "name": f"spans: thread {names.get(tid, tid)}", "unit": "nanoseconds",
                         "startValue": 0, "endValue": end - t0, "events": events})
    exporter = f"stepscope {__version__}" + (f" ({skipped} overlapping spans left out)" if skipped else "")
    return {"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": frames},
            "profiles": profiles, "name": f"stepscope run {run.id}", "activeProfileIndex": 0, "exporter": exporter}
