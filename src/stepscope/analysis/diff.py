"""Diff two runs: what changed in the environment, what got slower, where the time went, and why.

``diff_runs(a, b)`` compares run B against run A (A = before, B = after) in four parts:

1. **Environment changes** (``analysis.envfacts.env_changes``): the runs' recorded environment and command
   lines as facts, those that differ ranked by how often each kind explains a slowdown (``envfacts.RANKS``).
2. **Time changes** (``analysis.timestats``) per span name, per denoising step and for the chosen unit
   (``--span NAME``; default the denoising step when both runs have steps, else the traced name with >= 3 calls
   and the most time): the relative change of the median with a 95% bootstrap CI over the repeats, significant
   or not by ``timestats``' rule (the runs' noise and CPU contention taken into account); start-up apart.
3. **Where the time went**: the samples inside the unit's repeats of each run, as call trees merged by
   function name into a differential flame graph (``analysis.difftree.flame_diff``), normalised per repeat
   (ns per repeat); the functions whose self time per repeat grew (or, for a speed-up, shrank) most, with
   their share of the change in the unit's mean time; ops and kernels that appeared or vanished (and the
   largest changes) when both runs have device traces.
4. **A verdict**: one line. When the unit changed significantly, the highest-ranked environment change
   that can explain it (not "other") is named with the change and its CI, e.g. "denoiser weights:
   cuda:0 float16 -> cpu float32: a denoising step is 6.10x slower (CI 5.80x-6.40x)"; without one, the
   function that took most of the change. Otherwise "no significant difference".

Which runs to compare: ``analysis.runpick``. Pure: returns data (``Diff``); ``output/terminal/diff.py`` and
``output/html/compare.py`` draw it. Times in ns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..core.model import RunData
from .calltree import ProfileIndex
from ..core.spantable import as_table
from ..core.steprules import STEP_ATTR
from .difftree import DiffNode, flame_diff
from .ranks import RankChange, rank_changes
from .envfacts import BLAMEABLE, EnvChange, env_changes
from .explain import ExplainError, Repeat, Repeats, default_unit, repeats_of
from .timestats import NEGLIGIBLE, Phase, TimeChange, adjust, contention, phases, span_changes, step_changes, time_change


class DiffError(ValueError):
    """Nothing to compare (no common unit, a span name in neither run...); the message says what."""


@dataclass(slots=True)
class FunctionChange:
    """Self time per repeat of the unit (ns) in A and B, the change, and its share of the change in the
    unit's mean time per repeat."""

    function: str
    file: str
    a_ns: float
    b_ns: float
    delta_ns: float
    share: float


@dataclass(slots=True)
class OpChange:
    """A device-trace op or kernel: self time per repeat of the unit (ns) and call counts in A and B;
    ``status``: "appeared", "vanished" or "changed"."""

    name: str
    kind: str
    a_ns: float
    b_ns: float
    a_count: int
    b_count: int
    status: str


@dataclass(slots=True)
class Diff:
    """The whole comparison of run B against run A (see the module doc)."""

    run_a: str
    run_b: str
    source_a: str
    source_b: str
    unit: str
    unit_label: str
    headline: TimeChange
    env: list[EnvChange]
    phases: list[Phase]
    spans: list[TimeChange]
    steps: list[TimeChange]
    functions: list[FunctionChange]
    flame: DiffNode | None
    ops: list[OpChange]
    verdict: str
    cause: EnvChange | None
    normalisation: str
    samples_a: int
    samples_b: int
    notes: list[str] = field(default_factory=list)
    #: two jobs rank by rank (``analysis.ranks.rank_changes``): the step compared and each rank's change
    rank_step: str | None = None
    ranks: list[RankChange] = field(default_factory=list)


def _function_self(index: ProfileIndex, idx: np.ndarray) -> dict[str, tuple[float, str]]:
    self_ns, _ = index.function_times(idx)
    out: dict[str, list] = {}
    for fid in np.nonzero(self_ns)[0].tolist():
        f = index.functions[fid]
        e = out.setdefault(f.name, [0.0, f.file])
        e[0] += float(self_ns[fid])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _windows(d: RunData, unit: str) -> list:
    """The repeats of ``unit`` in ``d`` (``"run"``: the whole run, every thread, one repeat)."""
    if unit == "run":
        end = d.run.end_ns if d.run.end_ns is not None else max([d.run.start_ns, *d.profile.sample_t_ns[-1:]])
        return [Repeat(0, "run", end - d.run.start_ns, d.run.start_ns, end + 1, None)]  # thread None: all threads
    try:
        return repeats_of(d, unit)
    except ExplainError:
        return []


def _columns(reps) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """``(duration, start, end, thread)`` of repeats as arrays (ns, float64 durations; int64 otherwise), from a
    ``Repeats``' own columns (a million repeats: no object each); ``thread`` None where a repeat covers every
    thread (``"run"``)."""
    if isinstance(reps, Repeats):
        return reps.duration_ns.astype(np.float64), reps.start_ns, reps.end_ns, reps.thread_id
    dur = np.array([float(r.duration_ns) for r in reps], np.float64)
    start = np.array([r.start_ns for r in reps], np.int64)
    end = np.array([r.end_ns for r in reps], np.int64)
    if any(r.thread_id is None for r in reps):
        return dur, start, end, None
    return dur, start, end, np.array([r.thread_id for r in reps], np.int64)


def _ops(path_a: str, path_b: str, n_a: int, n_b: int, top: int = 10) -> tuple[list[OpChange], list[str]]:
    """Per kind (host ``op``, device ``kernel``): the ``top`` that appeared (by B's self time), vanished (by
    A's) and changed most (by the change), self time per repeat of the unit; and a line per kind saying
    how many appeared and vanished in all."""
    from ..device.analysis import op_stats
    from ..device.kineto import load

    ta, tb = load(path_a), load(path_b)
    out: list[OpChange] = []
    lines: list[str] = []
    for kind, cats in (("op", ("cpu_op",)), ("kernel", ("kernel",))):
        sa = {o.name: o for o in op_stats(ta, cats, top=10**9)}
        sb = {o.name: o for o in op_stats(tb, cats, top=10**9)}
        rows = []
        for name in sa.keys() | sb.keys():
            oa, ob = sa.get(name), sb.get(name)
            status = "appeared" if oa is None else "vanished" if ob is None else "changed"
            rows.append(OpChange(name, kind, (oa.self_ns / n_a) if oa else 0.0, (ob.self_ns / n_b) if ob else 0.0,
                                 oa.count if oa else 0, ob.count if ob else 0, status))
        for status in ("appeared", "vanished", "changed"):
            part = sorted((r for r in rows if r.status == status), key=lambda r: (-abs(r.b_ns - r.a_ns), r.name))
            out.extend(part[:top])
        n_app = sum(r.status == "appeared" for r in rows)
        n_van = sum(r.status == "vanished" for r in rows)
        if n_app or n_van:
            lines.append(f"device {kind}s: {n_app} appeared, {n_van} vanished"
                         + (f" (the {top} largest of each listed)" if max(n_app, n_van) > top else ""))
    return out, lines


# -- the whole diff --------------------------------------------------------------------------------

def choose_unit(a: RunData, b: RunData, span: str | None = None) -> str:
    """The unit both runs are compared by: ``span`` (exact or a unique suffix, in both runs), else the
    denoising step when both have steps, else the traced name with >= 3 calls and the most time in B
    (or A), else ``"run"`` (the whole runs, one repeat each: no CI, but the environment and the flame
    graphs still compare). Raises DiffError for a ``span`` that is not in both runs."""
    if span:
        for d in (a, b):
            try:
                repeats_of(d, span)
            except ExplainError as e:
                raise DiffError(f"{e} (run {d.run.id})") from None
        return span
    if all(len(as_table(d.spans).rows_with_attr(STEP_ATTR)) for d in (a, b)):
        return "step"
    for d, other in ((b, a), (a, b)):
        try:
            unit = default_unit(d)
        except ExplainError:
            continue
        if _windows(other, unit):
            return unit
    return "run"  # nothing traced repeats in both: the whole runs, one repeat each


def _ratio_text(tc: TimeChange, k: float = 1.0) -> str:
    """``1.80x slower (CI 1.70x-1.90x)`` / ``1.25x faster (...)`` for the change of ``tc``, divided by ``k``."""
    r = (tc.ratio or 1.0) / k
    lo = None if tc.ci_low is None else (1 + tc.ci_low) / k
    hi = None if tc.ci_high is None else (1 + tc.ci_high) / k
    if r >= 1:
        return f"{r:.2f}x slower" + (f" (CI {lo:.2f}x-{hi:.2f}x)" if lo is not None else "")
    return f"{1 / r:.2f}x faster" + (f" (CI {1 / hi:.2f}x-{1 / lo:.2f}x)" if lo is not None else "")


def _short(name: str) -> str:
    segs = name.split(".")
    return ".".join(segs[-2:]) if len(segs) > 2 else name


def verdict(headline: TimeChange, unit_label: str, env: list[EnvChange], functions: list[FunctionChange]
            ) -> tuple[str, EnvChange | None]:
    """The one-line verdict and the environment change it names (see the module doc)."""
    # (a library loaded in one run only is no version change: a notebook's analysis imports numpy between two cells)
    blame = next((c for c in env if c.rank <= BLAMEABLE and not (c.rank == 7 and "-" in (c.before, c.after))), None)
    if headline.change is None:
        return f"{unit_label}: nothing to compare", None
    pct = f"{100 * headline.change:+.1f}%"
    ci = (f", CI {100 * headline.ci_low:+.1f}% to {100 * headline.ci_high:+.1f}%" if headline.ci_low is not None else "")
    if headline.ci_low is None:
        tail = f" ({blame.text} changed)" if blame else ""
        return (f"too few repeats of {unit_label} for a CI ({headline.n_a} and {headline.n_b}): {pct}{tail}", None)
    busy = next((c for c in env if c.key == "cpu_wait"), None)
    if headline.adjusted is not None and busy is not None:
        ci += (f"; the main thread waited for a CPU {busy.before} -> {busy.after} of the time (another program busy): "
               f"{100 * headline.adjusted:+.1f}% once that is taken out")
    if not headline.significant:
        noisy = ((headline.ci_low > 0 or headline.ci_high < 0) and abs(headline.change) >= NEGLIGIBLE
                 and headline.adjusted is None)
        why = f", within the runs' noise (repeats vary by {100 * headline.noise:.0f}% within a run)" if noisy else ""
        tail = f"; the environment changed ({blame.text}) without a measurable effect" if blame else ""
        return f"no significant difference: {unit_label} {pct}{ci}{why}{tail}", None
    top = functions[0] if functions and functions[0].share > 0 else None
    fn = (f"; most of the change in {_short(top.function)} ({100 * top.share:.0f}%)" if top else "")
    if headline.adjusted is not None and busy is not None:  # decided on the change without the contention
        k = (1 + headline.change) / (1 + headline.adjusted)
        how = (f"{_ratio_text(headline, k)} once CPU contention {busy.before} -> {busy.after} is taken out "
               f"(measured: {_ratio_text(headline).split(' (CI')[0]})")
    else:
        how = _ratio_text(headline)
    if blame is not None:
        return f"{blame.text}: {unit_label} is {how}{fn}", blame
    others = next((c for c in env if c.key in ("others_cpu", "steal")), None)
    load = next((c for c in env if c.key == "loadavg"), None)
    if others is not None:
        none = (f"no environment change explains it, but {'other programs' if others.key == 'others_cpu' else 'the hypervisor'} "
                f"kept {others.before} -> {others.after} CPUs busy during the work")
    elif load is not None:
        none = f"no environment change explains it, but the machine's load changed ({load.before} -> {load.after})"
    else:
        none = "no environment change explains it"
    if top is not None:
        return (f"{unit_label} is {how}: the change is in {top.function} "
                f"({'+' if top.delta_ns >= 0 else '-'}{abs(top.delta_ns) / 1e6:.1f} ms per repeat, {100 * top.share:.0f}% of it); "
                f"{none}"), None
    return f"{unit_label} is {how}; {none}", None


def diff_runs(a: RunData, b: RunData, span: str | None = None, device_a: str | None = None,
              device_b: str | None = None, top: int = 12) -> Diff:
    """Compare run B against run A (see the module doc). ``span``: the unit (default: ``choose_unit``);
    ``device_a``/``device_b``: paths of the runs' device traces (ops compared when both are given).
    Raises DiffError when the runs have nothing to compare by."""
    unit = choose_unit(a, b, span)
    ra, rb = _windows(a, unit), _windows(b, unit)
    if unit not in ("step", "run"):
        tb = as_table(b.spans)
        present = set(np.unique(tb.name).tolist())
        unit = next((nm for k, nm in enumerate(tb.names) if k in present and (nm == unit or nm.endswith(unit))), unit)
    unit_label = {"step": "a denoising step", "run": "the whole run"}.get(unit) or _short(unit)
    (da, *wa), (db, *wb) = _columns(ra), _columns(rb)
    headline = time_change("step" if unit == "step" else unit, da, db)
    env = env_changes(a, b)
    k = contention(a, b)
    spans_c = span_changes(a, b)
    steps_c = step_changes(a, b) if unit == "step" else []
    for tc in (headline, *spans_c, *steps_c):
        adjust(tc, k)
    ia, ib = ProfileIndex(a.profile), ProfileIndex(b.profile)

    def sel(index: ProfileIndex, reps, windows) -> np.ndarray:
        start, end, thread = windows
        if len(reps) and thread is not None:
            idx = index.select_many(start, end, thread)[0]
        else:
            parts = [index.select(r.start_ns, r.end_ns, r.thread_id) for r in reps]
            idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        # whole runs: the waiting of threads other than the main one left out (a background thread's wait for work
        # is no cost of the run; the main thread's waits, a sleep grown longer, are)
        return idx[~(index.idle[idx] & ~index.main[idx])] if unit == "run" and len(idx) else idx

    sa, sb = sel(ia, ra, wa), sel(ib, rb, wb)
    na, nb = max(len(ra), 1), max(len(rb), 1)
    notes: list[str] = []
    functions: list[FunctionChange] = []
    flame = None
    if len(sa) and len(sb):
        fa, fb = _function_self(ia, sa), _function_self(ib, sb)
        gap = (float(np.mean(db)) - float(np.mean(da))) if len(ra) and len(rb) else 0.0
        sign = 1.0 if gap >= 0 else -1.0
        denom = abs(gap) or 1.0
        rows = []
        for name in fa.keys() | fb.keys():
            a_ns = fa.get(name, (0.0, ""))[0] / na
            b_ns = fb.get(name, (0.0, ""))[0] / nb
            d = b_ns - a_ns
            rows.append(FunctionChange(name, (fb.get(name) or fa.get(name))[1], a_ns, b_ns, d, sign * d / denom))
        rows.sort(key=lambda r: -sign * r.delta_ns)
        functions = [r for r in rows if sign * r.delta_ns > 0][:top]
        flame = flame_diff(ia.tree(sa), na, ib.tree(sb), nb)
    else:
        notes.append("no samples inside the compared repeats of " + ("either run" if not len(sa) and not len(sb)
                     else f"run {a.run.id if not len(sa) else b.run.id}") + ": no flame graph diff"
                     + (" (a Sentry run without a profile)" if "sentry" in (a.run.env.get("source"), b.run.env.get("source")) else ""))
    phs = phases(a, b, ia, ib)
    ops: list[OpChange] = []
    if device_a and device_b and os.path.exists(device_a) and os.path.exists(device_b):
        try:
            ops, lines = _ops(device_a, device_b, na, nb)
            notes.extend(lines)
        except (OSError, ValueError) as e:
            notes.append(f"device traces not compared: {e}")
    elif bool(device_a) != bool(device_b):
        notes.append("only one run has a device trace: ops and kernels not compared")
    if unit == "run":
        notes.append("no traced name repeats in both runs: the whole runs are compared (one repeat each, no CI); "
                     "trace the function that repeats (--trace, e.g. the denoiser's forward) for CIs per call")
    text, cause = verdict(headline, unit_label, env, functions)
    work = next((p for p in phs if p.name.startswith("work")), None)
    if unit == "step" and headline.n_a != headline.n_b and work and work.a_ns and work.b_ns:
        text += (f"; {headline.n_a} -> {headline.n_b} steps: the work took {work.b_ns / work.a_ns:.2f}x as long "
                 f"({work.a_ns / 1e9:.2f} s -> {work.b_ns / 1e9:.2f} s)")
    rank_step, rank_rows = rank_changes(a, b)
    return Diff(run_a=a.run.id, run_b=b.run.id, source_a=a.run.env.get("source", "run"),
                source_b=b.run.env.get("source", "run"), unit=unit, unit_label=unit_label, headline=headline, env=env,
                phases=phs, spans=spans_c, steps=steps_c, functions=functions, flame=flame, ops=ops, verdict=text,
                cause=cause,
                normalisation={"step": "per denoising step", "run": "per run"}.get(unit) or f"per call of {_short(unit)}",
                samples_a=len(sa), samples_b=len(sb), notes=notes, rank_step=rank_step, ranks=rank_rows)
