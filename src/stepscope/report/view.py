"""The report's view model: compact, columnar JSON the page draws from (the web UI can reuse it).

Times are microseconds (float) from the run's start. The profile is sent as a prefix tree of call
paths: node ``i`` has ``parent[i]`` (-1 at the top) and ``func[i]``; the first level is one node per
thread. A sample points at its leaf node, so the page builds the flame graph of any time window by
summing weights up the tree (O(samples + nodes)), with no stack walking. Profiles over
``MAX_SAMPLES`` samples are downsampled (every k-th sample kept, carrying the weight of its k).
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np

from ..analysis.spans import depths
from ..analysis.summary import Summary, summarize
from ..analysis.phases import phases as run_phases
from ..analysis.phases import sample_phase
from ..analysis.slow import RULE_TEXT
from ..model import RunData
from ..profiling.calltree import ProfileIndex

MAX_SAMPLES = 100_000

#: Flame-graph colour groups (``kind_of``), in legend order; the page holds the colours.
KINDS = ("your code", "diffusers / transformers", "torch", "other libraries", "stdlib", "start-up (imports)", "thread")
_HF = ("diffusers", "transformers", "accelerate", "peft", "huggingface_hub", "safetensors", "tokenizers")
_TORCH = ("torch", "torchvision", "functorch", "torchgen", "triton")


def kind_of(module: str, file: str, name: str) -> int:
    """The colour group of a sampled function (index into ``KINDS``): import machinery is start-up,
    then by top-level package; the program's own code is ``__main__`` or a file outside site-packages and
    the standard library."""
    import sys
    import sysconfig

    top = (module or name).split(".", 1)[0]
    if top in ("importlib", "_frozen_importlib", "_frozen_importlib_external", "zipimport", "pkgutil") or \
            "importlib._bootstrap" in (file or ""):
        return 5
    if top in _HF:
        return 1
    if top in _TORCH:
        return 2
    if top == "__main__":
        return 0
    f = file or ""
    if "site-packages" in f or "dist-packages" in f:
        return 3
    if top in sys.stdlib_module_names or f.startswith("<frozen") or f.startswith(sysconfig.get_paths()["stdlib"]):
        return 4
    return 0 if f and not f.startswith("<") else 4


_FIELDS: dict[type, tuple[str, ...]] = {}
_SCALARS = frozenset((int, float, str, bool, type(None)))


def plain(x: Any) -> Any:
    """``dataclasses.asdict`` without its deep copies (5x faster on a 10k-span summary): dataclasses to
    dicts, tuples to lists, recursively; other values as they are."""
    t = type(x)
    if t in _SCALARS:
        return x
    names = _FIELDS.get(t)
    if names is None and is_dataclass(x) and not isinstance(x, type):
        names = _FIELDS[t] = tuple(f.name for f in fields(x))
    if names is not None:
        return {k: plain(getattr(x, k)) for k in names}
    if t is list or t is tuple:
        return [plain(v) for v in x]
    if t is dict:
        return {k: plain(v) for k, v in x.items()}
    return x


def _r(x: float) -> float:
    return round(float(x), 1)


def build_view(data: RunData, index: ProfileIndex | None = None, summary: Summary | None = None,
               max_samples: int = MAX_SAMPLES, device=None) -> dict[str, Any]:
    """The report's data for one run (JSON-serialisable). ``device``: the run's ``RunDevice`` and
    ``(KinetoTrace, ClockMap)`` for the device lanes, or None."""
    run = data.run
    index = index or ProfileIndex(data.profile)
    summary = summary or summarize(data, index)
    ph = run_phases(data, index)
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
    cpu = index.weights("cpu") if index.has_cpu else None
    k = 1
    if n > max_samples:
        k = math.ceil(n / max_samples)
        keep = np.arange(0, n, k)
        weight = np.add.reduceat(index.weight, keep)
        if cpu is not None:
            cpu = np.add.reduceat(cpu, keep)
    funcs = [[f.name, f.file, f.line, kind_of(f.module, f.file, f.name)] for f in index.functions]
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
                funcs.append([f"thread {data.profile.thread_names.get(tid, tid)}", "", 0, KINDS.index("thread")])
            cur = node(-1, tf)
            for fid in index.stack_funcs[sid]:
                cur = node(cur, fid)
            leaf = stack_leaf[(tid, sid)] = cur
        sample_node.append(leaf)
        tid_index(tid)
    thread_names = [data.profile.thread_names.get(t, str(t)) for t in thread_ids]
    return {
        "run": {
            "id": run.id, "command": run.command, "status": run.status, "exit_code": run.exit_code, "error": run.error,
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
            # CPU time per sample (us; the flame graph's CPU-time mode), None when the run has none
            "cw": [_r(c / 1e3) for c in cpu.tolist()] if cpu is not None else None,
            "idle": index.idle[keep].astype(np.int8).tolist(),
            # 0 start-up (before the traced work, or importing), 1 work, 2 shutdown (analysis.phases)
            "phase": sample_phase(index, ph)[keep].tolist(),
            "downsampled": k, "total_samples": n,
        },
        "kinds": list(KINDS),
        "rule": RULE_TEXT,
        "phases": _phases_view(summary, t0),
        "summary": _summary_view(summary, t0),
        "explain": _explain_view(data, index, t0, thread_idx),
        "device": _device_view(device, t0) if device is not None else None,
        "memory": memory_lane_view(data, t0),
    }


MAX_LANE_BARS = 20_000


def _merged(ts: np.ndarray, end: np.ndarray, min_gap_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals (ns), closing gaps shorter than ``min_gap_ns``."""
    if not len(ts):
        return ts, end
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], np.maximum.accumulate(end[order])
    new = np.ones(len(ts), bool)
    new[1:] = ts[1:] > end[:-1] + min_gap_ns
    starts = ts[new]
    ends = np.append(end[np.nonzero(new)[0][1:] - 1], end[-1])
    return starts, ends


def _lane(label: str, ts: np.ndarray, end: np.ndarray, t0: int) -> dict:
    starts, ends = _merged(ts, end)
    gap = 0
    while len(starts) > MAX_LANE_BARS:  # keep the page light: close ever larger gaps
        gap = max(gap * 2, 1000)
        starts, ends = _merged(starts, ends, gap)
    return {"label": label, "start": [_r((t - t0) / 1e3) for t in starts.tolist()],
            "dur": [_r((b - a) / 1e3) for a, b in zip(starts.tolist(), ends.tolist())]}


def _device_view(device, t0: int) -> dict:
    """Device lanes on the run's clock: host torch ops, each stream's activity, the largest idle gaps,
    and the syncs with their Python line."""
    from ..device.kineto import DEVICE_CATS

    view, (trace, cmap) = device
    run_ts = cmap.to_run(trace.ts)
    run_end = run_ts + trace.dur
    lanes = []
    cpu = np.nonzero(trace.mask("cpu_op"))[0]
    if len(cpu):
        main_tid = int(np.bincount(np.unique(trace.tid[cpu], return_inverse=True)[1]).argmax())
        tids = np.unique(trace.tid[cpu])
        sel = cpu[trace.tid[cpu] == tids[main_tid]]
        lanes.append(_lane("torch ops (host)", run_ts[sel], run_end[sel], t0))
    dev = np.nonzero(np.isin(trace.cat, DEVICE_CATS) & (trace.stream >= 0))[0]
    for d, st in sorted({(int(a), int(b)) for a, b in zip(trace.device[dev], trace.stream[dev])}):
        sel = dev[(trace.device[dev] == d) & (trace.stream[dev] == st)]
        lanes.append(_lane(f"GPU {d} stream {st}", run_ts[sel], run_end[sel], t0))
    summary = view.summary
    gaps = [{"lane": f"GPU {g.device} stream {g.stream}", "start": _r((int(cmap.to_run(g.start_ns)) - t0) / 1e3),
             "dur": _r(g.duration_ns / 1e3), "category": g.category, "host_op": g.host_op, "span": g.annotation}
            for g in summary.gaps[:50]]
    syncs = [{"t": _r((int(cmap.to_run(s.ts_ns)) - t0) / 1e3), "cost": _r(s.cost_ns / 1e3), "kind": s.kind,
              "python": s.python, "span": s.annotation} for s in summary.syncs[:5000]]
    return {"lanes": lanes, "gaps": gaps, "syncs": syncs, "device": summary.device}


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

    d = plain(e)
    d.pop("tree")
    d["tree"] = node(e.tree) if e.tree is not None else None
    for r in d["repeats"]:
        r["start_us"] = _r((r.pop("start_ns") - t0) / 1e3)
        r["end_us"] = _r((r.pop("end_ns") - t0) / 1e3)
        r["thread"] = thread_idx.get(r.pop("thread_id"), -1)
    return d


def _phases_view(s: Summary, t0: int) -> dict | None:
    """Start-up / work / shutdown on the page's time axis (us from the run's start)."""
    ph = s.phases
    if ph is None:
        return None
    return {"split": ph.split, "work_t0": _r((ph.work_start_ns - t0) / 1e3), "work_t1": _r((ph.work_end_ns - t0) / 1e3),
            "startup_us": _r(ph.startup_ns / 1e3), "work_us": _r(ph.work_ns / 1e3), "shutdown_us": _r(ph.shutdown_ns / 1e3),
            "startup_sampled_us": _r(ph.startup_sampled_ns / 1e3), "shutdown_sampled_us": _r(ph.shutdown_sampled_ns / 1e3),
            "startup_top": [{"name": f.name, "total_us": _r(f.total_ns / 1e3)} for f in ph.startup_top]}


MAX_MEMORY_POINTS = 20_000


def memory_lane_view(data: RunData, t0: int, max_points: int = MAX_MEMORY_POINTS) -> dict | None:
    """The memory lane for the page (None without one): ``t`` (us from the run's start), ``rss``,
    ``cuda``, ``reserved`` (MiB, None where not read; a column of all None is None). Over ``max_points``
    samples, each bucket of k consecutive samples keeps its highest value (the lane never hides a peak)."""
    m = data.memory
    n = len(m)
    if not n:
        return None
    t = np.asarray(m.t_ns, dtype=np.int64)
    cols = {}
    for key, vals in (("rss", m.rss), ("cuda", m.cuda_allocated), ("reserved", m.cuda_reserved)):
        a = np.array([-1 if v is None else v for v in vals], dtype=np.float64)
        cols[key] = a if (a >= 0).any() else None
    k = 1
    if n > max_points:
        k = math.ceil(n / max_points)
        starts = np.arange(0, n, k)
        t = t[starts]
        cols = {key: (np.maximum.reduceat(a, starts) if a is not None else None) for key, a in cols.items()}
    out = {"t": [_r((v - t0) / 1e3) for v in t.tolist()], "every": k}
    for key, a in cols.items():
        out[key] = None if a is None else [None if v < 0 else round(v / 1048576, 2) for v in a.tolist()]
    return out


def _summary_view(s: Summary, t0: int) -> dict:
    d = plain(s)
    d.pop("phases", None)
    mem = d.get("memory")
    if mem is not None:
        for g in mem["stages"] + ([mem["largest"]] if mem["largest"] else []):
            g["start_us"] = _r((g["start_ns"] - t0) / 1e3)
            g["end_us"] = _r((g["end_ns"] - t0) / 1e3)
    if s.steps is not None:
        for row in d["steps"]["rows"]:
            row["start_us"] = _r((row.pop("start_ns") - t0) / 1e3)
            row["end_us"] = _r((row.pop("end_ns") - t0) / 1e3)
    return d
