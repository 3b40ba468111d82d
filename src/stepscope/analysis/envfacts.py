"""Environment facts of two runs, and the ones that differ, ranked by how often each kind explains a slowdown.

The runs' ``env`` (recorded by ``envinfo.environment`` and ``record.steps.workfacts`` during ``stepscope run``; Sentry
contexts for ingested runs) and command lines, flattened to facts and ranked by how often each kind explains a
slowdown in Stable Diffusion reports: torch build and device (a CPU-only build, the CUDA version), where the
denoiser's weights live (device, dtype, offload), attention processor and SDPA backends, torch.compile, math
precision flags, thread counts, library versions, pipeline arguments (size, steps, batch, guidance, scheduler,
step callback), then the rest (``RANKS``). The share of the work's time the main thread waited for a CPU
(``cpu_wait_share``, from the scheduler's counters) is reported with them when it changed, and so are the CPUs
that other programs and the hypervisor kept busy during the work (``machine_others``, from ``/proc/stat``).

Part 1 of ``analysis.diff.diff_runs``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.model import RunData

LOAD_CHANGE = 0.25  # of the cores: a change of the machine's load average that is reported
OTHERS_CHANGE = 0.5  # CPUs: the least change of the CPU time other programs (or the hypervisor) used that is reported

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
    # how stepscope sampled (its own facts, not the program's: the rates it used, its rests, are results of the run)
    put("sampler.main", "main thread sampled by", 9, (env.pop("sampler", None) or {}).get("main"))
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
            out.append(EnvChange("cpu_wait", "waited for a CPU (share of the work's time)", 9, RANKS[9],
                                 f"{100 * wa:.0f}%", f"{100 * wb:.0f}%"))
    cores = max(int((fb.get("cpu_count") or fa.get("cpu_count") or ("", 0, 1))[2] or 1), 1)
    oa, ob = (machine_others(a), machine_others(b)) if isinstance(a, RunData) and isinstance(b, RunData) else (None, None)
    if oa is not None and ob is not None:
        for key, label, i in (("others_cpu", "other programs' CPU use during the work (CPUs busy)", 0),
                              ("steal", "CPU time the hypervisor took (CPUs)", 1)):
            if abs(oa[i] - ob[i]) >= max(OTHERS_CHANGE, LOAD_CHANGE * cores):
                out.append(EnvChange(key, label, 9, RANKS[9], f"{oa[i]:.1f}", f"{ob[i]:.1f}"))
    for k in fa.keys() | fb.keys():
        va, vb = fa.get(k), fb.get(k)
        if va is not None and vb is not None and va[2] == vb[2]:
            continue
        if k == "loadavg" and (va is None or vb is None or abs(float(va[2]) - float(vb[2])) < max(1.0, LOAD_CHANGE * cores)):
            continue  # load always differs a little: only a change of a quarter of the cores (or 1) is one
        label, rank, _ = vb or va
        out.append(EnvChange(k, label, rank, RANKS[rank], _text(va[2] if va else None), _text(vb[2] if vb else None)))
    order = {"cpu_wait": 0, "others_cpu": 1, "steal": 2, "loadavg": 3, "torch.build": 0, "cuda": 1, "device": 2, "denoiser.weights": 0, "denoiser.offload": 1, "denoiser.input_dtype": 2,
             "denoiser.attention": 0, "denoiser.compiled": 0, "compile.on": 1, "threads": 0}
    comp = {"denoiser": 0, "text_encoder": 1, "vae": 2}
    out.sort(key=lambda c: (c.rank, order.get(c.key, 9), comp.get(c.key.split(".")[0], 3), c.key))
    return out


def cpu_wait_share(d: RunData) -> float | None:
    """How much of the work's time the main thread spent waiting for a CPU (0..1): from the scheduler's counters
    (``/proc/self/schedstat``) at the first pipeline call (else the session's start) and at the end of the run.
    The share is of the wall time between the two readings when they carry their time (a unit that mostly sleeps
    or waits for the device is barely slowed by a busy CPU), else of the runnable time (on a CPU + waiting for one:
    runs recorded before the readings had times). None when not recorded (not Linux, an ingested run)."""
    end = d.run.env.get("sched")
    start = (d.run.env.get("work") or {}).get("sched_first_call") or [0, 0]
    try:
        run, wait = int(end[0]) - int(start[0]), int(end[1]) - int(start[1])
        wall = int(end[2]) - int(start[2]) if len(end) > 2 and len(start) > 2 else None
    except (TypeError, ValueError, IndexError):
        return None
    if wall is not None:
        return min(wait / wall, 0.99) if wall >= 1_000_000 and wait >= 0 else None
    return wait / (run + wait) if run > 0 and wait >= 0 and run + wait >= 1_000_000 else None


def machine_others(d: RunData) -> tuple[float, float] | None:
    """``(CPUs busy with other programs, CPUs taken by the hypervisor)`` on average over the work (the readings of
    ``cpu_wait_share``): the machine's busy time (``/proc/stat``) less the process's own CPU time, and its steal
    time, each divided by the wall time between the readings. 1.0 = one core busy all along. A program busy on
    another core makes this one wait for no CPU, yet it can slow it (memory bandwidth, shared caches: a
    memory-bound neighbour slowed the tiny pipeline's steps by 1.3x here with no waiting). None when not recorded
    (runs recorded before the machine's counters were, not Linux, an ingested run). The program's own child
    processes count as other programs."""
    end = d.run.env.get("sched")
    start = (d.run.env.get("work") or {}).get("sched_first_call")
    try:
        if len(end) < 6 or len(start) < 6:
            return None
        wall = int(end[2]) - int(start[2])
        busy, steal, own = (int(end[i]) - int(start[i]) for i in (3, 4, 5))
    except (TypeError, ValueError):
        return None
    if wall < 10_000_000:  # (the counters tick every 10 ms)
        return None
    return max(busy - own, 0) / wall, max(steal, 0) / wall
