"""The run summary: what ``stepscope run`` prints, ``--json`` emits and the report shows first.

``Summary``: per-name span statistics, the step or repeat table, the top functions of the traced work by self and
total time, ``phases`` (start-up's total and top functions), the memory summary, a job's processes and ranks, a
node-graph app's nodes; for a capture window its settings (``capture``), the program in words (``app``) and the
spans cut at the window's end (``cut_spans``).
"""

from __future__ import annotations

import dataclasses

from dataclasses import asdict, dataclass, field

import numpy as np

from ..core.procs import app_label
from ..core.model import RunData
from .calltree import ProfileIndex
from ..core.spantable import as_table
from .nodes import NodeTable, node_table
from .memory import MemorySummary, attach_steps, summarize_memory
from .phases import phases as run_phases
from .phases import WORK, sample_phase, startup_samples, work_samples
from .ranks import ProcessRow, RankSteps, process_rows, rank_steps
from .spans import SpanStat, span_stats
from .steptable import StepTable, repeat_table, step_table


@dataclass(slots=True)
class FunctionTime:
    """A sampled function: ``self_ns`` (at the leaf) and ``total_ns`` (anywhere on the stack), with shares
    of all sampled time (0..1) and the sample count at the leaf."""

    name: str
    file: str
    line: int
    self_ns: float
    total_ns: float
    self_share: float
    total_share: float


@dataclass(slots=True)
class PhaseSummary:
    """Start-up / work / shutdown (``analysis.phases``): wall times (ns), whether the run was split,
    start-up's sampled time and its top functions by total time (what the start-up block holds; in a run
    that was not split, its imports). ``entry``: the well-known entry point whose samples set the work
    window when no traced span did (``Phases.entry``), else None; ``work_from`` says what the work starts at,
    in words. ``capture``: a window of ``stepscope capture`` (``Phases.capture``): "start-up" is the app idle
    or serving before the work, "shutdown" the same after it."""

    split: bool
    startup_ns: int
    work_ns: int
    shutdown_ns: int
    startup_sampled_ns: float
    shutdown_sampled_ns: float
    work_start_ns: int
    work_end_ns: int
    startup_top: list[FunctionTime]
    entry: str | None = None
    capture: bool = False

    @property
    def work_from(self) -> str:
        return f"the first sample in {'.'.join(self.entry.split('.')[-2:])}" if self.entry else "the first traced call"


@dataclass(slots=True)
class Summary:
    """Everything the summary shows. Times in ns. ``span_count``: the traced spans (the run's transactions not
    counted, as ``stepscope runs`` counts them). ``top_self``/``top_total`` cover the traced work
    (start-up and shutdown apart, see ``phases``) when the run could be split. ``capture``: the capture's
    settings (``pid``, ``span``, ``steps``, ``duration_s``, ``method``) for a window of ``stepscope capture``,
    else None; ``app``: the program's script or module and arguments (``core.procs.app_label``);
    ``cut_spans``: spans still running when a capture window ended, stored cut at its end
    (``attrs["stepscope.cut"]``; counted in ``span_count`` and the span statistics)."""

    run_id: str
    status: str
    exit_code: int | None
    command: list[str]
    wall_ns: int | None
    span_count: int
    sample_count: int
    sampled_ns: float
    idle_samples: int
    spans: list[SpanStat]
    steps: StepTable | None
    top_self: list[FunctionTime]
    top_total: list[FunctionTime]
    unresolved: dict[str, str]
    phases: PhaseSummary | None = None
    #: memory: peaks, per span name, per stage, the largest stage, the out-of-memory record (``analysis.memory``)
    memory: MemorySummary | None = None
    #: sampled wall time (ns) of waiting threads (``ProfileIndex.idle``) in the window the top tables cover: left out
    idle_ns: float = 0.0
    capture: dict | None = None
    app: str = ""
    cut_spans: int = 0
    #: the job's processes (``analysis.ranks.process_rows``; [] for one process) and its steps rank by rank
    processes: list[ProcessRow] = field(default_factory=list)
    ranks: RankSteps | None = None
    #: a node-graph app's per-node and per-prompt tables (``analysis.nodes``; ``--app comfyui``), or None
    nodes: NodeTable | None = None
    #: ``unresolved`` as the first screen says it (``screen_notes``: overrides that ran only); not in ``--json``,
    #: whose ``unresolved`` keeps every note
    notes: dict[str, str] = field(default_factory=dict)
    #: how the other threads were sampled when the overhead budget lowered their rate (``sampling_note``), else ""
    sampling: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("notes")
        if self.steps is not None:
            d["steps"]["slow_steps"] = [r.step for r in self.steps.slow_rows]
            d["steps"]["waited_steps"] = [r.step for r in self.steps.rows if r.waited]  # (slow only by a CPU wait)
        return d


_SKIP_TOTAL = ("runpy", "stepscope.record.launch", "threading")


def top_functions(index: ProfileIndex, idx: np.ndarray | None = None, n: int = 15) -> tuple[list[FunctionTime], list[FunctionTime]]:
    """Top ``n`` functions by self time and by total time over the samples ``idx`` (default: all samples
    but idle threads' waits, see ``ProfileIndex.idle``).

    The total-time list leaves out the launcher's own frames and thread bootstrap frames, which are at
    the root of every stack and say nothing.
    """
    if idx is None:
        idx = index.busy()
    self_ns, total_ns = index.function_times(idx)
    all_ns = float(index.weight[idx].sum()) or 1.0
    if not len(idx):
        return [], []

    def item(fid: int) -> FunctionTime:
        f = index.functions[fid]
        return FunctionTime(f.name, f.file, f.line, float(self_ns[fid]), float(total_ns[fid]),
                            float(self_ns[fid]) / all_ns, float(total_ns[fid]) / all_ns)

    by_self = [item(int(i)) for i in np.argsort(-self_ns)[:n] if self_ns[i] > 0]
    order = [int(i) for i in np.argsort(-total_ns) if total_ns[i] > 0
             and not index.functions[int(i)].module.startswith(_SKIP_TOTAL)
             and index.functions[int(i)].name != "<module>"]
    by_total = [item(i) for i in order[:n]]
    return by_self, by_total


def summarize(data: RunData, index: ProfileIndex | None = None, top: int = 15) -> Summary:
    """The summary of a recorded run: the top functions of the traced work (``analysis.phases``), start-up
    and shutdown as their own totals."""
    run = data.run
    index = index or ProfileIndex(data.profile)
    data = dataclasses.replace(data, spans=as_table(data.spans))  # the columns once (a list of spans is converted
    # here); the rest of the run (its memory lane) kept
    ph = run_phases(data, index)
    # a span's share is of the work (start-up and shutdown apart: a server's start-up is not the requests' time)
    stats = span_stats(data.spans, ph.work_ns if ph.split and ph.work_ns > 0 else run.wall_time_ns)
    steps = step_table(data.spans, index=index) or repeat_table(data.spans, index=index, stats=stats)
    attach_steps(steps, data)
    # importing samples are start-up wherever they fall, also in a run with no work window (analysis.phases)
    by_self, by_total = top_functions(index, work_samples(index, ph), n=top)
    in_work = sample_phase(index, ph) == WORK
    idle_ns = float(index.weight[in_work & index.idle].sum())
    startup_top = top_functions(index, startup_samples(index, ph), n=5)[1]
    phs = PhaseSummary(ph.split, ph.startup_ns, ph.work_ns, ph.shutdown_ns, ph.startup_sampled_ns, ph.shutdown_sampled_ns,
                       ph.work_start_ns, ph.work_end_ns, startup_top, ph.entry, ph.capture)
    capture = run.meta.capture.to_dict() if ph.capture else None
    cut = len(data.spans.rows_with_attr("stepscope.cut")) if data.spans.attrs else 0
    traced = len(data.spans) - int(data.spans.op_mask("transaction").sum())  # (as `runs` and the header count them)
    return Summary(run.id, run.status, run.exit_code, run.command, run.wall_time_ns, traced, len(index),
                   float(index.weight.sum()), int(index.idle.sum()), stats, steps, by_self, by_total,
                   dict(run.unresolved), phs, summarize_memory(data, steps), idle_ns, capture,
                   app_label(run.command) if run.command else "", cut, process_rows(data), rank_steps(data, index),
                   nodes=node_table(data.spans),
                   notes=screen_notes(run.unresolved, _overrides(data), {st.name for st in stats}),
                   sampling=sampling_note(run.env.get("sampler") or {}, run.settings.get("profiles_hz")))


def sampling_note(sampler: dict, hz) -> str:
    """One line when the overhead budget (``Settings.overhead_budget``) lowered the other threads' sampling rate:
    the rates used and the time at each, e.g. ``other threads sampled at 12.62-101 Hz to keep stepscope's stack
    reads under 1% of the process's CPU (101 Hz 2.1 s, 50.5 Hz 0.75 s, ...); the main thread at 101 Hz``; "" when
    every look kept the asked rate (or the run has no such record: ``env["sampler"]["others_hz"]``)."""
    rates = sampler.get("others_hz") or {}
    try:
        pairs = sorted(((float(k), float(v)) for k, v in rates.items() if float(v) > 0), reverse=True)
    except (TypeError, ValueError):
        return ""
    if len(pairs) < 2 and not (pairs and hz and pairs[0][0] < float(hz) * 0.99):
        return ""
    budget = sampler.get("budget", 0.01)
    main = f"; the main thread at {float(hz):.4g} Hz" if hz and sampler.get("main") == "signal" else ""
    times = ", ".join(f"{r:.4g} Hz {t:.2f} s" for r, t in pairs)
    return (f"other threads sampled at {pairs[-1][0]:.4g}-{pairs[0][0]:.4g} Hz to keep stepscope's stack reads under "
            f"{100 * budget:g}% of the process's CPU ({times}){main}")


def _overrides(data: RunData) -> dict[str, list[str]]:
    """A traced method -> every override traced with it, over the job's processes (``env["overrides"]``)."""
    out: dict[str, list[str]] = {}
    for run in [data.run, *(data.processes or [])]:
        for name, subs in ((run.env or {}).get("overrides") or {}).items():
            if isinstance(subs, list):
                out.setdefault(name, []).extend(s for s in subs if isinstance(s, str) and s not in out[name])
    return out


def screen_notes(unresolved: dict[str, str], overrides: dict[str, list[str]], ran: set[str]) -> dict[str, str]:
    """The run's notes as its first screen says them: a method's overrides (``tracing.globs.overrides_note``)
    named only when their spans ran, the note left out when none did (a framework's subclasses the program never
    used); the other notes and failures as they are. ``overrides``: every override of each method (the stored
    note names 4; a run without them: those 4); ``ran``: the span names of the run."""
    out = {}
    for name, why in unresolved.items():
        if not why.startswith("overridden in "):
            out[name] = why
            continue
        subs = overrides.get(name)
        if subs is None:  # (an older run: the names its note shows)
            subs = [n for n in why[why.find("(") + 1:why.rfind(")")].split(", ") if n and n != "..."]
        used = [n for n in subs if n in ran]
        if used:
            n = max(len(subs), len(used))
            ran_of = "" if len(used) == n else f", {len(used)} of which ran"
            shown = ", ".join(used[:4]) + (", ..." if len(used) > 4 else "")
            out[name] = (f"overridden in {n} subclass{'es' if n != 1 else ''}{ran_of}: each override traced as a span"
                         f" of its own class ({shown})")
    return out
