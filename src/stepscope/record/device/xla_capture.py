"""Record the XLA profiler's timeline of a PyTorch/XLA run: ``stepscope run --device-trace`` (and
``stepscope capture --device-trace``) when the program uses torch_xla.

torch_xla is never imported here at import time; ``start()`` runs once the program has imported it. The
capture is the one ``torch_xla.debug.profiler.start_trace(dir)`` / ``stop_trace()`` makes, through the
same ``TslProfilerSessionWrapper`` (not through ``xp``'s module state, so a program that calls
``xp.start_trace`` itself is not refused by stepscope's session), exported to
``<run dir>/xla_trace/plugins/profile/<time>/<host>.trace.json.gz`` (trace-viewer JSON) and
``<host>.xplane.pb``.

Spans are mirrored as ``xp.Trace`` ranges (``tracing.mirror``: a ``TraceMe`` and an IR scope), never
around a step marker (the mirror's guard; the spans that enclose one are noted, not mirrored).

Clock: ``TraceMe`` ranges named ``stepscope.clock_sync <label>@<OS thread id> <perf_counter_ns>`` are
recorded at the start, every ``MARK_EVERY_S`` from a marker thread, at every denoising step, after every
step marker and at the end. The trace's times (microseconds from the session's start) are rebased onto
the run's clock from them (``device.xla.load_run``), and the OS thread id ties a trace thread to the
run's threads.

Metrics: ``torch_xla.debug.metrics`` counters (all of them: ``UncachedCompile``, ``CachedCompile``,
``MarkStep``, ``aten::_local_scalar_dense`` (each ``.item()``), ``aten::nonzero``, ``xla::*``...) and the
samples/accumulators of ``CompileTime``, ``ExecuteTime``, ``TransferFromDeviceTime``,
``TransferToDeviceTime``, ``InboundData``, ``OutboundData`` are read at the start, when each denoising
step's first denoiser call starts (label ``begin <step>``), after each scheduler step, after every step
marker and at the end, and written with the clock reading to
``<run dir>/xla_metrics.json``: ``{"snapshots": [{"t_ns", "label", "counters": {name: int},
"metrics": {name: [samples, accumulator]}}], "unmirrored": {span name: why}, "error": str|null}``;
accumulators are ns for the *Time metrics and bytes for the *Data ones (torch_xla's units).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from time import perf_counter_ns

from ..tracing import mirror
from ..steps import hooks as step_hooks
from .capture import MARKER
from ..sampling.sampler import start_ticker

MARK_EVERY_S = 0.1
METRICS = ("CompileTime", "ExecuteTime", "TransferFromDeviceTime", "TransferToDeviceTime", "InboundData",
           "OutboundData")


class XlaCapture:
    """One XLA profiler session for a run. ``start()`` then ``stop()``; ``stop`` writes the trace under
    ``trace_dir`` and the metrics readings to ``metrics_path`` (the run's ``XLA_TRACE_DIR`` and ``XLA_METRICS``:
    ``Store.run_file``). ``note(name, why)`` (optional) is told, at ``stop``, of each span left unmirrored."""

    def __init__(self, trace_dir: str | os.PathLike, metrics_path: str | os.PathLike, note=None) -> None:
        self.trace_dir = Path(trace_dir)
        self.metrics_path = Path(metrics_path)
        self.note = note
        self.session = None
        self.error: str | None = None
        self.snapshots: list[dict] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the profiler session, mirroring, markers and metrics snapshots. Raises RuntimeError (one
        line) when torch_xla cannot record."""
        import torch_xla
        import torch_xla.debug.metrics as met

        self._met = met
        self._tm = torch_xla._XLAC.profiler.TraceMe
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.session = torch_xla._XLAC.profiler.TslProfilerSessionWrapper()
        except Exception as e:
            raise RuntimeError(f"the XLA profiler could not start ({e})") from None
        mirror.reset_unmirrored()
        mirror.enable_xla(on_program_session=self._yield)
        self.mark("start")
        self.snapshot("start")
        step_hooks.add_listener(self._on_step)
        step_hooks.add_start_listener(self._on_step_start)
        mirror.add_marker_listener(self._on_marker)
        self._stop, self._marker = start_ticker("stepscope-xla-clock-marker", MARK_EVERY_S, lambda: self.mark("tick"))

    def mark(self, label: str) -> None:
        """A clock marker: a zero-work TraceMe named with the thread and the current clock reading."""
        tm = self._tm(f"{MARKER} {label}@{threading.get_native_id()} {perf_counter_ns()}")
        tm.__enter__()
        tm.__exit__(None, None, None)

    def snapshot(self, label: str) -> None:
        """Read torch_xla's counters and metrics now (appended to ``snapshots``)."""
        met = self._met
        t = perf_counter_ns()
        counters = {}
        for name in met.counter_names():
            v = met.counter_value(name)
            if v is not None:
                counters[name] = int(v)
        metrics = {}
        for name in METRICS:
            d = met.metric_data(name)
            if d is not None:
                metrics[name] = [int(d[0]), float(d[1])]
        with self._lock:
            if self.snapshots is not None:
                self.snapshots.append({"t_ns": t, "label": label, "counters": counters, "metrics": metrics})

    def _on_step(self) -> None:
        self.mark("step")
        self.snapshot("step")

    def _on_step_start(self, step: int) -> None:
        self.snapshot(f"begin {step}")

    def _on_marker(self) -> None:
        self.mark("sync")
        self.snapshot("sync")

    def _yield(self) -> None:
        """The program opens its own profiler session: end stepscope's now (its trace ends here; the
        metrics readings go on), so that the program's records as without stepscope."""
        with self._lock:
            sess, self.session = self.session, None
        if sess is None:
            return
        self._stop.set()
        mirror.pause_xla()
        try:
            self.mark("yield")
        except Exception:
            pass
        try:
            sess.export(sess.stop(), str(self.trace_dir))
        except Exception as e:
            self.error = f"the XLA profiler could not write its trace ({e})"
        import sys

        f = sys._getframe(1)
        while f is not None and (os.sep + "torch_xla" + os.sep in f.f_code.co_filename
                                 or os.sep + "stepscope" + os.sep in f.f_code.co_filename):
            f = f.f_back
        where = f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else "?"
        self.error = self.error or (f"the program started its own XLA profiler session (at {where}): stepscope's "
                                    "trace ends there")

    def stop(self) -> None:
        """Stop recording; write the trace and the metrics (once). Never raises into the program."""
        if self.snapshots is None:
            return
        step_hooks.remove_listener(self._on_step)
        step_hooks.remove_start_listener(self._on_step_start)
        mirror.remove_marker_listener(self._on_marker)
        self._stop.set()
        self._marker.join(timeout=1)
        try:
            self.mark("stop")
            self.snapshot("stop")
        except Exception:
            pass
        with self._lock:
            sess, self.session = self.session, None
        if sess is not None:
            try:
                sess.export(sess.stop(), str(self.trace_dir))
            except Exception as e:
                self.error = f"the XLA profiler could not write its trace ({e})"
        unmirrored = mirror.unmirrored()
        mirror.disable_xla()
        doc = {"snapshots": self.snapshots, "unmirrored": unmirrored, "error": self.error}
        self.snapshots = None
        self.metrics_path.write_text(json.dumps(doc))
        if self.note is not None:
            for name, why in unmirrored.items():
                try:
                    self.note(name, why)
                except Exception:
                    pass
