"""Diff two runs: what changed in the environment, what got slower, where the time went, and why.

``diff_runs(a, b)`` compares run B against run A (A = before, B = after) in four parts:

1. **Environment changes** (``env_changes``): the runs' ``env`` (recorded by ``session.environment`` and
   ``tracing.workfacts`` during ``stepscope run``; Sentry contexts for ingested runs) and command lines,
   flattened to facts and ranked by how often each kind explains a slowdown in Stable Diffusion
   reports: torch build and device (a CPU-only build, the CUDA version), where the denoiser's weights
   live (device, dtype, offload), attention processor and SDPA backends, torch.compile, math precision
   flags, thread counts, library versions, pipeline arguments (size, steps, batch, guidance, scheduler,
   step callback), then the rest (``RANKS``).
2. **Time changes** per span name, per denoising step and for the chosen unit (``--span NAME``; default
   the denoising step when both runs have steps, else the traced name with >= 3 calls and the most
   time): the relative change of the median with a 95% bootstrap CI over the repeats
   (``bench.stats.compare``: percentile bootstrap of the ratio of medians, B = 10,000 resamples). A
   change is *significant* when its CI excludes 0 and it is at least ``NEGLIGIBLE`` (5%) and at least
   ``NOISE_K`` (1.5) times the runs' noise, the larger robust coefficient of variation
   (1.4826 x MAD / median) of the repeats in A and in B: the repeats of one run share its machine's load,
   so a CI over them cannot see that two runs ran under different loads; a run whose repeats vary by 25%
   cannot show a 25% change between runs. Otherwise "no significant difference". When the runs' main
   threads waited for a CPU for different shares of the work (``cpu_wait_share``: another program busy on
   the machine), the ratio that waiting alone explains (``contention``) is divided out before deciding. Start-up (run start to the first pipeline call or traced span: imports,
   model loading) is reported apart from the work (first to last traced span).
3. **Where the time went**: the samples inside the unit's repeats of each run, as call trees merged by
   function name into a differential flame graph, normalised per repeat (ns per repeat); the functions
   whose self time per repeat grew (or, for a speed-up, shrank) most, with their share of the change in
   the unit's mean time; ops and kernels that appeared or vanished (and the largest changes) when both
   runs have device traces.
4. **A verdict**: one line. When the unit changed significantly, the highest-ranked environment change
   that can explain it (not "other") is named with the change and its CI, e.g. "denoiser weights:
   cuda:0 float16 -> cpu float32: a denoising step is 6.10x slower (CI 5.80x-6.40x)"; without one, the
   function that took most of the change. Otherwise "no significant difference".

Pure: returns data (``Diff``); ``render/diff.py`` and ``report/compare.py`` draw it. Times in ns.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bench.stats import compare
from ..model import RunData
from ..profiling.calltree import CallNode, ProfileIndex
from ..spantable import as_table
from ..tracing.steps import STEP_ATTR, kind_of_name
from .explain import ExplainError, Repeat, default_unit, repeats_of
from .steptable import step_table

NEGLIGIBLE = 0.05
NOISE_K = 1.5
LOAD_CHANGE = 0.25  # of the cores: a change of the machine's load average that is reported
MIN_CI_REPEATS = 3  # fewer repeats on either side: a ratio, no CI, no verdict of significance

#: rank -> kind of environment change, in the order they explain slowdowns (lower first)
RANKS = {
    1: "torch build and device",
    2: "where the weights live",
    3: "attention",
    4: "torch.compile",
    5: "math precision",
    6: "threads",
    7: "library versions",
    8: "pipeline arguments",
    9: "other",
}
BLAMEABLE = 8  # ranks up to this one can be named as the cause in the verdict


class DiffError(ValueError):
    """Nothing to compare (no common unit, a span name in neither run...); the message says what."""


@dataclass(slots=True)
class EnvChange:
    """One fact that differs: ``key`` (dotted path), ``label`` (for people), ``rank`` (see ``RANKS``),
    ``kind`` (``RANKS[rank]``), ``before``/``after`` as text ("-" when absent)."""

    key: str
    label: str
    rank: int
    kind: str
    before: str
    after: str

    @property
    def text(self) -> str:
        return f"{self.label}: {self.before} -> {self.after}"


@dataclass(slots=True)
class TimeChange:
    """A name's repeats in A and B: counts, medians (ns), change of the median (fraction: +0.8 = 1.8x
    slower), its 95% CI (None with fewer than ``MIN_CI_REPEATS`` repeats on a side), ``significant``
    (CI excludes 0 and |change| >= ``NEGLIGIBLE``), ``only_in`` ("a"/"b" when the name ran in one run only),
    totals (ns), ``noise``: the larger robust CV of the repeats in A and B (fraction)."""

    name: str
    n_a: int
    n_b: int
    median_a_ns: float
    median_b_ns: float
    total_a_ns: float
    total_b_ns: float
    change: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    significant: bool = False
    only_in: str | None = None
    noise: float = 0.0
    adjusted: float | None = None  # the change once the runs' CPU contention is taken out (see ``contention``)

    @property
    def ratio(self) -> float | None:
        return None if self.change is None else 1.0 + self.change

    @property
    def verdict(self) -> str:
        """"slower", "faster", "no significant difference", "only in A/B" or "single repeats"."""
        if self.only_in:
            return f"only in {self.only_in.upper()}"
        if self.change is None:
            return "-"
        if self.ci_low is None:
            return "too few repeats for a CI"
        if not self.significant:
            return "no significant difference"
        return "slower" if (self.adjusted if self.adjusted is not None else self.change) > 0 else "faster"


@dataclass(slots=True)
class Phase:
    """Start-up (run start to the first pipeline call or span), work (first to last span), whole run (ns)."""

    name: str
    a_ns: float | None
    b_ns: float | None


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
class FlameNode:
    """A node of the differential flame graph: time per repeat in A and B (ns), children widest first."""

    name: str
    a_ns: float
    b_ns: float
    children: list["FlameNode"] = field(default_factory=list)

    @property
    def delta_ns(self) -> float:
        return self.b_ns - self.a_ns


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
    flame: FlameNode | None
    ops: list[OpChange]
    verdict: str
    cause: EnvChange | None
    normalisation: str
    samples_a: int
    samples_b: int
    notes: list[str] = field(default_factory=list)


# -- environment -----------------------------------------------------------------------------------

def _text(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, dict):
        return ", ".join(f"{k} x{n}" if isinstance(n, int) and not isinstance(n, bool) else f"{k}={_text(n)}"
                         for k, n in sorted(v.items()))
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _flatten(d: Any, prefix: str, out: dict) -> None:
    if isinstance(d, dict):
        for k, v in d.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = d


_ARG_LABELS = {"height": "height (px)", "width": "width (px)", "num_inference_steps": "steps", "guidance_scale": "guidance",
               "num_images_per_prompt": "images per prompt", "batch": "batch", "callback": "step callback",
               "strength": "strength", "eta": "eta"}
_COMPONENT_LABELS = {"denoiser": "denoiser", "text_encoder": "text encoder", "vae": "VAE"}
_LIB_KEYS = ("diffusers", "transformers", "accelerate", "xformers", "numpy", "safetensors", "triton", "peft", "cudnn", "python")


def _rank_by_words(key: str) -> int:
    """Rank of a fact not in the known layout (Sentry contexts, tags, future keys), from its words."""
    k = key.lower()
    if any(w in k for w in ("cuda", "gpu", "hip", "mps")) and "version" not in k:
        return 1
    if any(w in k for w in ("dtype", "device", "offload", "precision")) and "sdpa" not in k:
        return 2
    if any(w in k for w in ("attn", "attention", "sdpa", "xformers", "flash")):
        return 3
    if any(w in k for w in ("compile", "dynamo", "inductor")):
        return 4
    if any(w in k for w in ("tf32", "matmul")):
        return 5
    if "thread" in k or k.endswith(("omp_num_threads", "mkl_num_threads")):
        return 6
    if "version" in k or k.endswith(("torch", "diffusers", "transformers")):
        return 7
    if any(w in k for w in ("steps", "height", "width", "guidance", "scheduler", "batch", "size", "sampler")):
        return 8
    return 9


def env_facts(env: dict, command: list[str] | None = None) -> dict[str, tuple[str, int, Any]]:
    """A run's env as facts: key -> (label, rank, value). Known keys get their label and rank; the rest
    (Sentry contexts and tags, unknown keys) are ranked by ``_rank_by_words``."""
    env = dict(env or {})
    facts: dict[str, tuple[str, int, Any]] = {}

    def put(key: str, label: str, rank: int, value: Any) -> None:
        if value is not None and value != {}:
            facts[key] = (label, rank, value)

    for k, v in (env.pop("modules", None) or {}).items():  # Sentry's installed packages
        env.setdefault(k.replace("-", "_"), v)
    env.pop("sentry_sdk", None)
    torch_v = env.pop("torch", None)
    if torch_v is not None:
        version, _, local = str(torch_v).partition("+")
        put("torch.build", "torch build", 1, local or ("cuda" if env.get("cuda") else "default"))
        put("torch.version", "torch version", 7, version)
    cuda = env.pop("cuda", None)
    if torch_v is not None:
        put("cuda", "CUDA", 1, cuda or "none (CPU-only build)")
    put("hip", "ROCm", 1, env.pop("hip", None))
    put("device", "GPU", 1, env.pop("device", None))
    work = env.pop("work", None) or {}
    pipe = work.get("pipeline") or {}
    den = pipe.get("denoiser") or ((work.get("denoisers") or [None])[0]) or {}
    dens = work.get("denoisers") or []
    comps = {"denoiser": den}
    for c in ("text_encoder", "vae"):
        if pipe.get(c):
            comps[c] = pipe[c]
    for c, f in comps.items():
        label = _COMPONENT_LABELS[c]
        if f.get("device") or f.get("dtype"):
            where = " ".join(str(x) for x in (f.get("device"), f.get("dtype")) if x)
            put(f"{c}.weights", f"{f.get('class', label) if c == 'denoiser' else label} weights", 2, where)
        if "offload" in f:
            put(f"{c}.offload", f"{label} offload (accelerate hook)", 2, bool(f["offload"]))
        if "compiled" in f:
            put(f"{c}.compiled", f"torch.compile of the {label}", 4, bool(f["compiled"]))
    if den.get("attention"):
        put("denoiser.attention", "attention processor", 3, den["attention"])
    elif any(d.get("attention") for d in dens):
        put("denoiser.attention", "attention processor", 3, next(d["attention"] for d in dens if d.get("attention")))
    if dens and dens[0].get("input_dtype"):
        put("denoiser.input_dtype", "denoiser input dtype", 2, dens[0]["input_dtype"])
    for k, v in (pipe.get("args") or {}).items():
        put(f"pipeline.{k}", _ARG_LABELS.get(k, k), 8, v)
    put("pipeline.scheduler", "scheduler", 8, pipe.get("scheduler"))
    put("pipeline.class", "pipeline", 8, pipe.get("class"))
    threads = env.pop("threads", None)
    put("threads", "torch threads", 6, pipe.get("torch_threads", threads))
    put("interop_threads", "torch inter-op threads", 6, env.pop("interop_threads", None))
    put("cpu_count", "CPU cores", 6, env.pop("cpu_count", None))
    for k, v in (env.pop("torch_flags", None) or {}).items():
        rank = 3 if k.startswith("sdpa_") else 5
        label = f"SDPA backend {k[5:].replace('_', '-')}" if k.startswith("sdpa_") else k.replace("_", " ")
        put(f"torch_flags.{k}", label, rank, v)
    comp = env.pop("compile", None) or {}
    if comp:
        put("compile.on", "torch.compile (frames compiled)", 4, int(comp.get("frames_ok", 0)))
        put("compile.graph_breaks", "torch.compile graph breaks", 4, comp.get("graph_breaks"))
    for k, v in (env.pop("env_vars", None) or {}).items():
        put(f"env_vars.{k}", f"${k}", _rank_by_words(k) if "THREADS" not in k else 6, v)
    for k in _LIB_KEYS:
        put(k, k if k != "python" else "Python", 7, env.pop(k, None))
    for k in ("implementation", "platform"):
        put(k, k, 9, env.pop(k, None))
    put("loadavg", "machine load (1-min average)", 9, env.pop("loadavg", None))
    env.pop("sched", None)  # counters, compared as a share by ``contention``
    env.pop("memory", None)  # the run's memory figures (``analysis.memory``): results, not the environment
    for k in ("source", "project", "sentry.event_id", "sentry.trace_id", "sentry.op", "server_name"):
        env.pop(k, None)  # identities of one event, not facts of the environment
    rest: dict = {}
    _flatten(env, "", rest)
    for k, v in rest.items():
        if k.startswith("contexts.runtime.version"):
            put("python", "Python", 7, v)
            continue
        if k.startswith(("contexts.trace", "contexts.profile")):
            continue
        if k.startswith("contexts.gpu."):
            put(k, f"GPU {k[13:]}", 1, v)
        elif k.startswith(("contexts.device.", "contexts.os.", "contexts.runtime.", "contexts.culture.", "contexts.app.")):
            part = k.split(".")[-1]
            put(k, k[9:], 6 if part in ("processor_count", "cpu_count") else 9, v)  # the machine, not the program
        else:
            put(k, k[9:] if k.startswith("contexts.") else k, _rank_by_words(k), v)
    if command is not None:
        put("command", "command line", 9, " ".join(command))
    return facts


def env_changes(a: RunData | dict, b: RunData | dict) -> list[EnvChange]:
    """The facts that differ between A and B, ranked (see ``RANKS``), then by key. ``a``/``b``: runs, or
    bare ``env`` dicts."""
    fa = env_facts(a.run.env, a.run.command) if isinstance(a, RunData) else env_facts(a)
    fb = env_facts(b.run.env, b.run.command) if isinstance(b, RunData) else env_facts(b)
    out = []
    if isinstance(a, RunData) and isinstance(b, RunData):
        wa, wb = cpu_wait_share(a), cpu_wait_share(b)
        if wa is not None and wb is not None and abs(wa - wb) >= 0.05:
            out.append(EnvChange("cpu_wait", "waited for a CPU (share of the work's runnable time)", 9, RANKS[9],
                                 f"{100 * wa:.0f}%", f"{100 * wb:.0f}%"))
    cores = max(int((fb.get("cpu_count") or fa.get("cpu_count") or ("", 0, 1))[2] or 1), 1)
    for k in fa.keys() | fb.keys():
        va, vb = fa.get(k), fb.get(k)
        if va is not None and vb is not None and va[2] == vb[2]:
            continue
        if k == "loadavg" and (va is None or vb is None or abs(float(va[2]) - float(vb[2])) < max(1.0, LOAD_CHANGE * cores)):
            continue  # load always differs a little: only a change of a quarter of the cores (or 1) is one
        label, rank, _ = vb or va
        out.append(EnvChange(k, label, rank, RANKS[rank], _text(va[2] if va else None), _text(vb[2] if vb else None)))
    order = {"cpu_wait": 0, "loadavg": 1, "torch.build": 0, "cuda": 1, "device": 2, "denoiser.weights": 0, "denoiser.offload": 1, "denoiser.input_dtype": 2,
             "denoiser.attention": 0, "denoiser.compiled": 0, "compile.on": 1, "threads": 0}
    comp = {"denoiser": 0, "text_encoder": 1, "vae": 2}
    out.sort(key=lambda c: (c.rank, order.get(c.key, 9), comp.get(c.key.split(".")[0], 3), c.key))
    return out


# -- time ------------------------------------------------------------------------------------------

def _change(name: str, a, b) -> TimeChange:
    """The change of ``b``'s median over ``a``'s (durations in ns: lists or float arrays, any length)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ma = float(np.median(a)) if len(a) else 0.0
    mb = float(np.median(b)) if len(b) else 0.0
    tc = TimeChange(name, len(a), len(b), ma, mb, float(a.sum()), float(b.sum()))
    if not len(a) or not len(b):
        tc.only_in = "a" if len(a) else "b"
        return tc
    if ma <= 0:
        return tc
    tc.change = mb / ma - 1.0
    if len(a) >= MIN_CI_REPEATS and len(b) >= MIN_CI_REPEATS:
        c = compare(b, a)
        tc.ci_low, tc.ci_high = c.ci_low, c.ci_high
        tc.noise = max(robust_cv(a), robust_cv(b))
        tc.significant = bool(c.significant and abs(tc.change) >= max(NEGLIGIBLE, NOISE_K * tc.noise))
    return tc


def robust_cv(x: list[float]) -> float:
    """1.4826 x MAD / median of ``x`` (0 for an empty or zero-median list): the spread of normal data as
    a fraction of the median, unmoved by a few outliers (a warm-up repeat)."""
    a = np.asarray(x, dtype=np.float64)
    if not len(a):
        return 0.0
    med = float(np.median(a))
    return 1.4826 * float(np.median(np.abs(a - med))) / med if med > 0 else 0.0


def cpu_wait_share(d: RunData) -> float | None:
    """How much of the work's runnable time the main thread spent waiting for a CPU (0..1): from the
    scheduler's counters (``/proc/self/schedstat``) at the first pipeline call and at the end of the run
    (the whole run without a traced pipeline call); None when not recorded (not Linux, an ingested run)."""
    end = d.run.env.get("sched")
    start = (d.run.env.get("work") or {}).get("sched_first_call") or [0, 0]
    try:
        run, wait = int(end[0]) - int(start[0]), int(end[1]) - int(start[1])
    except (TypeError, ValueError, IndexError):
        return None
    return wait / (run + wait) if run > 0 and wait >= 0 and run + wait >= 1_000_000 else None


def contention(a: RunData, b: RunData) -> float | None:
    """The ratio of times B/A that waiting for a CPU alone explains: ``(1 - wait share A) / (1 - wait share
    B)`` (a main thread that waited 50% of its runnable time took 2x its time on a CPU); None unless both
    runs recorded it. A program busy on another core (the machine's load) shows here, not in the env."""
    wa, wb = cpu_wait_share(a), cpu_wait_share(b)
    if wa is None or wb is None or wa >= 0.99 or wb >= 0.99:
        return None
    return (1 - wa) / (1 - wb)


def adjust(tc: TimeChange, k: float | None) -> None:
    """Take the runs' contention ratio ``k`` out of a change: the ratio and its CI are divided by ``k`` and
    significance is decided on them (same rule). Nothing when ``k`` is None or within 5% of 1."""
    if k is None or abs(k - 1) < NEGLIGIBLE or tc.change is None:
        return
    tc.adjusted = (1 + tc.change) / k - 1
    if tc.ci_low is not None:
        lo, hi = (1 + tc.ci_low) / k - 1, (1 + tc.ci_high) / k - 1
        tc.significant = bool((lo > 0 or hi < 0) and abs(tc.adjusted) >= max(NEGLIGIBLE, NOISE_K * tc.noise))


def span_changes(a: RunData, b: RunData) -> list[TimeChange]:
    """Per span name (transactions and sync sites apart), by the larger total time first."""
    def durations(d: RunData) -> dict[str, np.ndarray]:
        t = as_table(d.spans)
        rows = np.flatnonzero(~(t.op_mask("transaction") | t.op_mask("sync")))
        codes, dur = t.name[rows], t.dur[rows].astype(np.float64)
        order = np.argsort(codes, kind="stable")  # grouped by name on the columns: no object per span
        codes, dur = codes[order], dur[order]
        bounds = np.flatnonzero(np.diff(codes)) + 1
        return {t.names[int(codes[lo])]: dur[lo:hi]
                for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(codes)]) if hi > lo}

    da, db = durations(a), durations(b)
    none = np.zeros(0)
    rows = [_change(n, da.get(n, none), db.get(n, none)) for n in da.keys() | db.keys()]
    rows.sort(key=lambda r: -max(r.total_a_ns, r.total_b_ns))
    return rows


def _steps(d: RunData) -> dict[int, list[float]]:
    t = step_table(d.spans, max_rows=None)  # every step, however many
    out: dict[int, list[float]] = defaultdict(list)
    for r in (t.rows if t is not None else []):
        out[r.step].append(float(r.wall_ns))
    return out


def step_changes(a: RunData, b: RunData) -> list[TimeChange]:
    """Per denoising step index (over pipeline calls): its wall time in A and B."""
    sa, sb = _steps(a), _steps(b)
    return [_change(f"step {i}", sa.get(i, []), sb.get(i, [])) for i in sorted(sa.keys() | sb.keys())]


def _import_ns(d: RunData, index: ProfileIndex | None, start: int, end: int) -> float | None:
    """Sampled time (ns) of the main thread (all threads when unnamed) in ``[start, end)`` with an import on
    the stack (``importlib._bootstrap``)."""
    if index is None or not len(index):
        return None
    main = next((tid for tid, name in d.profile.thread_names.items() if name == "MainThread"), None)
    idx = index.select(start, end, main)
    if not len(idx):
        return None
    fn_import = np.array([f.name.startswith("importlib._bootstrap") for f in index.functions] or [False])
    uniq, w, _ = index.stack_weights(idx)
    return float(sum(wt for sid, wt in zip(uniq.tolist(), w.tolist())
                     if any(fn_import[f] for f in index.stack_funcs[sid])))


def phases(a: RunData, b: RunData, index_a: ProfileIndex | None = None, index_b: ProfileIndex | None = None) -> list[Phase]:
    """Start-up (and the sampled time in imports within it), work and whole run of each (see ``Phase``)."""
    def of(d: RunData, index) -> tuple:
        t = as_table(d.spans)
        work = ~t.op_mask("transaction")
        if not work.any():
            return None, None, None, d.run.wall_time_ns
        scope_codes = [k for k, nm in enumerate(t.names) if kind_of_name(nm) == "scope"]
        scopes = work & np.isin(t.name, scope_codes) if scope_codes else work & False
        first = int(t.start[scopes if scopes.any() else work].min())
        last = int(t.end[work].max())
        return (float(first - d.run.start_ns), _import_ns(d, index, d.run.start_ns, first), float(last - first),
                d.run.wall_time_ns)

    pa, pb = of(a, index_a), of(b, index_b)
    out = [Phase("start-up (imports, model loading)", pa[0], pb[0])]
    if pa[1] is not None or pb[1] is not None:
        out.append(Phase("  of which imports (sampled)", pa[1], pb[1]))
    return out + [Phase("work (first to last traced call)", pa[2], pb[2]), Phase("whole run", pa[3], pb[3])]


# -- where the time went ---------------------------------------------------------------------------

def _by_name(node: CallNode) -> dict:
    """A call tree keyed by function name: name -> [total_ns, children]."""
    out: dict = {}
    for c in node.children.values():
        e = out.setdefault(c.name, [0.0, {}])
        e[0] += c.total_ns
        for k, v in _by_name(c).items():
            f = e[1].setdefault(k, [0.0, {}])
            _merge_into(f, v)
    return out


def _merge_into(dst: list, src: list) -> None:
    dst[0] += src[0]
    for k, v in src[1].items():
        _merge_into(dst[1].setdefault(k, [0.0, {}]), v)


def flame_diff(tree_a: CallNode, n_a: int, tree_b: CallNode, n_b: int, min_share: float = 0.002) -> FlameNode:
    """Merge two call trees by function name into a differential flame graph, ns per repeat; nodes under
    ``min_share`` of the larger root in both runs are dropped."""
    ra, rb = tree_a.total_ns / max(n_a, 1), tree_b.total_ns / max(n_b, 1)
    limit = min_share * max(ra, rb)

    def merge(name: str, ea: list | None, eb: list | None) -> FlameNode:
        node = FlameNode(name, (ea[0] / n_a) if ea else 0.0, (eb[0] / n_b) if eb else 0.0)
        ka = ea[1] if ea else {}
        kb = eb[1] if eb else {}
        for k in ka.keys() | kb.keys():
            ca, cb = ka.get(k), kb.get(k)
            if max(ca[0] / n_a if ca else 0.0, cb[0] / n_b if cb else 0.0) < limit:
                continue
            node.children.append(merge(k, ca, cb))
        node.children.sort(key=lambda c: -max(c.a_ns, c.b_ns))
        return node

    return merge("all", [tree_a.total_ns, _by_name(tree_a)], [tree_b.total_ns, _by_name(tree_b)])


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
    blame = next((c for c in env if c.rank <= BLAMEABLE), None)
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
    load = next((c for c in env if c.key == "loadavg"), None)
    none = (f"no environment change explains it, but the machine's load changed ({load.before} -> {load.after})"
            if load is not None else "no environment change explains it")
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
    headline = _change("step" if unit == "step" else unit, [float(r.duration_ns) for r in ra],
                       [float(r.duration_ns) for r in rb])
    env = env_changes(a, b)
    k = contention(a, b)
    spans_c = span_changes(a, b)
    steps_c = step_changes(a, b) if unit == "step" else []
    for tc in (headline, *spans_c, *steps_c):
        adjust(tc, k)
    ia, ib = ProfileIndex(a.profile), ProfileIndex(b.profile)

    def sel(index: ProfileIndex, reps) -> np.ndarray:
        if reps and all(r.thread_id is not None for r in reps):
            idx = index.select_many(np.array([r.start_ns for r in reps]), np.array([r.end_ns for r in reps]),
                                    np.array([r.thread_id for r in reps]))[0]
        else:
            parts = [index.select(r.start_ns, r.end_ns, r.thread_id) for r in reps]
            idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        # whole runs: the waiting of threads other than the main one left out (a background thread's wait for work
        # is no cost of the run; the main thread's waits, a sleep grown longer, are)
        return idx[~(index.idle[idx] & ~index.main[idx])] if unit == "run" and len(idx) else idx

    sa, sb = sel(ia, ra), sel(ib, rb)
    na, nb = max(len(ra), 1), max(len(rb), 1)
    notes: list[str] = []
    functions: list[FunctionChange] = []
    flame = None
    if len(sa) and len(sb):
        fa, fb = _function_self(ia, sa), _function_self(ib, sb)
        gap = (np.mean([r.duration_ns for r in rb]) - np.mean([r.duration_ns for r in ra])) if ra and rb else 0.0
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
    return Diff(a.run.id, b.run.id, a.run.env.get("source", "run"), b.run.env.get("source", "run"), unit, unit_label,
                headline, env, phs, spans_c, steps_c,
                functions, flame, ops, text, cause,
                {"step": "per denoising step", "run": "per run"}.get(unit) or f"per call of {_short(unit)}", len(sa), len(sb),
                notes)


def program_key(command: list[str]) -> str:
    """What makes two runs "the same command": the script or module run (the interpreter and the
    program's own arguments left out), or the first word."""
    if not command:
        return ""
    head = os.path.basename(command[0])
    if head.startswith("python") and len(command) > 1:
        rest = command[1:]
        if rest[0] in ("-m", "-c") and len(rest) > 1:
            return " ".join(rest[:2])
        return rest[0]
    return command[0]


#: how many runs before B ``pick_runs`` looks through for one of the same program (else the one just before B)
EARLIER_RUNS = 500


def pick_runs(store, ref_a: str | None = None, ref_b: str | None = None) -> tuple[str, str]:
    """The run ids to compare, ``(A, B)``. Both given: as given (ids or prefixes; not one run twice). Only
    ``ref_a``: A against the newest run. Neither: B is the newest run and A the newest run before it of the same
    command (``program_key``), else the run just before it. Only ``ref_b``: A is chosen for B the same way.
    Raises StoreError for an unknown id, DiffError when the store holds fewer than two runs."""
    b = store.resolve_id(ref_b)
    if ref_a:
        a = store.resolve_id(ref_a)
        if a == b:
            raise DiffError(f"A and B are the same run ({a}): name the run to compare it with" if ref_b else
                            f"run {a} is the newest run: name the run to compare it with (stepscope diff {a[:15]} RUN_B)")
        return a, b
    key = program_key(store.get_run(b).command)
    earlier = store.runs_before(b, EARLIER_RUNS)
    if not earlier:
        raise DiffError(f"run {b} has no earlier run to compare with: record another (stepscope run ...) or name two runs")
    same = next((rid for rid, command in earlier if program_key(command) == key), None)
    return same or earlier[0][0], b


def device_trace_path(store, run_id: str) -> str | None:
    """The run's device trace file (``Store.run_file(run_id, DEVICE_TRACE)``), or None without one."""
    from ..store.db import DEVICE_TRACE

    p = store.run_file(run_id, DEVICE_TRACE)
    return str(p) if p.exists() else None
