"""The processes of a job and, for a torch.distributed job, its steps rank by rank: which rank held each step up, by
how much, what it did meanwhile and how long the others waited for it.

A *step* is one call of the repeated span that every rank runs: the denoising step (``diffusion.step``) where the
ranks have one, else the traced name that every rank called at least twice with the most total time (a training
step); the i-th outermost call on each rank is step i. Per step and rank (numpy, ns):

- ``wall``: the call's duration; ``collective``: the time in the collective spans in it (op ``collective``:
  torch.distributed's calls, ``tracing.collectives.COLLECTIVES``, and DDP's gradient all-reduce, ``tracing.ddp``);
  ``busy``: the sampled time its thread ran in it (the wall time of its samples that are not idle,
  ``analysis.calltree.idle_mask``: on CPU, not blocked), at most ``wall - collective`` (a rank in a collective waits
  for the others, even when its backend spins on the CPU meanwhile); ``waited``: ``wall - busy`` (blocked in a
  collective, I/O, a lock).
- The step's *straggler* is the rank with the most busy time; its lead is that minus the median busy time of the
  other ranks. Under synchronous data parallelism every rank's step ends together (the others wait for the
  straggler inside the gradient all-reduce), so wall times look alike: the running time tells them apart.
- A step is *held up* when the lead exceeds ``HELD_SHARE`` of the median step wall time, ``HELD_MIN_NS`` and
  ``HELD_PERIODS`` sampling periods (busy times are sampled: each sample stands for about one period). The
  job's straggler is the rank that leads most held-up steps; its cause, the functions whose self time (busy samples)
  on it in those steps exceeds the other ranks' mean in the same steps (as ``explain`` compares slow and fast
  repeats).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.model import RunData
from .calltree import ProfileIndex
from ..core.spantable import as_table
from ..core.jobids import process_index
from ..store.jobjoin import process_label
from ..core.steprules import STEP_ATTR

#: a step is held up by its straggler when the lead is over this share of the median step wall time...
HELD_SHARE = 0.2
#: ...and over this (ns), and over ``HELD_PERIODS`` sampling periods (busy times are sampled)
HELD_MIN_NS = 1_000_000
HELD_PERIODS = 3


@dataclass
class ProcessRow:
    """One process of a job: the top program first. Times in ns on the run's clock (``start_ns`` from the run's
    start); ``rank``/``local_rank``/``world_size``: from the launcher's environment (None: not a rank)."""

    label: str
    run_id: str
    pid: int
    ppid: int | None
    how: str
    command: list[str]
    status: str
    exit_code: int | None
    start_ns: int
    wall_ns: int | None
    span_count: int
    sample_count: int
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    error: str | None = None
    #: its host, and for a job ingested from several hosts that host's clock offset against the first (ns, taken off
    #: its times: ``store.jobjoin``) and how it was estimated (``ingest.apply.clock_offsets``); None: one host
    host: str = ""
    clock_offset_ns: int | None = None
    clock_basis: str | None = None


@dataclass
class RankSteps:
    """A job's steps rank by rank (see the module). ``ranks``: the ranks in order, ``labels`` their processes;
    ``wall``/``busy``/``waited``/``collective``: ``[step][rank position]`` ns (None: that rank has no such step);
    ``straggler``: per step the rank that led it; ``lead_ns`` per step; ``held``: the held-up steps; ``cause``: the
    job straggler's functions as ``(name, extra self ns per held-up step)``; ``waited_for``: per other rank, its
    ``waited`` summed over the held-up steps."""

    name: str
    ranks: list[int]
    labels: list[str]
    wall: list[list[float | None]]
    busy: list[list[float | None]]
    waited: list[list[float | None]]
    collective: list[list[float | None]]
    straggler: list[int | None]
    lead_ns: list[float]
    held: list[int] = field(default_factory=list)
    #: each rank's step window (clock ns) and thread: ``[step][rank position]`` (None: no such step)
    start_ns: list[list[int | None]] = field(default_factory=list)
    end_ns: list[list[int | None]] = field(default_factory=list)
    thread: list[list[int | None]] = field(default_factory=list)
    job_straggler: int | None = None
    cause: list[tuple[str, float]] = field(default_factory=list)
    waited_for: dict[int, float] = field(default_factory=dict)


def process_rows(data: RunData) -> list[ProcessRow]:
    """The job's processes (the top program, then each process run in start order); [] for a run of one process."""
    if not data.processes:
        return []
    out = []
    for run in [data.run, *data.processes]:
        p = run.process or {}
        out.append(ProcessRow(process_label(run) if run is not data.run else f"pid {run.pid} (top)", run.id, run.pid,
                              p.get("ppid"), p.get("how", "top"), list(run.command), run.status, run.exit_code,
                              run.start_ns - int(p.get("clock_offset_ns") or 0) - data.run.start_ns, run.wall_time_ns,
                              run.span_count, run.sample_count, p.get("rank"), p.get("local_rank"), p.get("world_size"),
                              run.error, str(p.get("host") or run.host or ""), p.get("clock_offset_ns"),
                              p.get("clock_basis")))
    return out


def _outermost(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Mask of the calls (sorted by start, one thread) not inside an earlier one."""
    keep = np.ones(len(start), bool)
    reach = -1
    for i in range(len(start)):
        if start[i] < reach:
            keep[i] = False
        else:
            reach = end[i]
    return keep


def _whole_steps(t, per: dict[int, np.ndarray], window: bool) -> dict[int, np.ndarray]:
    """Each rank's steps without those a capture window cut at its end (``stepscope.cut``); for a capture window
    (``window``: each rank's window opened at its own moment), also without the steps that ended before the last
    rank's first step began, so that step i is the same step on every rank (synchronous ranks' steps overlap)."""
    cut = set(t.rows_with_attr("stepscope.cut").tolist()) if t.attrs else set()
    per = {k: np.array([r for r in v.tolist() if r not in cut], np.int64) for k, v in per.items()}
    if window and all(len(v) for v in per.values()):
        first = max(int(t.start[v[0]]) for v in per.values())
        per = {k: v[t.end[v] > first] for k, v in per.items()}
    return per


def rank_steps(data: RunData, index: ProfileIndex | None = None, name: str | None = None) -> RankSteps | None:
    """The job's steps rank by rank, or None (fewer than two ranks, or no span every rank repeats); ``name``: the
    span to take as the step (default: the denoising step, else the one every rank repeats with the most time)."""
    rank_of = {k: int(r.process["rank"]) for k, r in enumerate(data.processes, 1)
               if isinstance((r.process or {}).get("rank"), int)}
    if len(set(rank_of.values())) < 2:
        return None
    t = as_table(data.spans)
    if not len(t):
        return None
    proc = process_index(t.thread)
    ks = sorted(rank_of, key=lambda k: rank_of[k])
    steps_rows = t.rows_with_attr(STEP_ATTR) if t.attrs else np.zeros(0, np.int64)
    per: dict[int, np.ndarray] = {}
    if name is not None:
        code = t.code(name)
        for k in ks:
            rows = np.flatnonzero((t.name == code) & (proc == k)) if code >= 0 else np.zeros(0, np.int64)
            per[k] = rows[_outermost(t.start[rows], t.end[rows])]
        if min(len(v) for v in per.values()) < 1:
            return None
    elif len(steps_rows) and all((proc[steps_rows] == k).sum() >= 2 for k in ks):
        for k in ks:
            rows = steps_rows[proc[steps_rows] == k]
            per[k] = rows[_outermost(t.start[rows], t.end[rows])]
        name = STEP_ATTR
    else:
        best, best_total = None, 0.0
        # not a step: the root, collectives and backward (spans the user did not name)
        work = ~(t.op_mask("transaction") | t.op_mask("collective") | t.op_mask("backward"))
        dur = t.dur
        for code in np.unique(t.name[work]).tolist():
            m = work & (t.name == code)
            if all((m & (proc == k)).sum() >= 2 for k in ks):
                total = float(dur[m].sum())
                if total > best_total:
                    best, best_total = code, total
        if best is None:
            return None
        name = t.names[best]
        for k in ks:
            rows = np.flatnonzero((t.name == best) & (proc == k))
            per[k] = rows[_outermost(t.start[rows], t.end[rows])]
    per = _whole_steps(t, per, data.run.meta.capture is not None)
    if min(len(v) for v in per.values()) < 1:
        return None
    index = index or ProfileIndex(data.profile)
    n_steps = max(len(v) for v in per.values())
    R = len(ks)
    wall = np.full((n_steps, R), np.nan)
    busy = np.full((n_steps, R), np.nan)
    coll = np.full((n_steps, R), np.nan)
    coll_mask = t.op_mask("collective")  # torch.distributed's calls and DDP's gradient all-reduce (tracing/ddp.py)
    running = np.where(index.idle, 0.0, index.weight)  # the sampled wall time its thread ran (not waiting)
    for j, k in enumerate(ks):
        rows = per[k]
        st, en, th = t.start[rows], t.end[rows], t.thread[rows]
        wall[: len(rows), j] = en - st
        idx, win = index.select_many(st, en, th)
        busy[: len(rows), j] = np.bincount(win, weights=running[idx], minlength=len(rows))[: len(rows)]
        c_rows = np.flatnonzero(coll_mask & (proc == k))
        c_start, c_dur = t.start[c_rows], t.dur[c_rows]
        lo = np.searchsorted(c_start, st, "left")
        hi = np.searchsorted(c_start, en, "left")
        csum = np.concatenate([[0], np.cumsum(c_dur)])
        coll[: len(rows), j] = csum[hi] - csum[lo]
    # time in collectives is waiting for the others whatever the samples say (gloo may spin while it waits)
    busy = np.minimum(busy, np.clip(wall - coll, 0, None))
    waited = np.clip(wall - busy, 0, None)
    win_start = [[None] * R for _ in range(n_steps)]
    win_end = [[None] * R for _ in range(n_steps)]
    win_thread = [[None] * R for _ in range(n_steps)]
    for j, k in enumerate(ks):
        for s_, row in enumerate(per[k].tolist()):
            win_start[s_][j], win_end[s_][j], win_thread[s_][j] = int(t.start[row]), int(t.end[row]), int(t.thread[row])
    straggler: list[int | None] = []
    lead = np.zeros(n_steps)
    for s in range(n_steps):
        b = busy[s]
        ok = ~np.isnan(b)
        if ok.sum() < 2:
            straggler.append(None)
            continue
        j = int(np.nanargmax(b))
        others = np.delete(b, j)
        lead[s] = float(b[j] - np.nanmedian(others))
        straggler.append(ks[j])
    med_wall = float(np.nanmedian(wall)) if np.isfinite(wall).any() else 0.0
    period = 1e9 / data.profile.hz if data.profile.hz else 0.0
    floor = max(HELD_MIN_NS, HELD_SHARE * med_wall, HELD_PERIODS * period)
    held = [s for s in range(n_steps) if straggler[s] is not None and lead[s] > floor]
    out = RankSteps(name, [rank_of[k] for k in ks], [process_label(data.processes[k - 1]) for k in ks],
                    _rows(wall), _rows(busy), _rows(waited), _rows(coll),
                    [None if k is None else rank_of[k] for k in straggler], lead.tolist(), held, win_start, win_end,
                    win_thread)
    if held:
        counts: dict[int, int] = {}
        for s in held:
            counts[straggler[s]] = counts.get(straggler[s], 0) + 1
        top_k = max(counts, key=lambda k: (counts[k], -ks.index(k)))
        out.job_straggler = rank_of[top_k]
        j = ks.index(top_k)
        mine = [s for s in held if straggler[s] == top_k]
        out.waited_for = {rank_of[k]: float(np.nansum(waited[mine, i])) for i, k in enumerate(ks) if k != top_k}
        out.cause = _cause(index, t, per, ks, j, mine)
    return out


def _rows(a: np.ndarray) -> list[list[float | None]]:
    return [[None if np.isnan(x) else float(x) for x in row] for row in a.tolist()]


def _cause(index: ProfileIndex, t, per: dict, ks: list[int], j: int, steps: list[int], top: int = 5) -> list[tuple[str, float]]:
    """Functions whose busy self time in ``steps`` on rank position ``j`` exceeds the other ranks' mean there, as
    ``(name, extra ns per step)``, largest first."""
    def self_ns(k: int) -> np.ndarray:
        rows = per[k][[s for s in steps if s < len(per[k])]]
        if not len(rows):
            return np.zeros(len(index.functions))
        idx, _ = index.select_many(t.start[rows], t.end[rows], t.thread[rows])
        idx = idx[~index.idle[idx]]
        return index.function_times(idx, "wall")[0]

    mine = self_ns(ks[j])
    others = [self_ns(k) for i, k in enumerate(ks) if i != j]
    extra = (mine - np.mean(others, axis=0)) / max(len(steps), 1)
    order = np.argsort(-extra)[:top]
    return [(index.functions[f].name, float(extra[f])) for f in order.tolist() if extra[f] > 0]


@dataclass
class RankChange:
    """One rank of two runs of the same job (``diff``): its steps' median wall and running time in A and B (ns), the
    ratio B / A of the wall medians, and the held-up steps it led in each."""

    rank: int
    steps_a: int
    steps_b: int
    wall_a_ns: float | None
    wall_b_ns: float | None
    busy_a_ns: float | None
    busy_b_ns: float | None
    ratio: float | None
    led_a: int
    led_b: int


def rank_changes(a: RunData, b: RunData, index_a: ProfileIndex | None = None,
                 index_b: ProfileIndex | None = None) -> tuple[str | None, list[RankChange]]:
    """Two jobs compared rank by rank, on the step B takes (the same span name in A): ``(step name, changes)``;
    ``(None, [])`` when either has fewer than two ranks or no common step."""
    rb = rank_steps(b, index_b) if b.processes else None
    if rb is None or not a.processes:
        return None, []
    ra = rank_steps(a, index_a, rb.name if rb.name != STEP_ATTR else None)
    if ra is None or ra.name != rb.name:
        return None, []

    def per_rank(rs: RankSteps) -> dict[int, tuple[int, float | None, float | None, int]]:
        out = {}
        for j, r in enumerate(rs.ranks):
            wall = [row[j] for row in rs.wall if row[j] is not None]
            busy = [row[j] for row in rs.busy if row[j] is not None]
            led = sum(1 for s in rs.held if rs.straggler[s] == r)
            out[r] = (len(wall), float(np.median(wall)) if wall else None, float(np.median(busy)) if busy else None, led)
        return out

    pa, pb = per_rank(ra), per_rank(rb)
    changes = []
    for r in sorted(set(pa) | set(pb)):
        na, wa, ba, la = pa.get(r, (0, None, None, 0))
        nb, wb, bb, lb = pb.get(r, (0, None, None, 0))
        changes.append(RankChange(r, na, nb, wa, wb, ba, bb, wb / wa if wa and wb is not None else None, la, lb))
    return rb.name, changes
