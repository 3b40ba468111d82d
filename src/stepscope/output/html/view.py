"""The report's view model: compact, columnar JSON the page draws from (the web UI can reuse it). Its
fields, types and units: docs/report-view-model.md (``VIEW_VERSION``).

Times are microseconds (float) from the run's start. The profile is sent as a prefix tree of call
paths: node ``i`` has ``parent[i]`` (-1 at the top) and ``func[i]``; the first level is one node per
thread. A sample points at its leaf node, so the page builds the flame graph of any time window by
summing weights up the tree (O(samples + nodes)), with no stack walking. Profiles over
``MAX_SAMPLES`` samples are downsampled (every k-th sample kept, carrying the weight of its k). Each function has a
colour kind (``KINDS``), each sample its phase (``analysis.phases``).

Past ``MAX_SPANS`` spans the view is aggregated (``aggregate``): the first ``FIRST_PER_NAME`` of each name, the slow
ones (the rule per name), their ancestors, the rest as density rows per (name, thread), and the note the page
shows; the explanation's repeat table keeps the first rows and then the slowest slow ones, chosen on the columns.
``window_spans`` gives the web UI's waterfall the spans of a zoomed window.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np

from ...analysis.slow import limit_of
from ...core.spantable import NO_PARENT, SpanTable, as_table, group_rows
from ...device.names import kernel_label
from ...analysis.summary import Summary, summarize
from ...analysis.phases import phases as run_phases
from ...analysis.phases import sample_phase
from ...analysis.slow import RULE_TEXT
from ...core.model import MemoryTrack, RunData
from ...analysis.calltree import ProfileIndex

#: The version of the view model (``build_view``), specified in docs/report-view-model.md; the page's script
#: reads this version only (another: one line says so). Change it with any change a reader must know of.
VIEW_VERSION = 1

MAX_SAMPLES = 100_000
#: A run with more spans than this gets an aggregated view (``aggregate``)
MAX_SPANS = 20_000
#: spans kept of each name in an aggregated view (the first ones), and slow ones at most in all
FIRST_PER_NAME = 200
MAX_SLOW = 10_000
#: time bins of the density rows of an aggregated view
DENSITY_BINS = 1000

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


def table_depths(t: SpanTable) -> np.ndarray:
    """Per row, the span's nesting depth (0 for a span whose parent is unknown or None), by pointer jumping
    (O(n log depth))."""
    anc = t.parent_rows()
    d = (anc >= 0).astype(np.int64)
    for _ in range(64):
        act = anc >= 0
        if not act.any():
            break
        nxt = anc[act]
        d_new = d.copy()
        d_new[act] = d[act] + d[nxt]
        anc_new = anc.copy()
        anc_new[act] = anc[nxt]
        d, anc = d_new, anc_new
    return d


def aggregate(t: SpanTable, max_spans: int | None = None) -> tuple[np.ndarray, dict | None]:
    """Which spans a view shows one by one: ``(rows, None)`` with every row for a run of at most
    ``max_spans`` spans (default ``MAX_SPANS``); past it the first ``FIRST_PER_NAME`` spans of each name, every
    slow one (longer than its name's limit by the rule of ``analysis.slow``: the longest ``MAX_SLOW`` when
    more), the run's root transaction and the ancestors of those kept; then ``(rows, info)`` with ``info``:
    ``total``, ``shown``, ``first_per_name``, ``slow`` (slow spans kept), ``slow_total``, ``note`` (the
    sentence the page shows) and ``rest`` (the rows drawn as density, removed by ``build_view``)."""
    n = len(t)
    limit = MAX_SPANS if max_spans is None else max_spans
    if n <= limit:
        return np.arange(n), None
    keep = np.zeros(n, bool)
    order, lo, hi = group_rows(t.name)  # by name, then time
    dur = t.dur
    slow = np.zeros(n, bool)
    for a, b in zip(lo.tolist(), hi.tolist()):
        rows = order[a:b]
        keep[rows[:FIRST_PER_NAME]] = True
        if b - a >= 3:
            d = dur[rows].astype(np.float64)
            med, _, lim = limit_of(d)
            slow[rows[d > lim]] = True
    slow_rows = np.flatnonzero(slow)
    slow_total = len(slow_rows)
    if slow_total > MAX_SLOW:
        slow_rows = slow_rows[np.argsort(-dur[slow_rows], kind="stable")[:MAX_SLOW]]
    keep[slow_rows] = True
    keep[t.op_mask("transaction") & (t.parent == NO_PARENT)] = True
    prow = t.parent_rows()
    cur = np.flatnonzero(keep)
    for _ in range(256):  # the ancestors of the kept spans, so that the tree and the depths hold
        p = prow[cur]
        p = np.unique(p[p >= 0])
        p = p[~keep[p]]
        if not len(p):
            break
        keep[p] = True
        cur = p
    rows = np.flatnonzero(keep)
    kept_slow = len(slow_rows)
    slow_txt = ("every slow one" if kept_slow == slow_total else
                f"the {kept_slow:,} slowest of {slow_total:,} slow ones")
    note = (f"showing {len(rows):,} of {n:,} spans: the first {FIRST_PER_NAME} of each name and {slow_txt} "
            f"(longer than their name's median + 3 x 1.4826 x MAD and 1.2 x median); the rest as density")
    return rows, {"total": n, "shown": int(len(rows)), "first_per_name": FIRST_PER_NAME, "slow": kept_slow,
                  "slow_total": slow_total, "note": note, "rest": np.flatnonzero(~keep)}


#: most spans ``window_spans`` returns for one window
WINDOW_LIMIT = 20_000


def window_spans(t: SpanTable, depths: np.ndarray, run_start_ns: int, t0_us: float, t1_us: float,
                 thread_names: dict[int, str] | None = None, limit: int = WINDOW_LIMIT) -> dict:
    """The spans of a run that overlap the window ``[t0_us, t1_us]`` (us from ``run_start_ns``), for the page's
    waterfall when zoomed (level of detail): ``{"t0", "t1", "count", "complete", "names", "spans"}``
    (docs/report-view-model.md, its appendix);
    ``spans``: columns ``id``, ``name`` (into ``names``), ``start``/``dur`` (us), ``depth``, ``thread`` (thread
    id), ``error``; empty with ``complete`` False when more than ``limit`` spans overlap (zoom in further).
    ``depths``: ``table_depths(t)``. The bounds are taken to the nearest ns (``round``): a float in us such as
    32.3 reads 32299.999... ns, and truncating would leave out a span starting at 32,300 ns, on the window's end."""
    a = run_start_ns + round(t0_us * 1e3)
    b = run_start_ns + round(t1_us * 1e3)
    hi = int(np.searchsorted(t.start, b, "right"))
    rows = np.flatnonzero(t.end[:hi] >= a)
    out = {"t0": t0_us, "t1": t1_us, "count": int(len(rows)), "complete": len(rows) <= limit, "names": [],
           "spans": {k: [] for k in ("id", "name", "start", "dur", "depth", "thread", "error")}}
    if len(rows) > limit:
        return out
    codes, inv = np.unique(t.name[rows], return_inverse=True)
    err = t.error[rows].tolist()
    out["names"] = [t.names[c] for c in codes.tolist()]
    out["spans"] = {"id": t.id[rows].tolist(), "name": inv.tolist(),
                    "start": np.round((t.start[rows] - run_start_ns) / 1e3, 1).tolist(),
                    "dur": np.round(t.dur[rows] / 1e3, 1).tolist(), "depth": depths[rows].tolist(),
                    "thread": t.thread[rows].tolist(), "error": [None if e < 0 else t.errors[e] for e in err]}
    return out


def _density(t: SpanTable, rest: np.ndarray, dep: np.ndarray, t0: int, run, tid_index) -> dict:
    """The spans not shown one by one, per (name, thread): how many start in each of ``DENSITY_BINS`` time bins
    and their time there (us), at the depth most of them have. Sparse: only bins with spans."""
    end = max(int(t.end.max()) if len(t) else t0, run.end_ns or t0, t0 + 1)
    width = (end - t0) / DENSITY_BINS
    out = {"bins": DENSITY_BINS, "bin_us": _r(width / 1e3), "rows": []}
    if not len(rest):
        return out
    b = np.clip(((t.start[rest] - t0) / width).astype(np.int64), 0, DENSITY_BINS - 1)
    key_th = t.thread[rest]
    tord, tlo, thi = group_rows(key_th)  # (a few threads: a pass each, no sort of the rows)
    uth = key_th[tord[tlo]]
    th_inv = np.empty(len(rest), np.int64)
    for k, (a_, b_) in enumerate(zip(tlo.tolist(), thi.tolist())):
        th_inv[tord[a_:b_]] = k
    group = t.name[rest].astype(np.int64) * len(uth) + th_inv
    durs, deps = t.dur[rest], dep[rest]
    order, lo, hi = group_rows(group)
    for a_, b_ in zip(lo.tolist(), hi.tolist()):
        sel = order[a_:b_]  # (ascending: ``rest`` and so the bins in time order)
        g = int(group[sel[0]])
        bs = b[sel]
        if len(bs) > 1 and (bs[1:] < bs[:-1]).any():  # (never for a table in start order)
            bins, inv = np.unique(bs, return_inverse=True)
            count = np.bincount(inv)
            busy = np.bincount(inv, weights=durs[sel]) / 1e3
        else:  # runs of equal bins: no sort
            at = np.concatenate(([0], np.flatnonzero(bs[1:] != bs[:-1]) + 1))
            bins, count = bs[at], np.diff(np.append(at, len(bs)))
            busy = np.add.reduceat(durs[sel].astype(np.float64), at) / 1e3
        depths = deps[sel]
        out["rows"].append({"name": g // len(uth), "thread": tid_index(int(uth[g % len(uth)])),
                            "depth": int(np.bincount(depths).argmax()), "n": len(sel),
                            "bin": bins.tolist(), "count": count.tolist(), "busy": np.round(busy, 1).tolist()})
    return out


def _r(x: float) -> float:
    return round(float(x), 1)


def build_view(data: RunData, index: ProfileIndex | None = None, summary: Summary | None = None,
               max_samples: int = MAX_SAMPLES, device=None, max_spans: int | None = None) -> dict[str, Any]:
    """The report's data for one run (JSON-serialisable). ``device``: the run's device view
    (``device.view.device_view``: ``DeviceView``), or None. ``max_spans``: past this many spans (default
    ``MAX_SPANS``) the spans are aggregated (``aggregate``): the page stays a few MB whatever the run."""
    run = data.run
    index = index or ProfileIndex(data.profile)
    summary = summary or summarize(data, index)
    ph = run_phases(data, index)
    t0 = run.start_ns
    t = as_table(data.spans)
    keep, agg = aggregate(t, max_spans)
    names: list[str] = list(t.names)
    thread_ids: list[int] = []
    thread_idx: dict[int, int] = {}

    def tid_index(tid: int) -> int:
        i = thread_idx.get(tid)
        if i is None:
            i = thread_idx[tid] = len(thread_ids)
            thread_ids.append(tid)
        return i

    dep = table_depths(t)
    par = t.parent[keep]
    err = t.error[keep].tolist()
    sv: dict[str, list] = {
        "id": t.id[keep].tolist(),
        "parent": [None if p == NO_PARENT else p for p in par.tolist()],
        "name": t.name[keep].tolist(),
        "start": np.round((t.start[keep] - t0) / 1e3, 1).tolist(),
        "dur": np.round(t.dur[keep] / 1e3, 1).tolist(),
        "depth": dep[keep].tolist(),
        "thread": [tid_index(x) for x in t.thread[keep].tolist()],
        "error": [None if e < 0 else t.errors[e] for e in err],
        "attrs": [t.attrs.get(r) or None for r in keep.tolist()] if t.attrs else [None] * len(keep),
        "op": [t.ops[o] for o in t.op[keep].tolist()],
    }
    density = None
    if agg is not None:
        density = _density(t, agg.pop("rest"), dep, t0, run, tid_index)

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
        "version": VIEW_VERSION,
        "run": {
            "id": run.id, "command": run.command, "status": run.status, "exit_code": run.exit_code, "error": run.error,
            "wall_us": _r((run.wall_time_ns or 0) / 1e3), "start_wall_ms": run.anchor_wall_ns / 1e6 if run.anchor_wall_ns else None,
            "host": run.host, "env": run.env, "hz": data.profile.hz, "unresolved": run.unresolved,
        },
        "names": names,
        "threads": [{"id": t, "name": nm} for t, nm in zip(thread_ids, thread_names)],
        "spans": sv,
        # None, or what the page shows of a large run's spans (``aggregate``) and the rest as density per name
        "aggregated": agg,
        "density": density,
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
        "device": _device_view(device, t0) if device is not None and not device.empty else None,
        "memory": memory_lane_view(data, t0),
        "fixes": _fixes_view(data),
    }


def _fixes_view(data: RunData) -> dict:
    """The ``stepscope try`` fixes that apply to the run (``analysis.fixhints``) and the line to measure them."""
    from ...analysis.fixhints import fix_hints, try_command

    hints = fix_hints(data)
    return {"hints": [{"fix": h.fix, "why": h.why} for h in hints], "command": try_command(data, hints)}


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
    """The run's device view (``DeviceView``) for the page: the Kineto trace's lanes on the run's clock (host
    torch ops, each stream's activity), the largest idle gaps and the syncs with their Python line; then what
    ``stepscope device`` shows besides: idle per stream, top ops and kernels, per-span device figures, the sync
    sites, the probe's peaks, the compile report and the XLA trace's analysis (docs/report-view-model.md)."""
    k = device.kineto
    out = _timeline_view(device, t0) if device.trace is not None else {"lanes": [], "gaps": [], "syncs": [], "device": None}
    for p in device.processes:  # a job: each rank's device timeline on the run's clock, under its label
        lanes = _trace_lanes(p.trace, p.clock, t0)
        out["lanes"].extend({**lane, "label": f"{p.label} · {lane['label']}", "process": p.label} for lane in lanes)
    s = k.summary
    out.update({
        "kineto": device.trace is not None,
        "streams": plain(s.streams) if s is not None else [],
        "top_ops": plain(s.top_ops) if s is not None else [],
        "top_kernels": [{**o, "label": kernel_label(o["name"])} for o in plain(s.top_kernels)] if s is not None else [],
        "sync_counts": dict(s.sync_counts) if s is not None else {},
        "spans": [{**sp, "top_kernels": [[n, ns, kernel_label(n)] for n, ns in sp.get("top_kernels") or []]}
                  for sp in plain(k.spans)],
        "sync_sites": plain(k.sync_sites),
        "peak": device.peak,
        "compile": device.compile,
        "xla": plain(device.xla) if device.xla is not None else None,
    })
    return out


def _timeline_view(device, t0: int) -> dict:
    """Device lanes on the run's clock: host torch ops, each stream's activity, the largest idle gaps,
    and the syncs with their Python line."""

    trace, cmap = device.trace, device.clock
    lanes = _trace_lanes(trace, cmap, t0)
    summary = device.kineto.summary
    gaps = [{"lane": f"GPU {g.device} stream {g.stream}", "start": _r((int(cmap.to_run(g.start_ns)) - t0) / 1e3),
             "dur": _r(g.duration_ns / 1e3), "category": g.category, "host_op": g.host_op, "span": g.annotation,
             "next": kernel_label(g.next_name), "launched_in": g.launched_in}
            for g in summary.gaps[:50]]
    syncs = [{"t": _r((int(cmap.to_run(s.ts_ns)) - t0) / 1e3), "cost": _r(s.cost_ns / 1e3), "kind": s.kind,
              "python": s.python, "span": s.annotation} for s in summary.syncs[:5000]]
    return {"lanes": lanes, "gaps": gaps, "syncs": syncs, "device": summary.device}


def _trace_lanes(trace, cmap, t0: int) -> list[dict]:
    """A Kineto trace's lanes on the run's clock (``cmap``: its ``ClockMap``): the host's torch ops (the thread with
    the most), then each device stream's activity."""
    from ...device.kineto import DEVICE_CATS

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
    return lanes


def _explain_view(data: RunData, index: ProfileIndex, t0: int, thread_idx: dict[int, int]) -> dict | None:
    """The explanation of the default unit (None when there is nothing to compare)."""
    from ...analysis.difftree import DiffNode
    from ...analysis.explain import ExplainError, explain
    from .difftree import diff_color

    try:
        e = explain(data, index=index)
    except ExplainError:
        return None

    def node(n: DiffNode, depth: int = 0) -> dict:
        return {"name": n.name, "slow": _r(n.b_ns / 1e3), "fast": _r(n.a_ns / 1e3), "color": diff_color(n.a_ns, n.b_ns),
                "children": [node(c, depth + 1) for c in n.children] if depth < 60 else []}

    reps = e.repeats
    e.repeats = []
    d = plain(e)
    e.repeats = reps
    # a run of many repeats: the first ones, then the slow and warm-up ones (the page's table), up to MAX_ROWS
    from ...analysis.steptable import HEAD_ROWS, MAX_ROWS

    slow = reps.mask("slow")
    if len(reps) <= MAX_ROWS:
        shown = np.arange(len(reps))
    else:  # the first ones, then the slowest slow (or warm-up) ones, in order (on the columns)
        more = np.flatnonzero(slow | reps.mask("warm-up"))
        more = more[more >= HEAD_ROWS]
        more = more[np.argsort(-reps.duration_ns[more], kind="stable")[:MAX_ROWS - HEAD_ROWS]]
        shown = np.concatenate([np.arange(min(HEAD_ROWS, len(reps))), np.sort(more)])
    d["repeats"] = reps.dicts(shown)
    d["repeats_total"] = len(reps)
    d["slow_total"] = int(slow.sum())
    d.pop("tree")
    d["tree"] = node(e.tree) if e.tree is not None else None
    for r in d["repeats"]:
        r["start_us"] = _r((r.pop("start_ns") - t0) / 1e3)
        r["end_us"] = _r((r.pop("end_ns") - t0) / 1e3)
        r["thread"] = thread_idx.get(r.pop("thread_id"), -1)
    return d


def _phases_view(s: Summary, t0: int) -> dict | None:
    """Start-up / work / shutdown on the page's time axis (us from the run's start); ``capture``: a window of
    ``stepscope capture``, where they are the app idle or serving before and after the work."""
    ph = s.phases
    if ph is None:
        return None
    return {"split": ph.split, "work_t0": _r((ph.work_start_ns - t0) / 1e3), "work_t1": _r((ph.work_end_ns - t0) / 1e3),
            "startup_us": _r(ph.startup_ns / 1e3), "work_us": _r(ph.work_ns / 1e3), "shutdown_us": _r(ph.shutdown_ns / 1e3),
            "startup_sampled_us": _r(ph.startup_sampled_ns / 1e3), "shutdown_sampled_us": _r(ph.shutdown_sampled_ns / 1e3),
            "startup_top": [{"name": f.name, "total_us": _r(f.total_ns / 1e3)} for f in ph.startup_top],
            "work_from": ph.work_from, "entry": ph.entry, "capture": ph.capture}


MAX_MEMORY_POINTS = 20_000


def job_total(m: MemoryTrack) -> MemoryTrack:
    """A job's joined memory lane (``MemoryTrack.process``) as the host's total: at each sample, the sum over the
    job's processes of each one's last reading (bytes; None where no process had one yet). Another lane: as it is."""
    procs = m.process
    if not procs or len(set(procs)) < 2:
        return m
    last: dict[str, dict[int, int]] = {"rss": {}, "cuda": {}, "reserved": {}}
    out = MemoryTrack()
    for t, k, rss, cuda, res in zip(m.t_ns, procs, m.rss, m.cuda_allocated, m.cuda_reserved):
        out.t_ns.append(t)
        for key, v, col in (("rss", rss, out.rss), ("cuda", cuda, out.cuda_allocated),
                            ("reserved", res, out.cuda_reserved)):
            if v is not None:
                last[key][k] = v
            col.append(sum(last[key].values()) if last[key] else None)
    return out


def memory_lane_view(data: RunData, t0: int, max_points: int = MAX_MEMORY_POINTS) -> dict | None:
    """The memory lane for the page (None without one): ``t`` (us from the run's start), ``rss``,
    ``cuda``, ``reserved`` (MiB, None where not read; a column of all None is None); a job's: the sum over its
    processes (``job_total``). Over ``max_points``
    samples, each bucket of k consecutive samples keeps its highest value (the lane never hides a peak)."""
    m = job_total(data.memory)
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
    rk = d.get("ranks")
    if rk is not None:  # a job's steps rank by rank: windows in run time (us)
        rk["waited_for"] = {str(k): v for k, v in rk["waited_for"].items()}
        for key in ("start", "end"):
            rk[f"{key}_us"] = [[None if v is None else _r((v - t0) / 1e3) for v in row] for row in rk.pop(f"{key}_ns")]
    if d.get("nodes") is not None:  # a node-graph app's prompts: windows in run time (us)
        for row in d["nodes"]["prompts"]:
            row["start_us"] = _r((row.pop("start_ns") - t0) / 1e3)
    d.pop("notes", None)
    if s.steps is not None:
        d["steps"]["call_labels"] = {str(k): v for k, v in d["steps"]["call_labels"].items()}
        for row in d["steps"]["rows"]:
            row["start_us"] = _r((row.pop("start_ns") - t0) / 1e3)
            row["end_us"] = _r((row.pop("end_ns") - t0) / 1e3)
    return d
