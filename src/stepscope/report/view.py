"""The report's view model: compact, columnar JSON the page draws from (the web UI can reuse it).

Times are microseconds (float) from the run's start. The profile is sent as a prefix tree of call
paths: node ``i`` has ``parent[i]`` (-1 at the top) and ``func[i]``; the first level is one node per
thread. A sample points at its leaf node, so the page builds the flame graph of any time window by
summing weights up the tree (O(samples + nodes)), with no stack walking. Profiles over
``MAX_SAMPLES`` samples are downsampled (every k-th sample kept, carrying the weight of its k).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from ..analysis.spans import depths
from ..analysis.summary import Summary, summarize
from ..model import RunData
from ..profiling.calltree import ProfileIndex

MAX_SAMPLES = 100_000


def _r(x: float) -> float:
    return round(float(x), 1)


def build_view(data: RunData, index: ProfileIndex | None = None, summary: Summary | None = None,
               max_samples: int = MAX_SAMPLES) -> dict[str, Any]:
    """The report's data for one run (JSON-serialisable)."""
    run = data.run
    index = index or ProfileIndex(data.profile)
    summary = summary or summarize(data, index)
    t0 = run.start_ns
    spans = sorted(data.spans, key=lambda s: (s.start_ns, s.span_id))
    names: list[str] = []
    name_idx: dict[str, int] = {}
    thread_ids: list[int] = []
    thread_idx: dict[int, int] = {}

    def tid_index(tid: int) -> int:
        i = thread_idx.get(tid)
        if i is None:
            i = thread_idx[tid] = len(thread_ids)
            thread_ids.append(tid)
        return i

    dep = depths(spans)
    sv: dict[str, list] = {k: [] for k in ("id", "parent", "name", "start", "dur", "depth", "thread", "error", "attrs", "op")}
    for s in spans:
        ni = name_idx.get(s.name)
        if ni is None:
            ni = name_idx[s.name] = len(names)
            names.append(s.name)
        sv["id"].append(s.span_id)
        sv["parent"].append(s.parent_id)
        sv["name"].append(ni)
        sv["start"].append(_r((s.start_ns - t0) / 1e3))
        sv["dur"].append(_r(s.duration_ns / 1e3))
        sv["depth"].append(dep.get(s.span_id, 0))
        sv["thread"].append(tid_index(s.thread_id))
        sv["error"].append(s.error_type)
        sv["attrs"].append(s.attrs or None)
        sv["op"].append(s.op)

    # profile as a prefix tree, first level = thread
    n = len(index)
    keep = np.arange(n)
    weight = index.weight
    k = 1
    if n > max_samples:
        k = math.ceil(n / max_samples)
        keep = np.arange(0, n, k)
        weight = np.add.reduceat(index.weight, keep)
    funcs = [[f.name, f.file, f.line] for f in index.functions]
    thread_func: dict[int, int] = {}
    node_of: dict[tuple[int, int], int] = {}
    parent: list[int] = []
    func: list[int] = []
    stack_leaf: dict[tuple[int, int], int] = {}

    def node(p: int, f: int) -> int:
        key = (p, f)
        i = node_of.get(key)
        if i is None:
            i = node_of[key] = len(parent)
            parent.append(p)
            func.append(f)
        return i

    sample_node = []
    for tid, sid in zip(index.thread[keep].tolist(), index.stack[keep].tolist()):
        leaf = stack_leaf.get((tid, sid))
        if leaf is None:
            tf = thread_func.get(tid)
            if tf is None:
                tf = thread_func[tid] = len(funcs)
                funcs.append([f"thread {data.profile.thread_names.get(tid, tid)}", "", 0])
            cur = node(-1, tf)
            for fid in index.stack_funcs[sid]:
                cur = node(cur, fid)
            leaf = stack_leaf[(tid, sid)] = cur
        sample_node.append(leaf)
        tid_index(tid)
    thread_names = [data.profile.thread_names.get(t, str(t)) for t in thread_ids]
    return {
        "run": {
            "id": run.id, "command": run.command, "status": run.status, "exit_code": run.exit_code,
            "wall_us": _r((run.wall_time_ns or 0) / 1e3), "start_wall_ms": run.anchor_wall_ns / 1e6 if run.anchor_wall_ns else None,
            "host": run.host, "env": run.env, "hz": data.profile.hz, "unresolved": run.unresolved,
        },
        "names": names,
        "threads": [{"id": t, "name": nm} for t, nm in zip(thread_ids, thread_names)],
        "spans": sv,
        "profile": {
            "funcs": funcs, "parent": parent, "func": func,
            "t": [_r((t - t0) / 1e3) for t in index.t[keep].tolist()],
            "thread": [thread_idx[t] for t in index.thread[keep].tolist()],
            "node": sample_node,
            "w": [_r(w / 1e3) for w in weight.tolist()],
            "idle": index.idle[keep].astype(np.int8).tolist(),
            "downsampled": k, "total_samples": n,
        },
        "summary": _summary_view(summary, t0),
        "explain": _explain_view(data, index, t0, thread_idx),
    }


def _explain_view(data: RunData, index: ProfileIndex, t0: int, thread_idx: dict[int, int]) -> dict | None:
    """The explanation of the default unit (None when there is nothing to compare)."""
    from ..analysis.explain import DiffNode, ExplainError, explain

    try:
        e = explain(data, index=index)
    except ExplainError:
        return None

    def node(n: DiffNode, depth: int = 0) -> dict:
        return {"name": n.name, "slow": _r(n.slow_ns / 1e3), "fast": _r(n.fast_ns / 1e3),
                "children": [node(c, depth + 1) for c in n.children] if depth < 60 else []}

    d = asdict(e)
    d.pop("tree")
    d["tree"] = node(e.tree) if e.tree is not None else None
    for r in d["repeats"]:
        r["start_us"] = _r((r.pop("start_ns") - t0) / 1e3)
        r["end_us"] = _r((r.pop("end_ns") - t0) / 1e3)
        r["thread"] = thread_idx.get(r.pop("thread_id"), -1)
    return d


def _summary_view(s: Summary, t0: int) -> dict:
    d = asdict(s)
    if s.steps is not None:
        for row in d["steps"]["rows"]:
            row["start_us"] = _r((row.pop("start_ns") - t0) / 1e3)
            row["end_us"] = _r((row.pop("end_ns") - t0) / 1e3)
    return d
