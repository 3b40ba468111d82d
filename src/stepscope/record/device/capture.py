"""Record the torch profiler's (Kineto) timeline of a run: ``stepscope run --device-trace``.

torch is imported only when a capture starts. Activities: CPU, and CUDA when available; shapes and
FLOPs recorded; Python stacks on request (``with_stack``: every Python call becomes an event, so traces
grow tenfold; the sync sites' own spans give each sync its Python line without them). The trace is written gzipped as ``<run dir>/device_trace.json.gz``.

Every thread's ops are recorded (``profile_all_threads``). Spans name their thread by Python's thread
ident, which is reused for the next thread once one exits; the run notes each (ident, OS thread id,
since) as the sampler sees it, so a span is joined with the ops of the OS thread it really ran on.

Spans are mirrored into the trace as ``record_function`` ranges (and NVTX ranges on CUDA) while it
records (``tracing.mirror``).

Clock: markers named ``stepscope.clock_sync <label> <perf_counter_ns>`` are recorded with
``record_function`` at the start, every ``MARK_EVERY_S`` from a marker thread, at every denoising step
and at the end, so the trace's times are rebased onto the run's clock when the trace is analysed
(``device.runview.clock_map``), whatever clock Kineto used and however it drifts.

Bounded recording: with ``steps=N`` the profiler skips ``wait`` steps, warms up for one, records N
denoising steps, and stops (``torch.profiler.schedule``), stepping on each scheduler ``step`` (the
``diffusion.step`` marker); a run with no traced scheduler step is recorded whole.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tempfile
from pathlib import Path
from time import perf_counter_ns

from ..tracing import collectives, mirror
from ..steps import hooks as step_hooks
from ..sampling.sampler import start_ticker

MARKER = "stepscope.clock_sync"
MARK_EVERY_S = 0.1


#: Kineto's log level while stepscope starts it: above its highest (torch 2.13 writes "USDT:"/"STAGE:" lines to
#: stderr at every start and stop); Kineto reads ``KINETO_LOG_LEVEL`` once, when it first starts
KINETO_QUIET = "6"


@contextlib.contextmanager
def quiet_kineto():
    """Start Kineto inside this block with its log lines off, unless the program's environment sets
    ``KINETO_LOG_LEVEL`` itself; the environment is as it was after the block (nothing of stepscope's in the
    program's stderr, nothing left in its ``os.environ``)."""
    own = "KINETO_LOG_LEVEL" not in os.environ
    if own:
        os.environ["KINETO_LOG_LEVEL"] = KINETO_QUIET
    try:
        yield
    finally:
        if own:
            os.environ.pop("KINETO_LOG_LEVEL", None)


class DeviceCapture:
    """One torch profiler session. ``start()`` then ``stop()``; ``stop`` writes ``out_path`` (the trace) and
    ``probe_path`` (the matmul peaks: ``_probe``), the run's ``DEVICE_TRACE`` and ``DEVICE_PROBE``
    (``Store.run_file``)."""

    def __init__(self, out_path: str | os.PathLike, probe_path: str | os.PathLike, with_stack: bool = False,
                 steps: int | None = None, wait: int = 0) -> None:
        self.out_path = Path(out_path)
        self.probe_path = Path(probe_path)
        self.with_stack = with_stack
        self.steps = steps
        self.wait = wait
        self.prof = None
        self.written = False
        self.error: str | None = None
        self._warm = False

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self._torch = torch
        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        sched = schedule(wait=self.wait, warmup=1, active=self.steps, repeat=1) if self.steps else None
        extra = {}
        try:  # every thread's ops, not only the thread that starts the profiler (a server's request threads)
            from torch._C._profiler import _ExperimentalConfig

            extra["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
        except (ImportError, TypeError):
            pass
        self.prof = profile(activities=acts, record_shapes=True, with_stack=self.with_stack, with_flops=True,
                            schedule=sched, on_trace_ready=self._write if sched else None, **extra)
        with quiet_kineto():
            self.prof.__enter__()
        collectives.hold_destroyed_groups()  # gloo works now hold Python objects: see tracing/collectives.py
        mirror.enable()
        self.mark("start")
        step_hooks.add_listener(self._on_step)
        self._stop, self._marker = start_ticker("stepscope-clock-marker", MARK_EVERY_S, lambda: self.mark("tick"))

    def mark(self, label: str) -> None:
        """A clock marker: a zero-work record_function range named with the current clock reading.

        The first record_function of a process is slow (ms), so a warm-up range precedes the marker."""
        rf = self._torch.profiler.record_function
        if not self._warm:
            with rf("stepscope.warmup"):
                pass
            self._warm = True
        with rf(f"{MARKER} {label} {perf_counter_ns()}"):
            pass

    def _on_step(self) -> None:
        self.mark("step")
        if self.steps:
            with quiet_kineto():  # (with a schedule, Kineto starts at its warm-up step)
                self.prof.step()

    def stop(self) -> None:
        """Stop recording and write the trace (once)."""
        if self.prof is None:
            return
        step_hooks.remove_listener(self._on_step)
        mirror.disable()
        self._stop.set()
        self._marker.join(timeout=1)
        self.mark("stop")
        self.prof.__exit__(None, None, None)
        if not self.steps:
            self._write(self.prof)
        self.prof = None
        self._probe()

    def _probe(self) -> None:
        """Measure this device's matmul peak (FLOP/s) into ``probe_path`` (``device_probe.json``): ``peak_flops``
        (float32) and ``peaks`` per dtype (``peaks.probe_peaks``: float16 and bfloat16 too on a GPU)."""
        import json

        from .peaks import probe_peaks

        torch = self._torch
        dev = "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"
        name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
        peaks = probe_peaks(dev)
        info = {"device": dev, "name": name, "dtype": "float32", "peak_flops": peaks["float32"], "peaks": peaks,
                "threads": torch.get_num_threads()}
        self.probe_path.parent.mkdir(parents=True, exist_ok=True)
        self.probe_path.write_text(json.dumps(info))

    def _write(self, prof) -> None:
        if self.written:
            return
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=self.out_path.parent)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            with open(tmp, "rb") as src, gzip.open(self.out_path, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
            self.written = True
        finally:
            os.unlink(tmp)
