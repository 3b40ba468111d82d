"""Budgets of a test's run: parsed from the ``@pytest.mark.stepscope`` marker, checked against the stored run.

A time budget is ``NAME: "STAT < VALUE"`` (several joined by ``,`` or ``and``: ``"p50 < 40ms, p95 < 60ms"``):

- ``NAME``: a span name, exact or a unique suffix of one (as ``stepscope diff --span``: ``UNet2DConditionModel.forward``
  names ``diffusers...UNet2DConditionModel.forward``); ``"step"``: the denoising steps (``analysis.steptable``: each
  step's window, as ``stepscope explain`` and ``diff`` see it); ``"run"`` or ``"test"``: the whole call of the test
  (its root transaction, else the run's wall time).
- ``STAT``: ``p50``, ``p90``, ``p95``, ``p99`` (percentiles of the calls' durations, numpy's default "linear"
  method: type 7 of Hyndman and Fan, interpolating between the two nearest ranks), ``mean``, ``min``, ``max`` or
  ``total`` (the sum).
- ``<`` or ``<=``, and a duration with its unit: ``ns``, ``us``, ``ms`` or ``s`` (``40ms``, ``1.5 s``).

A memory budget is ``"peak < VALUE"`` with a unit ``B``, ``KB``/``MB``/``GB``/``TB`` (powers of 1000) or
``KiB``/``MiB``/``GiB``/``TiB`` (powers of 1024): the highest memory within the run, CUDA's allocated bytes when the
run has CUDA figures, else the resident set (RSS): the run's memory samples (``analysis.memlane``) and the exact
readings of its step-level spans, so a peak between two samples can be missed (the test's entry and exit are
read too: ``ci.testrun``).

Parsing raises ``BudgetError`` (one line: what could not be read and an example). Checking is pure: it returns the
lines of the budgets missed (``check``), never raises for a run that lacks what a budget names (that is a miss
with its own line). Times in ns, memory in bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..core.model import RunData
from ..core.spantable import as_table
from ..core.units import fmt_bytes, fmt_ns

#: the statistics a time budget may name
STATS = ("p50", "p90", "p95", "p99", "mean", "min", "max", "total")
#: ns per unit of a duration
TIME_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
#: bytes per unit of a memory size (matched without regard to case: ``gib`` is ``GiB``)
MEMORY_UNITS = {"b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4,
                "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4}
#: NAME values that mean the whole test rather than a span
WHOLE = ("run", "test")
#: at most this many span names are listed when a budget names one that never ran
LISTED_NAMES = 5

_CLAUSE = re.compile(r"^\s*([A-Za-z0-9]+)\s*(<=|<)\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ]*)\s*$")


class BudgetError(ValueError):
    """A budget that cannot be read; the message is one line naming it and giving an example."""


@dataclass(frozen=True, slots=True)
class Limit:
    """One clause: ``stat`` (a ``STATS`` name, or "peak"), ``op`` ("<" or "<="), ``limit`` (ns or bytes) and ``text``:
    the limit as written, e.g. ``40 ms``."""

    stat: str
    op: str
    limit: float
    text: str

    def holds(self, value: float) -> bool:
        """Whether ``value`` (ns or bytes) keeps the limit."""
        return value < self.limit if self.op == "<" else value <= self.limit


@dataclass(frozen=True, slots=True)
class Budget:
    """A budget on ``name`` (a span name or suffix, "step", "run"/"test", or "memory") with its ``limits``."""

    name: str
    limits: tuple[Limit, ...]


def _clauses(text: str) -> list[str]:
    return [c for c in re.split(r",|\band\b", text) if c.strip()]


def parse_time(name: str, text: str, where: str = "budget") -> Budget:
    """The time budget ``{name: text}`` (see the module doc). ``where``: how to name it in a message. Raises
    BudgetError, e.g. ``budget['unet']: cannot read 'p50 < 40' (a duration needs a unit: ns, us, ms or s; e.g.
    'p50 < 40ms')``."""
    label = f"{where}[{name!r}]"
    if not isinstance(name, str) or not name.strip():
        raise BudgetError(f"{where}: a budget's key must be a span name, 'step' or 'run', got {name!r}")
    if not isinstance(text, str):
        raise BudgetError(f"{label}: must be a string, e.g. 'p50 < 40ms', got {text!r}")
    example = "e.g. 'p50 < 40ms' or 'p95 <= 1.5s, max < 2s'"
    limits = []
    for clause in _clauses(text) or [text]:
        m = _CLAUSE.match(clause)
        if not m:
            raise BudgetError(f"{label}: cannot read {text!r} (STAT < VALUE UNIT, {example})")
        stat, op, value, unit = m.group(1).lower(), m.group(2), m.group(3), m.group(4)
        if stat not in STATS:
            raise BudgetError(f"{label}: cannot read {text!r}: {stat!r} is not one of {', '.join(STATS)} ({example})")
        if unit not in TIME_UNITS:
            why = "a duration needs a unit" if not unit else f"{unit!r} is not a unit of time"
            raise BudgetError(f"{label}: cannot read {text!r} ({why}: ns, us, ms or s; {example})")
        limits.append(Limit(stat, op, float(value) * TIME_UNITS[unit], f"{float(value):g} {unit}"))
    return Budget(name.strip(), tuple(limits))


def parse_memory(text: str, where: str = "memory") -> Budget:
    """The memory budget ``text`` (``"peak < 2GiB"``). Raises BudgetError naming ``where`` and the text."""
    example = "e.g. 'peak < 2GiB' or 'peak <= 500 MB'"
    if not isinstance(text, str):
        raise BudgetError(f"{where}: must be a string, e.g. 'peak < 2GiB', got {text!r}")
    limits = []
    for clause in _clauses(text) or [text]:
        m = _CLAUSE.match(clause)
        if not m or m.group(1).lower() != "peak":
            raise BudgetError(f"{where}: cannot read {text!r} (peak < VALUE UNIT, {example})")
        value, unit = m.group(3), m.group(4)
        if unit.lower() not in MEMORY_UNITS:
            why = "a size needs a unit" if not unit else f"{unit!r} is not a unit of memory"
            raise BudgetError(f"{where}: cannot read {text!r} ({why}: B, KB, MB, GB, KiB, MiB, GiB; {example})")
        limits.append(Limit("peak", m.group(2), float(value) * MEMORY_UNITS[unit.lower()], f"{float(value):g} {unit}"))
    return Budget("memory", tuple(limits))


def parse_budgets(budget: dict | None, memory: str | None = None) -> list[Budget]:
    """The marker's ``budget={NAME: TEXT}`` and ``memory=TEXT`` as Budgets. Raises BudgetError."""
    if budget is not None and not isinstance(budget, dict):
        raise BudgetError(f"budget: must be a dict {{NAME: 'p50 < 40ms'}}, got {budget!r}")
    out = [parse_time(k, v) for k, v in (budget or {}).items()]
    if memory is not None:
        out.append(parse_memory(memory))
    return out


def statistic(stat: str, values) -> float:
    """``stat`` (a ``STATS`` name) of ``values`` (ns; at least one): percentiles by numpy's "linear" method."""
    a = np.asarray(values, dtype=np.float64)
    if stat.startswith("p"):
        return float(np.percentile(a, float(stat[1:])))
    return float({"mean": np.mean, "min": np.min, "max": np.max, "total": np.sum}[stat](a))


# -- what a run holds ---------------------------------------------------------------------------------------------

def durations(data: RunData, name: str) -> tuple[str, np.ndarray]:
    """The durations (ns) of what ``name`` names in the run, in time order, and its full name: ``"step"`` the steps'
    windows, ``"run"``/``"test"`` the whole call, else the spans of that name or unique suffix (transactions left
    out). Raises LookupError with one line when nothing or several names match."""
    t = as_table(data.spans)
    if name in WHOLE:
        txn = np.flatnonzero(t.op_mask("transaction"))
        if len(txn):
            return "test", t.dur[txn[:1]].astype(np.float64)
        if data.run.wall_time_ns is None:
            raise LookupError(f"run {data.run.id} has no end")
        return "test", np.array([float(data.run.wall_time_ns)])
    if name == "step":
        from ..analysis.steptable import step_table

        table = step_table(t, max_rows=None)
        if table is None or table.kind != "diffusion.step" or not table.rows:
            raise LookupError(f"no denoising step ran in run {data.run.id} (trace the denoiser's forward and the "
                              "scheduler's step, or name a span)")
        return "step", np.array([float(r.wall_ns) for r in table.rows])
    live = ~t.op_mask("transaction")
    present = set(np.unique(t.name[live]).tolist()) if len(t) else set()
    names = [t.names[c] for c in sorted(present)]
    if name in names:
        full = name
    else:
        matches = sorted(n for n in names if n.endswith("." + name) or n.endswith(name))
        if len(matches) > 1:
            raise LookupError(f"{name!r} names several spans in run {data.run.id}: {', '.join(matches[:LISTED_NAMES])}"
                              + (f" and {len(matches) - LISTED_NAMES} more" if len(matches) > LISTED_NAMES else ""))
        if not matches:
            counts = np.bincount(t.name[live], minlength=len(t.names)) if len(t) else np.zeros(0, np.int64)
            top = sorted(names, key=lambda n: (-int(counts[t.code(n)]), n))[:LISTED_NAMES]
            ran = (f"; spans that ran: {', '.join(top)}" + (f" and {len(names) - len(top)} more" if len(names) > len(top)
                                                             else "")) if names else "; no traced span ran"
            raise LookupError(f"no span named {name!r} ran in run {data.run.id}{ran}")
        full = matches[0]
    rows = np.flatnonzero(live & (t.name == t.code(full)))
    return full, t.dur[rows].astype(np.float64)


def peak_memory(data: RunData) -> tuple[int | None, str]:
    """The highest memory within the run (bytes, None without a figure) and its kind, "cuda" or "rss" (see the
    module doc)."""
    from ..analysis.memlane import Lane

    lane = Lane(data.memory, data.profile.hz)
    kind = "cuda" if lane.has_cuda else "rss"
    col = lane.column(kind)
    seen = col[col >= 0] if len(col) else col
    peaks = [int(seen.max())] if len(seen) else []
    keys = [f"memory.{kind}_in", f"memory.{kind}_out", f"memory.{kind}_peak"]
    for a in as_table(data.spans).attrs.values():
        peaks += [int(a[k]) for k in keys if isinstance(a.get(k), (int, float)) and a[k] >= 0]
    return (max(peaks) if peaks else None), kind


def check(budgets: list[Budget], data: RunData) -> list[str]:
    """One line per limit missed (or per budget that names nothing in the run), e.g. ``stepscope budget missed:
    pkg.mod.UNet.forward p50 = 52.3 ms (budget < 40 ms, 10 calls) in run 20261127-...``; [] when all are kept."""
    out = []
    rid = data.run.id
    for b in budgets:
        if b.name == "memory":
            peak, kind = peak_memory(data)
            what = "CUDA allocated" if kind == "cuda" else "RSS"
            if peak is None:
                out.append(f"stepscope budget: no memory figure in run {rid} (recorded with --no-memory?)")
                continue
            for lim in b.limits:
                if not lim.holds(peak):
                    out.append(f"stepscope budget missed: memory peak = {fmt_bytes(peak)} {what} "
                               f"(budget {lim.op} {lim.text}) in run {rid}")
            continue
        try:
            full, d = durations(data, b.name)
        except LookupError as e:
            out.append(f"stepscope budget: {e}")
            continue
        if not len(d):
            out.append(f"stepscope budget: no call of {full} ended in run {rid}")
            continue
        for lim in b.limits:
            v = statistic(lim.stat, d)
            if not lim.holds(v):
                calls = f"{len(d)} {'step' if full == 'step' else 'call'}{'s' if len(d) != 1 else ''}"
                out.append(f"stepscope budget missed: {full} {lim.stat} = {fmt_ns(v)} "
                           f"(budget {lim.op} {lim.text}, {calls}) in run {rid}")
    return out


@dataclass(frozen=True, slots=True)
class Row:
    """A line of the plugin's summary: a test's span name (or "step", "test") with its ``calls``, ``p50_ns``,
    ``p95_ns`` and ``total_ns``."""

    name: str
    calls: int
    p50_ns: float
    p95_ns: float
    total_ns: float


def top_rows(data: RunData, n: int = 3) -> list[Row]:
    """The run's steps (when it has any) and its ``n`` span names with the most time, most first, then the whole
    test: what the plugin's summary lists."""
    t = as_table(data.spans)
    out = []
    live = np.flatnonzero(~t.op_mask("transaction") & ~t.op_mask("sync")) if len(t) else np.zeros(0, np.int64)
    names = ["step"] if any("diffusion.step" in a for a in t.attrs.values()) else []
    if len(live):
        tot = np.bincount(t.name[live], weights=t.dur[live].astype(np.float64), minlength=len(t.names))
        names += [t.names[c] for c in np.argsort(-tot, kind="stable")[:n].tolist() if tot[c] > 0]
    for name in [*names, "test"]:
        try:
            full, d = durations(data, name)
        except LookupError:
            continue
        if len(d):
            out.append(Row(full, len(d), statistic("p50", d), statistic("p95", d), float(d.sum())))
    return out
