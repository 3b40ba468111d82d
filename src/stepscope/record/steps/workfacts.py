"""Facts about the work a diffusers pipeline does, recorded cheaply at run time for ``stepscope diff``.

When a traced pipeline call (``DiffusionPipeline.__call__``) or denoiser forward starts, the step hooks
(``steps.hooks``) hand its frame here. We read, without importing torch or diffusers and without a
device sync:

- a pipeline call: the arguments that shape the work (``height``, ``width``, ``num_inference_steps``,
  ``guidance_scale``, ``num_images_per_prompt``, the batch from ``prompt``, the step callback's name),
  the scheduler's class, the torch thread count, and the facts of its components below;
- a denoiser (the pipeline's ``unet``/``transformer``, or the traced forward's ``self``) and the other
  components (``text_encoder``, ``vae``): class, device and dtype of the first parameter, whether
  torch.compile wrapped it (``OptimizedModule``), whether accelerate's offload hook sits on it, and for
  the denoiser its attention processor classes (``attn_processors``, counted by class name).

At the first pipeline call the main thread's scheduler counters (``read_schedstat``) are noted, so that
``diff`` can tell how long the work waited for a CPU (another program busy on the machine).

Cost: a pipeline call reads its locals and walks the denoiser's attention processors once (about a
millisecond for SD 1.5, against seconds of work); a denoiser forward does so only on the first call of
each object. Everything is kept as plain data (no reference to the program's objects) and read by
``envinfo.environment()`` into the run's ``env["work"]``.

Stdlib only: this module runs inside the profiled program.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ...core import clock

_lock = threading.Lock()
_pipeline: dict | None = None  # the last pipeline call's facts
_pipeline_calls = 0
_denoisers: dict[int, dict] = {}  # id(module) -> facts at its first traced forward
_MAX_DENOISERS = 8

_sched0: list | None = None  # the main thread's counters (``read_schedstat``) at the first pipeline call
_sched_start: list | None = None  # ... and at the session's start (``reset``): a session in a long-lived process


def read_schedstat() -> list | None:
    """``[ns on a CPU, ns runnable but waiting for a CPU, when, machine busy ns, machine steal ns, process CPU ns]``:
    the process's main thread's scheduler counters (Linux ``/proc/self/schedstat``, cumulative since the thread
    started; None elsewhere), ``when`` on the run's clock (``core.clock.now_ns``), then the machine's CPU time
    (``read_machine``) and the process's own (``time.process_time_ns``: every thread's user + system time), so
    that ``diff`` can tell what other programs used of the machine between two readings. The waiting time is what
    other programs on a busy machine cost this one; a program busy on another core costs no waiting but can still
    slow this one (memory bandwidth, shared caches), which only the machine's busy time shows."""
    try:
        with open("/proc/self/schedstat", "rb") as f:
            run, wait = f.read().split()[:2]
        out = [int(run), int(wait), clock.now_ns()]
    except (OSError, ValueError):
        return None
    machine = read_machine()
    if machine is not None:
        out += [*machine, time.process_time_ns()]
    return out


_TICK_NS = None


def read_machine() -> tuple[int, int] | None:
    """``(busy ns, steal ns)`` summed over the machine's CPUs since boot, from the first line of ``/proc/stat``
    (proc(5): user, nice, system, idle, iowait, irq, softirq, steal, ... in ``USER_HZ`` ticks; busy = user + nice +
    system + irq + softirq, guest time being counted in user; steal: the time a hypervisor ran something else on
    this virtual machine's CPUs). None where it cannot be read."""
    global _TICK_NS
    try:
        if _TICK_NS is None:
            _TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        with open("/proc/stat", "rb") as f:
            line = f.readline().split()
        if line[0] != b"cpu" or len(line) < 9:
            return None
        ticks = [int(x) for x in line[1:9]]  # user, nice, system, idle, iowait, irq, softirq, steal
        return (sum(ticks[:3]) + ticks[5] + ticks[6]) * _TICK_NS, ticks[7] * _TICK_NS
    except (OSError, ValueError, IndexError):
        return None


_ARGS = ("height", "width", "num_inference_steps", "guidance_scale", "num_images_per_prompt", "strength", "eta")


def _qualname(obj) -> str:
    t = obj if isinstance(obj, type) else type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def module_facts(mod, attention: bool = False) -> dict:
    """Class, ``device`` and ``dtype`` of the first parameter, ``compiled`` and ``offload`` of a torch
    module (``{}`` for None); with ``attention`` its attention processor classes -> count."""
    if mod is None:
        return {}
    out: dict = {"class": type(mod).__name__}
    inner = mod
    if type(mod).__name__ == "OptimizedModule":  # torch.compile(module)
        out["compiled"] = True
        inner = getattr(mod, "_orig_mod", mod)
        out["class"] = type(inner).__name__
    else:
        out["compiled"] = False
    try:
        p = next(inner.parameters(), None)
        if p is not None:
            out["device"] = str(p.device)
            out["dtype"] = str(p.dtype).replace("torch.", "")
    except Exception:
        pass
    out["offload"] = bool(getattr(inner, "_hf_hook", None) is not None)
    if attention:
        try:
            procs = getattr(inner, "attn_processors", None)
            if isinstance(procs, dict) and procs:
                counts: dict[str, int] = {}
                for p in procs.values():
                    n = type(p).__name__
                    counts[n] = counts.get(n, 0) + 1
                out["attention"] = counts
        except Exception:
            pass
    return out


def _batch(loc) -> int | None:
    prompt = loc.get("prompt")
    if isinstance(prompt, str):
        return 1
    if isinstance(prompt, (list, tuple)):
        return len(prompt)
    emb = loc.get("prompt_embeds")
    shape = getattr(emb, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) else None


def note_pipeline(frame) -> None:
    """A traced pipeline call starts (``frame``: its frame). Never raises."""
    global _pipeline, _pipeline_calls, _sched0
    try:
        loc = frame.f_locals
        pipe = loc.get(frame.f_code.co_varnames[0]) if frame.f_code.co_argcount else None
        if pipe is None:
            return
        args = {k: loc.get(k) for k in _ARGS if isinstance(loc.get(k), (int, float, str, bool))}
        batch = _batch(loc)
        if batch is not None:
            args["batch"] = batch * int(args.get("num_images_per_prompt") or 1)
        cb = loc.get("callback_on_step_end") or loc.get("callback")
        if cb is not None:
            args["callback"] = getattr(cb, "__qualname__", None) or type(cb).__name__
        denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
        if "height" not in args or "width" not in args:  # the pipeline's default: sample_size x vae scale
            try:
                cfg = getattr(denoiser, "config", None)
                size = int(cfg.sample_size) * int(getattr(pipe, "vae_scale_factor", 8))
                args.setdefault("height", size)
                args.setdefault("width", size)
            except Exception:
                pass
        facts = {"class": type(pipe).__name__, "args": args}
        sched = getattr(pipe, "scheduler", None)
        if sched is not None:
            facts["scheduler"] = type(sched).__name__
        facts["denoiser"] = module_facts(denoiser, attention=True)
        for name in ("text_encoder", "vae"):
            m = getattr(pipe, name, None)
            if m is not None:
                facts[name] = module_facts(m)
        torch = sys.modules.get("torch")
        if torch is not None:
            facts["torch_threads"] = torch.get_num_threads()
        if _sched0 is None:
            _sched0 = read_schedstat()
        with _lock:
            _pipeline = facts
            _pipeline_calls += 1
    except Exception:  # the program must never notice
        pass


def note_denoiser(mod, sample) -> None:
    """A traced denoiser forward starts: its module's facts, on the first call of each object. ``mod``, ``sample``:
    the forward's first two arguments (``self`` and its input)."""
    try:
        key = id(mod)
        if mod is None or key in _denoisers or len(_denoisers) >= _MAX_DENOISERS:
            return
        facts = module_facts(mod, attention=True)
        if getattr(sample, "dtype", None) is not None:
            facts["input_dtype"] = str(sample.dtype).replace("torch.", "")
            facts["input_shape"] = [int(x) for x in sample.shape]
        with _lock:
            _denoisers[key] = facts
    except Exception:
        pass


def snapshot() -> dict:
    """What was noted so far: ``{"pipeline": {...}, "pipeline_calls": n, "denoisers": [...]}`` (keys only
    when there is something)."""
    with _lock:
        out: dict = {}
        if _pipeline is not None:
            out["pipeline"] = _pipeline
            out["pipeline_calls"] = _pipeline_calls
        if _denoisers:
            out["denoisers"] = list(_denoisers.values())
        if _sched0 is not None or _sched_start is not None:  # (the session's start: no pipeline call traced)
            out["sched_first_call"] = _sched0 if _sched0 is not None else _sched_start
        return out


def reset() -> None:
    """Forget what was noted (a new session in the same process), and note the scheduler's counters now: the work's
    waiting for a CPU counts from here when no pipeline call is traced (a notebook's cell, a test)."""
    global _pipeline, _pipeline_calls, _sched0, _sched_start
    with _lock:
        _pipeline, _pipeline_calls, _sched0 = None, 0, None
        _sched_start = read_schedstat()
        _denoisers.clear()
