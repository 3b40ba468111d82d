"""The run's memory summary: memory per span name, per stage of the work (steps, the traced spans at the top of
each pipeline call, a node-graph app's nodes) and the largest stage, the step table's memory, the out-of-memory
record, and what ``explain`` says about memory. Every window's figures (entry, exit, peak, growth: exact or
sampled) come from ``analysis.memlane`` (``Lane``, ``WindowMemory``), whose doc says how they are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.model import RunData, Span
from ..core.steprules import STEP_ATTR
from ..core.units import fmt_bytes
from .memlane import Lane, WindowMemory

#: At most this many stages (steps, top-level spans) are listed: those with the highest peaks.
MAX_STAGES = 64
#: explain: slow repeats "coincide with memory growth" when they grew this much more than the fast ones
#: (bytes, and at least ``GROWTH_RATIO`` times as much).
GROWTH_MIN_BYTES = 16 << 20
GROWTH_RATIO = 2.0

MiB = 1 << 20


@dataclass(slots=True)
class NameMemory:
    """Memory of all spans with one name: ``calls``; the largest ``peak`` and ``growth`` among them (bytes);
    ``exact``: that growth's peak was read exactly; ``unsampled``: calls with no figure (too short)."""

    name: str
    calls: int
    peak: int | None
    growth: int | None
    entry: int | None
    exact: bool
    unsampled: int


@dataclass(slots=True)
class Stage:
    """A part of the work measured for memory: a denoising step (``kind`` "step", ``label`` "step 3", or "call
    1 step 3"), or a traced span at the top of a pipeline call or of the program (``kind`` "span": the prompt
    encoding, the VAE decode), or a node execution of a node-graph app (``kind`` "node", ``label`` "prompt 1 ·
    KSampler #3": ``analysis.nodes``). ``rss``/``cuda``: its window's memory."""

    label: str
    kind: str
    name: str | None
    start_ns: int
    end_ns: int
    rss: WindowMemory
    cuda: WindowMemory | None = None

    def measure(self) -> WindowMemory:
        """The figures that rank stages: CUDA's allocated bytes when recorded, else RSS."""
        return self.cuda if self.cuda is not None and self.cuda.peak is not None else self.rss

    def growth(self) -> int | None:
        return self.measure().growth

    def peak(self) -> int | None:
        return self.measure().peak


@dataclass(slots=True)
class MemorySummary:
    """The run's memory: ``samples`` in the lane, ``period_ns``; ``peak_rss`` (the kernel's high-water mark
    at the end when recorded, else the highest sample); ``peak_cuda``/``peak_reserved`` (bytes, CUDA only);
    ``spans``: per span name, by growth, largest first; ``stages`` and ``largest``: the stage in which the
    process reached its highest memory (the one that sets the run's peak: the first of equals), by CUDA's
    allocated bytes when recorded, else RSS; its growth says how much it added on top of what it started with;
    ``oom``: the out-of-memory record (``oom_record``), or None."""

    samples: int
    period_ns: int
    peak_rss: int | None
    peak_cuda: int | None
    peak_reserved: int | None
    spans: list[NameMemory] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    largest: Stage | None = None
    oom: dict | None = None


def _pipeline_call(name: str) -> bool:
    from .steptable import is_pipeline_call

    return is_pipeline_call(name)



def per_name(spans, lane: Lane, top: int = 15) -> list[NameMemory]:
    """Per span name (transactions and provisional open spans left out): calls, the largest peak and growth.
    ``spans``: Span objects or a ``SpanTable``; on the columns, any number of spans in a few numpy passes and no
    object per span (a 1M-span run)."""
    from ..core.spantable import as_table

    t = as_table(spans)
    kind = "cuda" if lane.has_cuda else "rss"
    col = lane.column(kind)
    if not len(col) or not len(t):
        return []
    keep = ~t.op_mask("transaction")
    open_rows = t.rows_with_attr("stepscope.open")
    if len(open_rows):
        keep[open_rows] = False
    rows = np.nonzero(keep)[0]
    if not len(rows):
        return []
    entry, _, peaks, _ = lane.windows(t.start[rows], t.end[rows], kind, t.thread[rows])
    exact = np.zeros(len(rows), bool)
    key = "cuda" if kind == "cuda" else "rss"
    read = np.array([r for r, a in t.attrs.items() if f"memory.{key}_in" in a], np.int64)
    if len(read):  # exact readings of step-level spans (few): their positions among ``rows`` (sorted)
        at = np.searchsorted(rows, read)
        hit = (at < len(rows)) & (rows[np.minimum(at, len(rows) - 1)] == read)
        for r, k in zip(read[hit].tolist(), at[hit].tolist()):
            a = t.attrs[r]
            entry[k] = a[f"memory.{key}_in"]
            cand = [peaks[k], a.get(f"memory.{key}_out", -1), a[f"memory.{key}_in"], a.get(f"memory.{key}_peak", -1)]
            peaks[k] = max(int(c) for c in cand if c is not None)
            exact[k] = f"memory.{key}_peak" in a and (key == "rss" or bool(a.get("memory.cuda_peak_exact")))
    growth = np.where((peaks >= 0) & (entry >= 0), np.maximum(peaks - entry, 0), -1)
    code = t.name[rows].astype(np.int64)
    n = len(t.names)
    calls = np.bincount(code, minlength=n)
    peak_by = np.full(n, -1, np.int64)
    np.maximum.at(peak_by, code, peaks)
    unsampled = np.bincount(code, weights=(peaks < 0), minlength=n).astype(np.int64)
    # per name, the span with the largest growth (the first in time order among equals): no sort, two scatters
    gmax = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(gmax, code, growth)
    at_max = np.flatnonzero(growth == gmax[code])
    best_by = np.full(n, len(rows), np.int64)
    np.minimum.at(best_by, code[at_max], at_max)
    best = best_by[best_by < len(rows)]  # (by name code, as a sort by name would give them)
    first_at = np.full(n, len(rows), np.int64)  # names in the order they first appear (ties keep it)
    np.minimum.at(first_at, code, np.arange(len(rows)))
    best = best[np.argsort(first_at[code[best]], kind="stable")]
    out = []
    for b in best.tolist():
        c = int(code[b])
        g = int(growth[b])
        out.append(NameMemory(t.names[c], int(calls[c]), int(peak_by[c]) if peak_by[c] >= 0 else None,
                              g if g >= 0 else None, int(entry[b]) if g >= 0 else None, bool(exact[b]) if g >= 0 else False,
                              int(unsampled[c])))
    out.sort(key=lambda m: -(m.growth if m.growth is not None else -1))
    return out[:top]


def _node_prompts(t, nodes: np.ndarray, prow: np.ndarray) -> dict[int, int]:
    """span id of each node row -> the index of its prompt (its nearest op ``prompt`` ancestor, in start order)."""
    is_prompt = t.op_mask("prompt")
    prompts = np.flatnonzero(is_prompt)
    order = {int(r): k for k, r in enumerate(prompts[np.argsort(t.start[prompts], kind="stable")].tolist())}
    out = {}
    for r in nodes.tolist():
        p, n = int(prow[r]), 0
        while p >= 0 and not is_prompt[p] and n < 10_000:
            p, n = int(prow[p]), n + 1
        if p >= 0 and is_prompt[p]:
            out[int(t.id[r])] = order[p]
    return out


def _short(name: str) -> str:
    """``Class.method`` of a qualified name (the name itself when it has no dots: a node's ``TYPE #ID``)."""
    return name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1] if name.count(".") >= 2 else name


def stages(data: RunData, lane: Lane, steps=None) -> list[Stage]:
    """The stages of the work (see ``Stage``), in time order: the step table's rows, and the traced spans at the
    top of each pipeline call (or, without one, at the top of the program) that are not part of a step."""
    from ..core.spantable import as_table

    t = as_table(data.spans)  # columns: no object per span (a 1M-span run)
    live = np.ones(len(t), bool)
    open_rows = t.rows_with_attr("stepscope.open")
    if len(open_rows):
        live[open_rows] = False
    is_call_code = np.array([_pipeline_call(n) for n in t.names] + [False], bool)  # by name: once per name
    call_mask = is_call_code[t.name] & live if len(t) else np.zeros(0, bool)
    out: list[Stage] = []
    windows = []
    if steps is not None and steps.rows:
        rows = steps.rows
        several = len({r.call for r in rows}) > 1
        windows = [(r.start_ns, r.end_ns) for r in rows]
        chosen = range(len(rows))
        if len(rows) > MAX_STAGES:  # many repeats: the ones with the highest peaks (vectorised)
            _, _, pk, _ = lane.windows(np.array([a for a, _ in windows], np.int64),
                                       np.array([b for _, b in windows], np.int64), "cuda" if lane.has_cuda else "rss",
                                       np.array([r.thread_id for r in rows], np.int64))
            chosen = sorted(np.argsort(-pk, kind="stable")[:MAX_STAGES].tolist())
        for k in chosen:
            r = rows[k]
            named = steps.call_labels.get(r.call)  # ("prompt 1 · KSampler #3": the node that ran the sampler)
            label = (f"{named} " if named else f"call {r.call} " if several else "") + (
                f"step {r.step}" if steps.kind == STEP_ATTR else
                f"{_short(steps.span_name)} #{r.step}" if steps.span_name else f"repeat {r.step}")
            out.append(Stage(label, "step", steps.span_name, r.start_ns, r.end_ns,
                             lane.window(r.start_ns, r.end_ns, thread=r.thread_id),
                             lane.window(r.start_ns, r.end_ns, kind="cuda", thread=r.thread_id) if lane.has_cuda else None))

    w_start = np.array([a for a, _ in windows], np.int64)
    w_end = np.array([b for _, b in windows], np.int64)
    order = np.argsort(w_start, kind="stable")
    w_start, w_end = w_start[order], w_end[order]

    def in_step(s: Span) -> bool:
        if STEP_ATTR in s.attrs:
            return True
        j = int(np.searchsorted(w_start, s.start_ns, "right")) - 1
        return j >= 0 and s.end_ns <= w_end[j]

    if len(t):
        prow = t.parent_rows()
        has_parent = prow >= 0
        pr = np.maximum(prow, 0)
        txn = t.op_mask("transaction")
        if call_mask.any():  # the traced spans right under a pipeline call
            top_mask = has_parent & call_mask[pr] & live[pr]
        else:  # no pipeline call: the spans at the top of the program
            top_mask = ~has_parent | ~live[pr] | txn[pr]  # (a parent not recorded, or still open, reads as none)
        top_mask &= live & ~txn & ~call_mask
        top_rows = np.nonzero(top_mask)[0]
        if len(top_rows) > MAX_STAGES:  # many calls at the top (a loop of traced calls): the longest ones
            dur = (t.end - t.start)[top_rows]
            top_rows = top_rows[np.argsort(-dur, kind="stable")[:MAX_STAGES]]
        tops = t.spans(top_rows)
    else:
        tops = []
    if len(t):  # a node-graph app's node executions (op node: ``analysis.nodes``), each a stage named by its node
        nodes = np.flatnonzero(t.op_mask("node") & live)
        if len(nodes) > MAX_STAGES:
            nodes = nodes[np.argsort(-(t.end - t.start)[nodes], kind="stable")[:MAX_STAGES]]
        node_spans = [s for s in t.spans(nodes) if not s.attrs.get("node.cached")]
        tops = [s for s in tops if s.op != "node"] + node_spans
        prompt_of = _node_prompts(t, nodes, prow) if node_spans else {}
    for s in tops:
        if s.op == "node":  # "prompt 1 · KSampler #3"
            k = prompt_of.get(s.span_id)
            out.append(Stage(f"prompt {k} · {s.name}" if k is not None else s.name, "node", s.name, s.start_ns,
                             s.end_ns, lane.window(s.start_ns, s.end_ns, s.attrs, thread=s.thread_id),
                             lane.window(s.start_ns, s.end_ns, s.attrs, "cuda", s.thread_id) if lane.has_cuda else None))
            continue
        if in_step(s) or (steps is not None and steps.kind == "repeat" and s.name == steps.span_name):
            continue
        out.append(Stage(s.name.rsplit(".", 2)[-2] + "." + s.name.rsplit(".", 1)[-1] if s.name.count(".") >= 2 else s.name,
                         "span", s.name, s.start_ns, s.end_ns, lane.window(s.start_ns, s.end_ns, s.attrs, thread=s.thread_id),
                         lane.window(s.start_ns, s.end_ns, s.attrs, "cuda", s.thread_id) if lane.has_cuda else None))
    out.sort(key=lambda g: g.start_ns)
    seen: dict[str, int] = {}
    for g in out:  # a span's stages told apart: "invoke #1", "invoke #2" in time order (the call number of each)
        if g.kind == "span":
            seen[g.label] = seen.get(g.label, 0) + 1
    nth: dict[str, int] = {}
    for g in out:
        if g.kind == "span" and seen[g.label] > 1:
            nth[g.label] = nth.get(g.label, 0) + 1
            g.label = f"{g.label} #{nth[g.label]}"
    if len(out) > MAX_STAGES:  # a long run: the steps and spans with the highest peaks (the largest among them)
        keep = sorted(out, key=lambda g: -(g.peak() if g.peak() is not None else -1))[:MAX_STAGES]
        out = sorted(keep, key=lambda g: g.start_ns)
    return out


def oom_record(data: RunData, lane: Lane | None = None) -> dict | None:
    """What is known of a run that ran out of memory, or None: the run ended by an out-of-memory error (status
    "oom", or ``env["memory"]["oom"]``), or was killed by SIGKILL (the kernel's OOM killer's signal).

    ``{"how": "error" | "killed", "error", "message", "span", "span_id", "step", "open": the span was still open
    (the process died inside it), "memory": memory at the time (bytes: ``rss``, ``rss_peak``, ``cuda_*``),
    "last": the last memory samples [[us from the run's start, rss, cuda allocated]], "snapshot": the allocator
    snapshot's summary (``memory_snapshot.summarize``) when ``--memory-history`` wrote one}``."""
    run = data.run
    env_mem = (run.env or {}).get("memory") or {}
    rec = env_mem.get("oom")
    killed = run.status in ("killed", "oom") and (run.error or "").startswith("SIGKILL")
    if run.status != "oom" and rec is None and not killed:
        return None
    lane = lane or Lane(data.memory, data.profile.hz)
    out: dict = {"how": "killed" if killed else "error", "error": (rec or {}).get("error") or run.error,
                 "message": (rec or {}).get("message") or "", "span": None, "span_id": None, "step": None,
                 "open": False, "memory": {}, "last": [], "snapshot": None}
    # where it died: the innermost span the error went through (error_type set), or the innermost still open
    err_type = (rec or {}).get("error")
    cands = [s for s in data.spans if s.op != "transaction" and (
        (s.error_type and (err_type is None or s.error_type == err_type)) if not killed else s.attrs.get("stepscope.open"))]
    if cands:
        by_id = {s.span_id: s for s in data.spans}
        ids = {s.span_id for s in cands}
        inner = [s for s in cands if not any(c.parent_id == s.span_id for c in cands)] or cands
        s = max(inner, key=lambda s: (s.start_ns, s.span_id))
        out.update(span=s.name, span_id=s.span_id, open=bool(s.attrs.get("stepscope.open")))
        cur = s
        while cur is not None:
            if STEP_ATTR in cur.attrs:
                out["step"] = cur.attrs[STEP_ATTR]
                break
            cur = by_id.get(cur.parent_id) if cur.parent_id is not None else None
        if out["step"] is None:  # inside a pipeline call but outside a step: the last step that ran before it
            prev = [p for p in data.spans if STEP_ATTR in p.attrs and p.end_ns <= s.start_ns and p.span_id not in ids]
            if prev:
                out["after_step"] = max(prev, key=lambda p: p.end_ns).attrs[STEP_ATTR]
    mem = {k: v for k, v in (rec or {}).items() if k in ("rss", "rss_peak", "cuda_allocated", "cuda_reserved", "cuda_peak")}
    if len(lane):
        t0 = run.start_ns
        k = len(lane)
        last = []
        for j in range(max(0, k - 10), k):
            last.append([round((int(lane.t[j]) - t0) / 1e3, 1), int(lane.rss[j]) if lane.rss[j] >= 0 else None,
                         int(lane.cuda[j]) if lane.cuda[j] >= 0 else None])
        out["last"] = last
        if "rss" not in mem and last and last[-1][1] is not None:
            mem["rss"] = last[-1][1]
            mem["sampled_at_us"] = last[-1][0]
        if "cuda_allocated" not in mem and last and last[-1][2] is not None:
            mem["cuda_allocated"] = last[-1][2]
    if "peak_rss" in env_mem and "rss_peak" not in mem:
        mem["rss_peak"] = env_mem["peak_rss"]
    out["memory"] = mem
    return out


def summarize_memory(data: RunData, steps=None, top: int = 15) -> MemorySummary | None:
    """The run's ``MemorySummary`` (None when it has no memory lane and no out-of-memory record)."""
    lane = Lane(data.memory, data.profile.hz)
    env_mem = (data.run.env or {}).get("memory") or {}
    oom = oom_record(data, lane)
    if not len(lane) and oom is None and not env_mem:
        return None
    if oom is not None and oom.get("snapshot") is None and env_mem.get("history_summary"):
        oom["snapshot"] = env_mem["history_summary"]
    peak_rss = env_mem.get("peak_rss")
    if data.processes:  # a job: its largest process's
        peaks = [((r.env or {}).get("memory") or {}).get("peak_rss") for r in [data.run, *data.processes]]
        peak_rss = max((p for p in peaks if isinstance(p, int)), default=peak_rss)
    if peak_rss is None and lane.has_rss:
        peak_rss = int(lane.rss.max())
    peak_cuda = env_mem.get("cuda_peak")
    if lane.has_cuda:
        peak_cuda = max(int(lane.cuda.max()), peak_cuda or 0)
    peak_res = int(lane.reserved.max()) if len(lane.reserved) and (lane.reserved >= 0).any() else env_mem.get("cuda_reserved")
    st = stages(data, lane, steps) if len(lane) else []
    peaked = [g for g in st if g.peak() is not None]
    largest = max(peaked, key=lambda g: g.peak()) if peaked else None
    return MemorySummary(len(lane), lane.period_ns, peak_rss, peak_cuda, peak_res,
                         per_name(data.spans, lane, top) if len(lane) else [], st, largest, oom)


def attach_steps(table, data: RunData, lane: Lane | None = None) -> None:
    """Fill each step-table row's memory (``StepRow.memory``: the ``WindowMemory`` of its window, CUDA's allocated
    bytes when recorded, else RSS)."""
    if table is None or not len(data.memory):
        return
    lane = lane or Lane(data.memory, data.profile.hz)
    kind = "cuda" if lane.has_cuda else "rss"
    rows = table.rows
    st = np.fromiter((r.start_ns for r in rows), np.int64, len(rows))
    en = np.fromiter((r.end_ns for r in rows), np.int64, len(rows))
    entry, exit_, peak, count = lane.windows(st, en, kind, np.fromiter((r.thread_id for r in rows), np.int64, len(rows)))
    period = lane.period_ns
    for k, r in enumerate(rows):
        e, x, p, n = int(entry[k]), int(exit_[k]), int(peak[k]), int(count[k])
        w = WindowMemory(kind, e if e >= 0 else None, x if x >= 0 else None, p if p >= 0 else None, samples=n)
        if w.peak is None:
            w.note = (f"no memory sample inside: shorter than the {period / 1e6:.1f} ms sampling period"
                      if r.end_ns - r.start_ns < period else "no memory sample inside")
        elif w.entry is not None:
            w.growth = max(w.peak - w.entry, 0)
        r.memory = w


def repeats_note(data: RunData, repeats: list, lane: Lane | None = None) -> str | None:
    """For ``explain``: whether the slow repeats coincide with memory growth. ``repeats``: ``analysis.explain.Repeats``
    (columns) or a list of ``Repeat``, with their groups; every repeat's window at once (``Lane.windows``: the
    figures ``Lane.window`` reads, without a Python call per repeat). Says so when the slow ones grew (peak minus entry) at least ``GROWTH_MIN_BYTES`` and
    ``GROWTH_RATIO`` times more than the fast ones on average, or started from a memory level that much higher
    (memory pressure: the allocator or the OS reclaiming); None otherwise or without a memory lane."""
    if not len(data.memory):
        return None
    lane = lane or Lane(data.memory, data.profile.hz)
    kind = "cuda" if lane.has_cuda else "rss"
    what = "CUDA allocated memory" if kind == "cuda" else "RSS"
    if isinstance(getattr(repeats, "start_ns", None), np.ndarray):  # ``analysis.explain.Repeats``: its columns
        st, en, th = repeats.start_ns, repeats.end_ns, repeats.thread_id
        in_group = {g: repeats.mask(g) for g in ("slow", "fast")}
    else:
        st = np.fromiter((r.start_ns for r in repeats), np.int64, len(repeats))
        en = np.fromiter((r.end_ns for r in repeats), np.int64, len(repeats))
        th = np.fromiter((r.thread_id for r in repeats), np.int64, len(repeats))
        group = np.array([r.group for r in repeats], dtype=object)
        in_group = {g: group == g for g in ("slow", "fast")}
    if not in_group["slow"].any() or not in_group["fast"].any():
        return None
    entry, _, peak, count = lane.windows(st, en, kind, th)  # every repeat at once (a million: a few numpy passes)
    growth = np.where((peak >= 0) & (entry >= 0), np.maximum(peak - entry, 0), -1)

    def figs(which: str):
        sel = in_group[which]
        g, e = growth[sel], entry[sel]
        g, e = g[g >= 0], e[e >= 0]
        return (float(np.mean(g)) if len(g) else None), (float(np.mean(e)) if len(e) else None), int(count[sel].sum())

    sg, se, sn = figs("slow")
    fg, fe, fn = figs("fast")
    if sg is None or fg is None:
        return None
    if sg - fg >= GROWTH_MIN_BYTES and sg >= GROWTH_RATIO * max(fg, 1.0):
        return (f"the slow repeats coincide with memory growth: {what} rose {fmt_bytes(sg)} inside each slow repeat on "
                f"average against {fmt_bytes(fg)} in the fast ones (sampled): allocation (page faults, the allocator "
                "growing) is part of the extra time")
    if se is not None and fe is not None and se - fe >= GROWTH_MIN_BYTES and se >= 1.25 * fe:
        return (f"the slow repeats run at a higher memory level: {what} {fmt_bytes(se)} at their start against "
                f"{fmt_bytes(fe)} for the fast ones (sampled): memory pressure may be part of the extra time")
    return None
