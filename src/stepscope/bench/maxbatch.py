"""The largest batch (or image size) that fits: ``stepscope bench sd --max-batch`` / ``--max-size``.

Each candidate value runs in a fresh worker process (``bench.worker``: build the configuration, one untimed
warm-up, ``repeats`` timed runs), so that one run's cached or fragmented memory never helps or hurts the next.
A value *fits* when its worker builds and runs without an out-of-memory error (``MemoryError``, torch's
``OutOfMemoryError``, the CPU allocator's "can't allocate memory", or the worker killed by a signal: the OOM
killer's SIGKILL, or an abort where an allocation failed in a C++ thread).

The search: doubling from the start value (1, 2, 4, ... in units of ``step``) until a value does not fit, then
bisection between the last value that fitted and the first that did not; it assumes that whatever fits at
``n`` fits below ``n``. ``ceiling`` bounds it (a value that fits there ends the search).

On the CPU the budget is ``memory_limit`` bytes per worker, enforced with ``RLIMIT_AS`` (setrlimit(2): the
worker's whole address space, set between fork and exec): what counts is virtual memory (libraries, thread
stacks and malloc arenas included), so the budget is an upper bound that a worker reaches before its resident
memory does. On CUDA the device's memory is the budget (the worker's allocations fail with
``torch.OutOfMemoryError``); ``memory_limit`` then caps the process's address space only.

Figures per value (``Probe``): the median wall time of the timed runs, images/s (batch / median wall time),
the peak memory (CPU: peak RSS, ``ru_maxrss``; CUDA: ``max_memory_allocated``) and the address space's peak
(``VmPeak``).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Callable

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000 ** 4, "tib": 1 << 40}


def parse_bytes(text: str, name: str = "--memory-limit") -> int:
    """``8GiB``, ``512MiB``, ``2g``, ``1.5GB``, ``1073741824`` -> bytes (k/m/g/t alone are binary). Raises
    ValueError with one line naming ``name``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"{name}: expected a size such as 8GiB, 512MiB or 2g, got {text!r}")
    v = int(float(m.group(1)) * _UNITS[unit])
    if v < 16 << 20:
        raise ValueError(f"{name}: at least 16 MiB, got {text!r}")
    return v


@dataclass(slots=True)
class Probe:
    """One candidate value tried in its own worker: ``fits``; ``wall_s`` (median of the timed runs),
    ``images_s``, ``peak_bytes``, ``vm_peak_bytes``; ``error``: why it did not fit (or failed otherwise);
    ``oom``: the failure was running out of memory (False: another error, which ends the search)."""

    value: int
    fits: bool
    wall_s: float | None = None
    images_s: float | None = None
    peak_bytes: int | None = None
    vm_peak_bytes: int | None = None
    error: str | None = None
    oom: bool = False
    times_s: list[float] = field(default_factory=list)


@dataclass(slots=True)
class MaxResult:
    """The search's outcome: ``dimension`` ("batch" or "size"), ``best`` (the largest value that fits, None
    when not even the start does), every ``probes`` in the order tried, ``limit_bytes`` (None: the device's
    memory only), ``config`` (the configuration searched), ``stopped``: why the search ended early (a
    failure that is not out of memory), else None."""

    dimension: str
    best: int | None
    probes: list[Probe]
    limit_bytes: int | None
    config: dict
    stopped: str | None = None

    @property
    def curve(self) -> list[Probe]:
        """The values that fit, ascending: the throughput curve up to the largest."""
        return sorted((p for p in self.probes if p.fits), key=lambda p: p.value)

    @property
    def best_probe(self) -> Probe | None:
        return next((p for p in self.probes if p.value == self.best and p.fits), None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["curve"] = [asdict(p) for p in self.curve]
        return d


def search(fits: Callable[[int], Probe], start: int = 1, step: int = 1, ceiling: int = 4096,
           say: Callable[[str], None] | None = None) -> tuple[int | None, list[Probe], str | None]:
    """Doubling, then bisection (see the module doc). ``fits(value) -> Probe``; values are multiples of
    ``step`` from ``start``. Returns ``(largest value that fits or None, probes in order, why stopped early)``."""
    say = say or (lambda s: None)
    probes: list[Probe] = []
    tried: dict[int, Probe] = {}

    def attempt(v: int) -> Probe:
        if v not in tried:
            say(f"trying {v}")
            p = fits(v)
            tried[v] = p
            probes.append(p)
        return tried[v]

    ok, bad = None, None
    v = start
    while v <= ceiling:
        p = attempt(v)
        if not p.fits:
            if not p.oom:
                return ok, probes, f"{v}: {p.error}"
            bad = v
            break
        ok = v
        if v == ceiling:
            break
        v = min(v * 2, ceiling) if v * 2 > v else ceiling
        v = max(start, (v // step) * step)
    if ok is None or bad is None:
        return ok, probes, None
    while bad - ok > step:
        mid = ok + ((bad - ok) // step // 2) * step
        if mid <= ok:
            mid = ok + step
        p = attempt(mid)
        if p.fits:
            ok = mid
        elif p.oom:
            bad = mid
        else:
            return ok, probes, f"{mid}: {p.error}"
    return ok, probes, None


#: what a worker says when it runs out of memory, or (under ``--memory-limit``, an address-space limit) when whatever
#: needed more address space failed: an allocator, numpy ("Unable to allocate"), a thread's stack ("can't start
#: new thread"), a library loaded late ("failed to map segment from shared object"), errno 12 (ENOMEM)
_OOM_TEXT = ("MemoryError", "OutOfMemoryError", "out of memory", "can't allocate memory", "not enough memory",
             "Cannot allocate memory", "std::bad_alloc", "Resource temporarily unavailable", "Unable to allocate",
             "can't start new thread", "failed to map segment from shared object", "[Errno 12]", "ENOMEM")


def _is_oom_text(text: str) -> bool:
    return any(t in (text or "") for t in _OOM_TEXT)


def _limit(nbytes: int | None):
    if nbytes is None:
        return None

    def preexec() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))

    return preexec


def run_probe(cfg: dict, limit_bytes: int | None, repeats: int = 1, warmup: int = 1, timeout_s: float = 900.0,
              python: str | None = None) -> Probe:
    """Run ``cfg`` (a ``bench.spec`` SD configuration) in a fresh worker under ``limit_bytes`` of address space;
    the value reported is ``cfg["batch"]`` (``Probe.value`` is set by the caller's dimension)."""
    value = int(cfg.get("batch") or 1)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    try:
        proc = subprocess.Popen([python or sys.executable, "-m", "stepscope.bench.worker", json.dumps(cfg)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=_limit(limit_bytes))
    except OSError as e:
        return Probe(value, False, error=f"cannot start a worker: {e}")
    lines = ["warmup\n"] * warmup + ["run\n"] * repeats + ["quit\n"]
    try:
        out, err = proc.communicate("".join(lines), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Probe(value, False, error=f"no answer within {timeout_s:.0f} s", oom=False)
    replies = []
    for ln in out.splitlines():
        try:
            replies.append(json.loads(ln))
        except ValueError:
            continue
    tail = (err or "").strip().splitlines()[-1:] or [""]
    if proc.returncode < 0:  # killed: SIGKILL from the OOM killer, SIGABRT from a failed allocation in C++
        import signal as _signal

        sig = -proc.returncode
        name = _signal.Signals(sig).name if sig in _signal.Signals._value2member_map_ else f"signal {sig}"
        return Probe(value, False, error=f"worker killed by {name}" + (f" ({tail[0][:200]})" if tail[0] else ""),
                     oom=sig in (_signal.SIGKILL, _signal.SIGABRT, _signal.SIGSEGV, _signal.SIGBUS) or _is_oom_text(err))
    if not replies:
        text = tail[0] or f"exit status {proc.returncode}"
        return Probe(value, False, error=f"worker failed: {text[:300]}", oom=_is_oom_text(err))
    hello = replies[0]
    if "error" in hello:
        return Probe(value, False, error=hello["error"][:300], oom=_is_oom_text(hello["error"]))
    runs = [r for r in replies[1:] if r.get("kind") == "run"]
    bad = next((r for r in replies[1:] if "error" in r), None)
    if bad is not None or len(runs) < repeats:
        text = bad["error"] if bad is not None else (tail[0] or "the worker stopped answering")
        return Probe(value, False, error=text[:300], oom=_is_oom_text(text) or _is_oom_text(err) or bad is None)
    times = [r["wall_s"] for r in runs]
    wall = statistics.median(times)
    batch = int(cfg.get("batch") or 1)
    return Probe(value, True, wall, batch / wall if wall > 0 else None, max(r.get("peak_bytes") or 0 for r in runs) or None,
                 max(r.get("vm_peak") or 0 for r in runs) or None, times_s=times)


def find_max(cfg: dict, dimension: str = "batch", limit_bytes: int | None = None, repeats: int = 1, warmup: int = 1,
             ceiling: int | None = None, say: Callable[[str], None] | None = None,
             probe: Callable[[dict, int | None], Probe] | None = None) -> MaxResult:
    """The largest ``dimension`` ("batch", or "size" in px at the configuration's batch) that fits under
    ``limit_bytes`` (see the module doc). ``probe(cfg, limit_bytes)``: runs one configuration (default
    ``run_probe``); sizes are searched in multiples of the model's size step (``size_step``)."""
    if dimension not in ("batch", "size"):
        raise ValueError(f"dimension: batch or size, got {dimension!r}")
    run = probe or (lambda c, lim: run_probe(c, lim, repeats, warmup))
    step = 1 if dimension == "batch" else size_step(cfg.get("model", "tiny"))
    start = step if dimension == "size" else 1
    ceiling = ceiling or (4096 if dimension == "batch" else 4096)

    def fits(v: int) -> Probe:
        c = dict(cfg, **{dimension: v})
        p = run(c, limit_bytes)
        p.value = v
        if dimension == "size" and p.fits and p.wall_s:
            p.images_s = int(c.get("batch") or 1) / p.wall_s
        return p

    best, probes, stopped = search(fits, start, step, ceiling, say)
    return MaxResult(dimension, best, probes, limit_bytes, dict(cfg), stopped)


def size_step(model: str) -> int:
    """Image sizes that the model takes, in px: the VAE's scale factor times the UNet's downsampling
    (tiny: 2 x 2 = 4... rounded up to 8; SD 1.5: 8 x 8 = 64)."""
    return 8 if model == "tiny" else 64
