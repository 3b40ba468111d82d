"""Per-step and per-repeat tables (slow by ``analysis.slow``): the rows' windows, the traced names inside them,
the untraced rest and its sampled functions (span aggregates: ``analysis.spans``).

Steps are the outermost spans tagged ``diffusion.step`` in each call (nested denoisers inside them). A call is the
nearest traced pipeline ``__call__``; else the nearest traced span around more than one step (a node, a request);
else the thread split where it leaves the steps' driving function (``analysis.steploop.steps_driver``, from the
samples: a worker between requests). Steps are numbered from 0 per call; a step's window runs to the next step (the
last one's end: ``analysis.steploop``). Each row has a column per traced name that ran in its window, ``untraced``
(the window minus the outermost traced spans) and, for a slow row, the sampled functions of that untraced time
(``Fill``). Without steps the repeat table does the same for the calls of the most repeated span.

Everything is computed on the span columns (the repeat table vectorised over (repeat, span inside) pairs); past
``MAX_ROWS`` rows a table keeps the first ``HEAD_ROWS`` and then the slowest slow ones, the rule and the shape being
computed over all of them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..core.model import Span
from ..core.spantable import SpanTable, as_table
from ..core.steprules import NESTED_ATTR, STEP_ATTR, STEP_OP, is_call_name
from .cpuwait import waits as cpu_waits
from .slow import call_slow, shape_of, slow_cells
from .spans import SpanStat, span_stats
from .threadrows import ThreadRows, thread_rows
from .steploop import last_step_end, left_driver, steps_driver


UNTRACED = "untraced"
#: The untraced time of a step is named (its sampled functions) when it is slow among the steps' untraced
#: times and over this share of the median step.
MIN_UNTRACED_SHARE = 0.1


@dataclass(slots=True)
class Fill:
    """A sampled function in a step's untraced time: self time (ns) at the leaf over the step's samples
    that fall outside every traced span; ``via``: the nearest caller that is the program's own code or a
    callback (the frame that entered the library), when it differs."""

    function: str
    file: str
    line: int
    self_ns: float
    via: str | None = None


@dataclass(slots=True)
class StepRow:
    """One denoising step (or one repeat of a span). ``call``: which pipeline call (0-based); ``step``:
    the ``diffusion.step`` index (or the repeat's index); ``wall_ns``: the step's window (see
    ``step_table``); ``by_name``: ns per traced name run inside the window (nested spans included);
    ``untraced_ns``: wall minus the time of the outermost traced spans inside the window (callbacks,
    previews, scheduler glue that nothing names); ``fill``: for a slow step (or a step whose untraced
    time is slow), the sampled functions in that untraced time, largest first; ``slow``: by the rule of
    ``analysis.slow``; ``slow_cells``: the columns ("wall", "untraced" or a traced name) that are slow
    among their column in a slow row; ``warmup``: the first row, slow, set apart as a warm-up (see
    ``analysis.slow``); ``start_ns``/``end_ns``/``thread_id``: the window; ``memory``: its memory (entry, exit,
    peak, growth: ``analysis.memory``), or None."""

    call: int
    step: int
    wall_ns: int
    start_ns: int
    end_ns: int
    thread_id: int
    by_name: dict[str, int] = field(default_factory=dict)
    untraced_ns: int = 0
    fill: list[Fill] = field(default_factory=list)
    slow: bool = False
    ratio: float = 1.0
    slow_cells: list[str] = field(default_factory=list)
    warmup: bool = False
    #: the window's memory (``analysis.memlane.WindowMemory``), filled by ``analysis.memory.attach_steps``
    memory: object = None
    #: the window's wait for a CPU (ns; ``analysis.cpuwait``), None where not recorded
    cpu_wait_ns: int | None = None
    #: slow by its wall time only: its wait for a CPU was the difference (``analysis.slow``), so not slow
    waited: bool = False


#: A step or repeat table with more rows than this keeps, as StepRow objects, its first ``HEAD_ROWS`` rows and
#: then its slow rows (the slowest ones) up to ``MAX_ROWS`` rows in all; the rule, the shape, the columns and the
#: slow cells still cover every row (``StepTable.total_rows``, ``slow_count``).
MAX_ROWS = 1000
HEAD_ROWS = 200


@dataclass(slots=True)
class StepTable:
    """Per-step times. ``kind``: "diffusion.step" (steps from the attribute) or "repeat" (repeats of
    ``span_name``). ``columns``: traced names shown, by total time; ``rule``: how slow is decided, with
    its numbers (``analysis.slow``); ``noisy``: the repeats are too noisy to call (then no row is slow);
    ``shape``: of the slow rows (``analysis.slow.shape_of``: "first", "every k", "irregular", "none").
    ``total_rows``: how many steps/repeats the rule ran over; ``slow_count``: how many of them are slow.
    ``rows`` holds them all up to ``MAX_ROWS``; past it, the first ``HEAD_ROWS`` and the slowest slow ones (a row's
    ``step`` keeps its index among all)."""

    kind: str
    span_name: str | None
    columns: list[str]
    rows: list[StepRow]
    median_ns: float
    rule: str
    noisy: bool = False
    shape: str = "none"
    total_rows: int = 0
    slow_count: int = 0
    #: call -> what it is in a node-graph app ("prompt 1 · KSampler #3": the node that ran the sampler, and its
    #: prompt; ``analysis.nodes``), for the calls that ran inside a node
    call_labels: dict[int, str] = field(default_factory=dict)
    #: how many rows were slow only by their wait for a CPU (``StepRow.waited``)
    waited_count: int = 0

    @property
    def slow_rows(self) -> list[StepRow]:
        return [r for r in self.rows if r.slow]


def is_pipeline_call(name: str) -> bool:
    """A call that numbers its steps from 0: a pipeline call, a sampler call (``core.steprules.is_call_name``)."""
    return is_call_name(name)


def _content(t: SpanTable, tr: ThreadRows, prow: np.ndarray, lo: int, hi: int, end: int,
             skip: int = -1) -> tuple[dict[str, int], list[tuple[int, int]]]:
    """``(ns per name, outermost traced intervals clipped to the window, merged)`` of the spans at positions
    ``[lo, hi)`` of ``tr`` (a window's spans; transactions and the row ``skip`` left out). ``prow``: each
    row's parent row (``SpanTable.parent_rows``)."""
    rows = tr.rows[lo:hi]
    tx, it = _op_code(t, "transaction"), _op_code(t, STEP_OP)
    ok = (t.op[rows] != tx) & (t.op[rows] != it) & (rows != skip)  # (a loop iteration's span is the window itself)
    pr = prow[rows]
    pin = (pr >= 0) & (tr.pos[np.maximum(pr, 0)] >= lo) & (tr.pos[np.maximum(pr, 0)] < hi)
    pit = (pr >= 0) & (t.op[np.maximum(pr, 0)] == it)
    top = ok & (~pin | (pr == skip) | pit)
    by_name: dict[str, int] = {}
    okr = rows[ok]
    if len(okr):
        codes = t.name[okr]
        uniq, first, inv = np.unique(codes, return_index=True, return_inverse=True)
        sums = np.zeros(len(uniq), np.int64)
        np.add.at(sums, inv, t.dur[okr])
        for k in np.argsort(first, kind="stable").tolist():
            by_name[t.names[int(uniq[k])]] = int(sums[k])
    tops = sorted(zip(t.start[rows[top]].tolist(), np.minimum(t.end[rows[top]], end).tolist()))
    merged: list[tuple[int, int]] = []
    for a, b in tops:
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return by_name, merged


def _op_code(t: SpanTable, op: str) -> int:
    try:
        return t.ops.index(op)
    except ValueError:
        return -1


def _verdict(wall: np.ndarray, untraced: np.ndarray, columns: dict[str, np.ndarray], waits=None):
    """The rule over every row: ``(SlowCall, cells)``; ``cells``: column ("wall", "untraced", a traced name)
    -> per row, whether that cell is slow among its column (``columns``: ns per row, NaN where missing).
    ``waits``: each row's wait for a CPU (ns, NaN unknown; ``analysis.cpuwait``), or None."""
    verdict = call_slow(wall, waits)
    own = np.asarray(wall, float)
    if verdict.wait_ns is not None:  # the wall cell as the row is judged: its time less its wait for a CPU
        own = np.maximum(own - np.nan_to_num(verdict.wait_ns), 0.0)
    cells = {"wall": slow_cells(own), UNTRACED: slow_cells(np.asarray(untraced, float))}
    for c, v in columns.items():
        cells[c] = slow_cells(v)
    # an untraced cell is only worth naming when it is a real part of a step (not 1 ms against 0.5)
    cells[UNTRACED] &= np.asarray(untraced, float) > MIN_UNTRACED_SHARE * verdict.median
    return verdict, cells


def _shown(n: int, mask: np.ndarray, wall: np.ndarray, max_rows: int | None = MAX_ROWS) -> np.ndarray:
    """The rows kept as StepRow objects (``MAX_ROWS``; None: all): the first ``HEAD_ROWS``, then the slow rows,
    the slowest first when they do not all fit; in row order."""
    if max_rows is None or n <= max_rows:
        return np.arange(n)
    keep = np.zeros(n, bool)
    keep[:HEAD_ROWS] = True
    cand = np.flatnonzero(mask & ~keep)
    keep[cand[np.argsort(-wall[cand], kind="stable")[:max_rows - HEAD_ROWS]]] = True
    return np.flatnonzero(keep)


def _mark(rows: list[StepRow], shown: np.ndarray, verdict, cells: dict, index, intervals) -> None:
    """Slow flags, ratios, slow cells and the untraced fill of the kept rows; ``intervals(k)``: row ``k``'s
    outermost traced intervals."""
    med = verdict.median
    for r, k in zip(rows, shown.tolist()):
        r.ratio = r.wall_ns / med if med else 1.0
        r.slow = bool(verdict.mask[k])
        if verdict.wait_ns is not None and not np.isnan(verdict.wait_ns[k]):
            r.cpu_wait_ns = int(verdict.wait_ns[k])
            r.waited = bool(verdict.waited[k])
        r.warmup = bool(k == 0 and verdict.warmup)
        if r.slow:
            r.slow_cells = [c for c, m in cells.items() if m[k]]
        if index is not None and (r.slow or cells[UNTRACED][k]):
            r.fill = untraced_fill(index, r.start_ns, r.end_ns, r.thread_id, intervals(k))



def step_table(spans, max_columns: int = 8, index=None, max_rows: int | None = MAX_ROWS) -> StepTable | None:
    """Steps from the ``diffusion.step`` attribute, or None when no span carries it. ``spans``: Span objects
    or a ``SpanTable`` (only the tagged spans and their ancestors become objects).

    A step is the outermost denoiser calls (and scheduler steps) with one index in one pipeline call: a
    denoiser span inside another denoiser span (``diffusion.nested``, or a tagged ancestor) belongs to
    the outer one's step, never a step or call of its own. A pipeline call is the nearest traced
    pipeline ``__call__`` around the step; else the nearest traced span around more than one step (a node of a
    node-graph app, a request handler: the call that drives the steps); else the thread, where a step index
    going back, or the thread leaving the function that drives the steps between two of them (the samples' loop
    function: a worker gone on to other nodes or waiting for the next request), starts a new call. Steps count
    from 0 in each call.
    A step's window runs from its first span's start to the next step's first span's start, so that work
    between the traced calls (step callbacks, previews, Python glue) counts in its step; the last step of
    a call takes the traced calls that follow its spans and ran in the earlier steps too (a traced
    callback), up to the first other traced span, and ends where its loop iteration ends, read from the
    samples (``analysis.steploop``: the callback after the last step belongs to it). Every traced span that runs inside
    a window gets a column; ``untraced`` is the rest of the window. ``index``: the run's ProfileIndex
    (for the last step's end and the untraced fill), or None. ``max_rows``: rows kept (see ``StepTable``;
    None: every row).
    """
    t = as_table(spans)
    trows = t.rows_with_attr(STEP_ATTR)
    if not len(trows):
        return None
    tagged = t.spans(trows)
    known: dict[int, Span | None] = {s.span_id: s for s in tagged}

    def get(span_id: int | None) -> Span | None:
        if span_id is None:
            return None
        if span_id not in known:
            known[span_id] = t.get(span_id)
        return known[span_id]

    tagged_ids = {s.span_id for s in tagged}

    def outer_of(s: Span) -> tuple[bool, int | None, list[int]]:
        """(has a tagged ancestor, nearest pipeline-call ancestor id, the traced ancestors that are neither
        tagged nor transactions, nearest first)."""
        nested, call, chain = False, None, []
        p = get(s.parent_id)
        while p is not None:
            if p.span_id in tagged_ids:
                nested = True
            elif p.op != "transaction":
                chain.append(p.span_id)
            if call is None and is_pipeline_call(p.name):
                call = p.span_id
            p = get(p.parent_id)
        return nested, call, chain

    tops = []  # (span, pipeline call, chain)
    under: dict[int, set] = defaultdict(set)  # traced ancestor -> the step indices of the top-level steps inside it
    for s in sorted(tagged, key=lambda s: s.start_ns):
        if s.attrs.get(NESTED_ATTR):
            continue
        nested, call, chain = outer_of(s)
        if not nested:
            tops.append((s, call, chain))
            for a in chain:
                under[a].add(int(s.attrs[STEP_ATTR]))
    members: dict = defaultdict(list)  # call key -> top-level tagged spans
    for s, call, chain in tops:
        if call is None:  # the nearest traced span around more than one step drives them (a node, a request)
            call = next((a for a in chain if len(under[a]) > 1), None)
        members[call if call is not None else ("thread", s.thread_id)].append(s)
    groups: list[tuple[int, int, list[Span], int | None]] = []  # (call, step, spans, limit ns)
    ncall = 0
    call_span: dict[int, int] = {}  # call -> the span that drives its steps (a pipeline or sampler call)
    for key, ms in members.items():
        if not isinstance(key, tuple):
            call_span[ncall] = key
        cur: dict[int, list[Span]] = {}
        last = -1
        end = None
        driver = steps_driver(index, ms) if isinstance(key, tuple) and index is not None and len(index) else None
        limit = get(key).end_ns if not isinstance(key, tuple) else None
        for s in ms:
            k = int(s.attrs[STEP_ATTR])
            # the index went back: another pipeline call; or, with no traced span around the steps, the thread
            # left the function that drives them between two steps (a worker between two requests): another call
            if k < last or (driver is not None and k != last and end is not None
                            and left_driver(index, s.thread_id, end, s.start_ns, driver)):
                base = min(cur)  # (the call ends where the next one starts, at the latest)
                groups.extend((ncall, kk - base, v, s.start_ns if k >= last else None) for kk, v in cur.items())
                ncall, cur, last = ncall + 1, {}, -1
                if not isinstance(key, tuple):
                    call_span[ncall] = key
            cur.setdefault(k, []).append(s)
            last = max(last, k)
            end = s.end_ns if end is None else max(end, s.end_ns)
        base = min(cur)  # steps count from 0 in each call
        groups.extend((ncall, kk - base, v, limit) for kk, v in cur.items())
        ncall += 1
    groups.sort(key=lambda g: (g[0], min(s.start_ns for s in g[2])))
    tr = thread_rows(t)
    prow = t.parent_rows()
    rows = []
    for call, step, ms, _ in groups:
        start = min(s.start_ns for s in ms)
        end = max(s.end_ns for s in ms)
        rows.append(StepRow(call, step, end - start, start, end, ms[0].thread_id))
    for k, row in enumerate(rows):
        nxt = rows[k + 1] if k + 1 < len(rows) else None
        if nxt is not None and nxt.call == row.call and nxt.start_ns >= row.end_ns:
            row.end_ns = nxt.start_ns
            continue
        # the last step of a call: traced calls that ran in the earlier steps (a traced callback) and
        # follow its spans still belong to it, up to the first other traced span (the VAE decode)
        limit = groups[k][3]
        earlier = [r for r in rows[:k] if r.call == row.call]
        seen: set[int] = set()
        for r in earlier:
            lo, hi = tr.within(r.thread_id, r.start_ns, r.end_ns)
            seen.update(np.unique(t.name[tr.rows[lo:hi]]).tolist())
        lo, hi = tr.within(row.thread_id, row.end_ns, limit if limit is not None else 1 << 62)
        for pos in range(lo, hi):
            x = int(tr.rows[pos])
            if int(t.name[x]) not in seen:
                limit = int(t.start[x]) if limit is None else min(limit, int(t.start[x]))
                break
            row.end_ns = max(row.end_ns, int(t.end[x]))
        if index is not None:
            row.end_ns = max(row.end_ns, last_step_end(index, [(r.start_ns, r.end_ns) for r in earlier], row.start_ns,
                                                       row.end_ns, row.thread_id, limit,
                                                       frozenset(s.name for s in groups[k][2])))
    for row in rows:
        row.wall_ns = row.end_ns - row.start_ns
    totals: dict[str, int] = defaultdict(int)
    intervals = []
    for row in rows:
        lo, hi = tr.within(row.thread_id, row.start_ns, row.end_ns)
        row.by_name, tops = _content(t, tr, prow, lo, hi, row.end_ns)
        intervals.append(tops)
        row.untraced_ns = max(row.wall_ns - sum(b - a for a, b in tops), 0)
        for n, v in row.by_name.items():
            totals[n] += v
    cols = sorted(totals, key=lambda k: -totals[k])[:max_columns]
    verdict, cells = _verdict(np.array([r.wall_ns for r in rows], float), np.array([r.untraced_ns for r in rows], float),
                              {c: np.array([r.by_name.get(c, np.nan) for r in rows], float) for c in cols},
                              cpu_waits(t, [r.thread_id for r in rows], [r.start_ns for r in rows],
                                        [r.end_ns for r in rows]))
    shown = _shown(len(rows), verdict.mask, np.array([r.wall_ns for r in rows]), max_rows)
    kept = [rows[k] for k in shown.tolist()]
    _mark(kept, shown, verdict, cells, index, lambda k: intervals[k])
    slow_idx = np.flatnonzero(verdict.mask).tolist()
    return StepTable(STEP_ATTR, None, cols, kept, verdict.median, verdict.rule, verdict.noisy,
                     shape_of(slow_idx, len(rows)), len(rows), len(slow_idx), _call_labels(call_span, get),
                     int(verdict.waited.sum()) if verdict.waited is not None else 0)


def _call_labels(call_span: dict[int, int], get) -> dict[int, str]:
    """call -> "prompt K · NODE" for the calls made inside a node of a node-graph app (op ``node``; its prompt: the
    nearest op ``prompt`` span, numbered in start order), else nothing."""
    out: dict[int, str] = {}
    prompts: dict[int, int] = {}
    for call, sid in call_span.items():
        node = prompt = None
        p = get(sid)
        while p is not None and (node is None or prompt is None):
            if p.op == "node" and node is None:
                node = p
            elif p.op == "prompt" and prompt is None:
                prompt = p
            p = get(p.parent_id)
        if node is None:
            continue
        if prompt is not None:
            prompts.setdefault(prompt.span_id, prompt.start_ns)
        out[call] = node.name if prompt is None else f"{prompt.span_id}\x00{node.name}"
    order = {sid: k for k, sid in enumerate(sorted(prompts, key=lambda x: prompts[x]))}
    for call, lab in out.items():
        if "\x00" in lab:
            sid, name = lab.split("\x00", 1)
            out[call] = f"prompt {order[int(sid)]} · {name}"
    return out


#: pairs (repeat, span inside it) handled at once by ``repeat_table``
_PAIRS_CHUNK = 500_000


def repeat_table(spans, name: str | None = None, max_columns: int = 8, index=None,
                 stats: list[SpanStat] | None = None) -> StepTable | None:
    """Each call of span ``name`` as a row (default: the name with >= 3 calls and the most total time,
    sync sites excluded); the traced spans inside each call get columns, ``untraced`` is the call's own
    time outside them. ``index``: the run's ProfileIndex for the untraced fill of slow calls, or None.
    ``spans``: Span objects or a ``SpanTable``; computed on the columns (a million calls: no object per call,
    rows past ``MAX_ROWS`` kept as the table says). ``stats``: ``span_stats`` of these spans, when known."""
    t = as_table(spans)
    if name is None:
        sync_names = {t.names[c] for c in np.unique(t.name[t.op_mask("sync")]).tolist()}
        stats = [s for s in (span_stats(t, None) if stats is None else stats)
                 if s.count >= 3 and s.name not in sync_names]
        if not stats:
            return None
        name = stats[0].name
    code = t.code(name)
    if code < 0:
        return None
    members = np.flatnonzero(t.name == code)
    n = len(members)
    tr = thread_rows(t)
    prow = t.parent_rows()
    ms, me, mth = t.start[members], t.end[members], t.thread[members]
    wall = me - ms
    lo, hi = tr.within_many(mth, ms, me)
    counts = hi - lo
    tx = _op_code(t, "transaction")
    union = np.zeros(n, np.float64)
    keys: list[np.ndarray] = []  # row * len(names) + name code, and its ns
    vals: list[np.ndarray] = []
    nn = len(t.names)
    j0 = 0
    while j0 < n:
        # members [j0, j1): at most _PAIRS_CHUNK pairs, and group offsets that fit in int64
        csum = np.cumsum(counts[j0:])
        j1 = j0 + max(1, int(np.searchsorted(csum, _PAIRS_CHUNK, "right")))
        big = int((wall[j0:j1]).max()) + 1
        j1 = min(j1, j0 + max(1, (1 << 62) // big))
        J = np.arange(j0, j1)
        c = counts[J]
        total = int(c.sum())
        if total:
            pj = np.repeat(J, c)
            pos = np.arange(total) - np.repeat(np.cumsum(c) - c, c) + np.repeat(lo[J], c)
            r = tr.rows[pos]
            mrow = members[pj]
            ok = (t.op[r] != tx) & (r != mrow)
            pr = prow[r]
            prpos = tr.pos[np.maximum(pr, 0)]
            pin = (pr >= 0) & (prpos >= lo[pj]) & (prpos < hi[pj])
            top = ok & (~pin | (pr == mrow))
            contrib = ok & (t.name[r] != code)
            if contrib.any():
                k = pj[contrib] * nn + t.name[r[contrib]]
                uk, inv = np.unique(k, return_inverse=True)
                keys.append(uk)
                vals.append(np.rint(np.bincount(inv, weights=t.dur[r[contrib]])).astype(np.int64))
            g = pj[top]
            if len(g):
                s0 = ms[g]
                a = t.start[r[top]] - s0
                b = np.minimum(t.end[r[top]], me[g]) - s0
                gl = (g - j0).astype(np.int64) * big
                cm = np.maximum.accumulate(gl + b)
                prev = np.concatenate(([-1], cm[:-1])) - gl
                union += np.bincount(g, weights=np.maximum(b - np.maximum(a, prev), 0), minlength=n)
        j0 = j1
    untraced = np.maximum(wall - np.rint(union).astype(np.int64), 0)
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    val = np.concatenate(vals) if vals else np.zeros(0, np.int64)
    krow, kname = key // nn, key % nn
    totals = np.bincount(kname, weights=val, minlength=nn)
    totals[code] += float(wall.sum())
    first_seen = np.full(nn, n, np.int64)
    np.minimum.at(first_seen, kname, krow)
    first_seen[code] = -1
    present = np.flatnonzero((first_seen < n))
    order = sorted(present.tolist(), key=lambda c_: (-totals[c_], first_seen[c_], c_))
    cols_codes = order[:max_columns]
    colv: dict[str, np.ndarray] = {}
    for c_ in cols_codes:
        if c_ == code:
            colv[t.names[c_]] = wall.astype(float)
        else:
            v = np.full(n, np.nan)
            sel = kname == c_
            v[krow[sel]] = val[sel]
            colv[t.names[c_]] = v
    verdict, cells = _verdict(wall.astype(float), untraced.astype(float), colv, cpu_waits(t, mth, ms, me))
    shown = _shown(n, verdict.mask, wall)
    # the kept rows' traced names: their (row, name) entries, in row order
    korder = np.argsort(krow, kind="stable")
    kr_sorted = krow[korder]
    rows = []
    ka = np.searchsorted(kr_sorted, shown, "left").tolist()
    kb = np.searchsorted(kr_sorted, shown, "right").tolist()
    for k, a_, b_ in zip(shown.tolist(), ka, kb):
        by_name = {name: int(wall[k])}
        for e in korder[a_:b_].tolist():
            by_name[t.names[int(kname[e])]] = int(val[e])
        row = StepRow(0, k, int(wall[k]), int(ms[k]), int(me[k]), int(mth[k]), by_name)
        row.untraced_ns = int(untraced[k])
        rows.append(row)

    def intervals(k: int) -> list[tuple[int, int]]:
        return _content(t, tr, prow, int(lo[k]), int(hi[k]), int(me[k]), skip=int(members[k]))[1]

    _mark(rows, shown, verdict, cells, index, intervals)
    slow_idx = np.flatnonzero(verdict.mask).tolist()
    return StepTable("repeat", name, [t.names[c_] for c_ in cols_codes], rows, verdict.median, verdict.rule,
                     verdict.noisy, shape_of(slow_idx, n), n, len(slow_idx),
                     waited_count=int(verdict.waited.sum()) if verdict.waited is not None else 0)


def untraced_fill(index, start: int, end: int, thread: int, traced: list[tuple[int, int]], top: int = 3) -> list[Fill]:
    """The sampled functions (self time) of ``thread`` in ``[start, end)`` outside the ``traced``
    intervals (sorted, disjoint), largest first, at most ``top``; each with ``via``: the deepest frame
    on its stacks that is the program's own code (``__main__`` or a file outside site-packages and the
    standard library) when that is not the function itself."""
    idx = index.select(start, end, thread)
    if not len(idx):
        return []
    t = index.t[idx]
    keep = np.ones(len(idx), bool)
    for a, b in traced:
        keep &= ~((t >= a) & (t < b))
    idx = idx[keep]
    if not len(idx):
        return []
    self_ns, _ = index.function_times(idx)
    out = []
    uniq, w, _ = index.stack_weights(idx)
    for fid in np.argsort(-self_ns)[:top].tolist():
        if self_ns[fid] <= 0:
            break
        f = index.functions[fid]
        via = None
        for sid in uniq[np.argsort(-w)].tolist():
            st = index.stack_funcs[sid]
            if st and st[-1] == fid:
                own = [g for g in st[:-1] if _own_code(index.functions[g])]
                if own:
                    via = index.functions[own[-1]].name
                break
        out.append(Fill(f.name, f.file, f.line, float(self_ns[fid]), via if via != f.name else None))
    return out


def _own_code(f) -> bool:
    """The program's own code: ``__main__`` or a file outside site-packages/dist-packages and the
    standard library (frozen modules included)."""
    if f.name.startswith("__main__."):
        return True
    file = f.file or ""
    if not file or file.startswith("<") or "site-packages" in file or "dist-packages" in file:
        return False
    import sysconfig

    return not file.startswith(sysconfig.get_paths()["stdlib"])
