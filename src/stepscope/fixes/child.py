"""One configuration of ``stepscope try``: ``python -m stepscope.fixes.child (SCRIPT | -m MOD | -c CODE) ARGS``.

The program runs as Python runs it (``launch.fresh_main``/``run_main``: its ``__main__``, argv, ``sys.path[0]``),
unmodified on disk. When ``diffusers.pipelines.pipeline_utils`` has executed, every ``DiffusionPipeline``
subclass's own ``__call__`` (those defined later too, through ``__init_subclass__``) goes through this
module's controller. At a pipeline object's first call the configuration's fixes are applied to it
(``fixes.catalog``); at the first call of the process the call is also measured: one untimed warm-up (its
wall time holds torch.compile's compile time), then one timed call per ``run`` command of the parent, each with
the same arguments, torch's seed set (``manual_seed(seed)``) and the call's generators put back to their state
at the program's call, so that every configuration computes from the same noise. The measured calls run with
the process's stdout and stderr sent to ``/dev/null`` (the program's callbacks and progress bars print nothing
extra). On ``quit`` the program's own call runs, with the RNG state the program had at the call, and the program
goes on to its end: its output is what it prints without ``stepscope try``, changed only by the fixes.

Why re-call the pipeline instead of running the program once per repeat: the program runs once per
configuration exactly as written (its start-up, its side effects, its files written once), repeats interleave
across configurations (all processes alive at once) and a torch.compile warm-up is paid once per configuration.

Protocol (``STEPSCOPE_TRY``, JSON: ``fixes``, ``check``, ``compile_mode``, ``seed``, ``out`` (a folder),
``config``, ``cmd_fd``, ``reply_fd``): replies are JSON lines on ``reply_fd``: ``{"check": {fix: null | why}}``
(when asked), ``{"ready": true, "warmup_s", "applied": {fix: what}, "env", "rss_bytes", "cuda_reserved"}`` or
``{"error"}``; per ``run``: ``{"wall_s", "steps_s": [s], "peak_bytes", "output": {"kind", "shape"}}`` (the
first run's output saved as ``<out>/<config>.npy``). ``steps_s``: the intervals between consecutive scheduler
step ends (each one denoiser call and one scheduler step; CUDA events on a GPU, no host sync added).
Peak memory: ``max_memory_allocated`` on CUDA, else the process's RSS high-water mark (``VmHWM``) reset
before the call (``/proc/self/clear_refs``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import sys
import threading
import time
import weakref

from ..record.memory.history import proc_bytes
from ..record.launch import fresh_main, missing_target, run_main, split_argv
from ..record.tracing.importhook import ImportHook

ENV = "STEPSCOPE_TRY"
PIPELINE_UTILS = "diffusers.pipelines.pipeline_utils"
_MARK = "__stepscope_try__"


class _Parent:
    """The two pipes to the parent."""

    def __init__(self, cmd_fd: int, reply_fd: int) -> None:
        self.cmds = os.fdopen(cmd_fd, "r")
        self.fd = reply_fd

    def send(self, doc: dict) -> None:
        data = (json.dumps(doc) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data):]

    def read(self) -> str:
        return self.cmds.readline().strip()


@contextlib.contextmanager
def _quiet():
    """fd 1 and 2 to /dev/null for the measured calls."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        yield
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _reset_rss_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def as_array(out):
    """A pipeline's output as ``(float32 array, kind)``: ``images``/``frames``/``latents`` of the output object
    (or the first item of a tuple); PIL images as 0-1 floats (kind "image"), numpy arrays as they are ("image"),
    torch tensors as float32 on the CPU ("tensor")."""
    import numpy as np

    for attr in ("images", "frames", "latents", "audios"):
        v = getattr(out, attr, None)
        if v is not None:
            out = v
            break
    if isinstance(out, tuple) and out:
        out = out[0]
    kind = "image"
    items = out if isinstance(out, list) else [out]
    arrays = []
    for item in items:
        if hasattr(item, "detach"):
            kind = "tensor"
            arrays.append(item.detach().float().cpu().numpy())
        elif hasattr(item, "getpixel"):  # PIL
            arrays.append(np.asarray(item, dtype=np.float32) / 255.0)
        else:
            arrays.append(np.asarray(item, dtype=np.float32))
    arr = arrays[0] if not isinstance(out, list) else np.stack(arrays)
    return arr.astype(np.float32, copy=False), kind


class Controller:
    """Applies the configuration's fixes to each pipeline object at its first call; measures the first call."""

    def __init__(self, cfg: dict, parent: _Parent | None) -> None:
        self.cfg = cfg
        self.parent = parent
        self.measured = False
        self.backends = weakref.WeakKeyDictionary()  # pipeline -> its SDPA backend (None: torch's choice)
        self.local = threading.local()
        self.said_ready = False

    def call(self, f, pipe, args: tuple, kwargs: dict):
        """The pipeline's ``__call__`` ``f`` on ``pipe``: fixes at the object's first call, the measurement at the
        process's first call, then the program's own call (its result returned as is)."""
        if getattr(self.local, "depth", 0):  # a subclass's __call__ calling super().__call__
            return f(pipe, *args, **kwargs)
        self.local.depth = 1
        try:
            from . import catalog

            if pipe not in self.backends:
                site = self._prepare(f, pipe, args, kwargs)
            else:
                site = None
            if not self.measured and site is not None:
                self.measured = True
                self._measure(f, site, args, kwargs)
            with catalog.call_context(site) if site is not None else self._context(pipe):
                return f(pipe, *args, **kwargs)
        finally:
            self.local.depth = 0

    def _context(self, pipe):
        backend = self.backends.get(pipe)
        if backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel([backend])

    def _prepare(self, f, pipe, args, kwargs):
        from . import catalog

        try:
            bound = inspect.signature(f).bind_partial(pipe, *args, **kwargs).arguments
        except TypeError:
            bound = dict(kwargs)
        call_kwargs = {k: v for k, v in bound.items() if k != "self"}
        site = catalog.Site(pipe, catalog.device_of(pipe), call_kwargs, self.cfg.get("compile_mode") or "default")
        if not self.measured and self.cfg.get("check") and self.parent is not None:
            checks = {}
            for name in self.cfg["check"]:
                try:
                    checks[name] = catalog.check(name, site)
                except Exception as e:
                    checks[name] = f"could not be checked: {type(e).__name__}: {e}"
            self.parent.send({"check": checks})
        applied = {}
        try:
            for name in self.cfg.get("fixes", []):
                applied[name] = catalog.apply(name, site)
        except Exception as e:
            self.backends[pipe] = site.backend
            if not self.measured and self.parent is not None:
                self.measured = True
                self.parent.send({"error": f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
            return None
        self.backends[pipe] = site.backend
        site.applied = applied
        return site

    def _measure(self, f, site, args, kwargs) -> None:
        import torch

        parent = self.parent
        if parent is None:
            return
        state = _RngState(torch, kwargs)
        cuda = site.device == "cuda"
        try:
            wall, _, _, _ = self._once(f, site, args, kwargs, state, cuda)
        except Exception as e:
            parent.send({"error": f"warm-up call: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
            state.restore()
            return
        env = {"torch": torch.__version__, "device": site.device, "threads": torch.get_num_threads(),
               "device_name": torch.cuda.get_device_name() if cuda else "cpu",
               "diffusers": sys.modules["diffusers"].__version__, "python": sys.version.split()[0]}
        parent.send({"ready": True, "warmup_s": wall, "applied": getattr(site, "applied", {}), "env": env,
                     "rss_bytes": proc_bytes("/proc/self/status", "VmRSS"),
                     "cuda_reserved": torch.cuda.memory_reserved() if cuda else None,
                     "cuda_free": torch.cuda.mem_get_info()[0] if cuda else None})
        first = True
        while True:
            cmd = parent.read()
            if cmd != "run":
                break
            try:
                wall, steps, peak, out = self._once(f, site, args, kwargs, state, cuda)
                reply = {"wall_s": wall, "steps_s": steps, "peak_bytes": peak}
                if first:
                    import numpy as np

                    arr, kind = as_array(out)
                    np.save(os.path.join(self.cfg["out"], f"{self.cfg['config']}.npy"), arr)
                    reply["output"] = {"kind": kind, "shape": list(arr.shape)}
                    first = False
                del out
                parent.send(reply)
            except Exception as e:
                parent.send({"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
        state.restore()

    def _once(self, f, site, args, kwargs, state, cuda: bool):
        from . import catalog

        torch = state.torch
        state.seed(int(self.cfg.get("seed", 0)))
        sched = getattr(site.pipe, "scheduler", None)
        stamps: list = []
        own = sched.__dict__.get("step", None) if sched is not None else None
        if sched is not None:
            step = sched.step

            def stamped(*a, **k):
                r = step(*a, **k)
                if cuda:
                    e = torch.cuda.Event(enable_timing=True)
                    e.record()
                    stamps.append(e)
                else:
                    stamps.append(time.perf_counter())
                return r

            sched.step = stamped
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            _reset_rss_peak()
        try:
            with _quiet(), catalog.call_context(site):
                t0 = time.perf_counter()
                out = f(site.pipe, *args, **kwargs)
                if cuda:
                    torch.cuda.synchronize()
                wall = time.perf_counter() - t0
        finally:
            if sched is not None:
                if own is None:
                    del sched.step
                else:
                    sched.step = own
        if cuda:
            steps = [a.elapsed_time(b) / 1e3 for a, b in zip(stamps, stamps[1:])]
            peak = torch.cuda.max_memory_allocated()
        else:
            steps = [b - a for a, b in zip(stamps, stamps[1:])]
            peak = proc_bytes("/proc/self/status", "VmHWM")
        return wall, steps, peak, out


class _RngState:
    """torch's global RNG state and the call's generators at the program's call: measured calls start from
    ``manual_seed(seed)`` and the generators' states as the program passed them; ``restore`` puts back all."""

    def __init__(self, torch, kwargs: dict) -> None:
        self.torch = torch
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        g = kwargs.get("generator")
        self.gens = [x for x in (g if isinstance(g, (list, tuple)) else [g]) if x is not None]
        self.gen_states = [x.get_state() for x in self.gens]

    def seed(self, seed: int) -> None:
        self.torch.manual_seed(seed)
        for g, s in zip(self.gens, self.gen_states):
            g.set_state(s)

    def restore(self) -> None:
        self.torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            self.torch.cuda.set_rng_state_all(self.cuda)
        for g, s in zip(self.gens, self.gen_states):
            g.set_state(s)


def hook_pipelines(base: type, controller: Controller) -> None:
    """Route ``__call__`` of ``base``'s subclasses (now and later) through ``controller``."""

    def wrap(cls: type) -> None:
        f = cls.__dict__.get("__call__")
        if f is None or getattr(f, _MARK, False) or not callable(f):
            return

        @functools.wraps(f)
        def __call__(self, *args, **kwargs):
            return controller.call(f, self, args, kwargs)

        setattr(__call__, _MARK, True)
        type.__setattr__(cls, "__call__", __call__)

    def walk(cls: type) -> None:
        wrap(cls)
        for sub in cls.__subclasses__():
            walk(sub)

    walk(base)
    before = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kw):
        if before is not None:
            before.__func__(cls, **kw)
        else:
            super(base, cls).__init_subclass__(**kw)
        wrap(cls)

    base.__init_subclass__ = classmethod(__init_subclass__)


class _Watch:
    """What ``ImportHook`` asks of a patcher: one module watched, the pipelines hooked once it executed."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.done = False

    def watches(self, name: str) -> bool:
        return name == PIPELINE_UTILS and not self.done

    def on_import(self, name: str) -> None:
        self.done = True
        base = getattr(sys.modules.get(name), "DiffusionPipeline", None)
        if base is not None:
            hook_pipelines(base, self.controller)


def main() -> None:
    cfg = json.loads(os.environ.pop(ENV, "{}") or "{}")
    kind, target, rest = split_argv(sys.argv[1:])
    missing = missing_target(kind, target)
    if missing is not None:
        print(missing[0], file=sys.stderr)
        sys.exit(missing[1])
    parent = None
    if cfg.get("cmd_fd") is not None:
        parent = _Parent(int(cfg["cmd_fd"]), int(cfg["reply_fd"]))
        for fd in (int(cfg["cmd_fd"]), int(cfg["reply_fd"])):
            os.set_inheritable(fd, False)
    controller = Controller(cfg, parent)
    watch = _Watch(controller)
    if PIPELINE_UTILS in sys.modules:
        watch.on_import(PIPELINE_UTILS)
    else:
        sys.meta_path.insert(0, ImportHook(watch))
    main_mod = fresh_main(kind, target)
    run_main(kind, target, rest, main_mod, None)


if __name__ == "__main__":
    main()
