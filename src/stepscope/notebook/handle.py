"""``stepscope.profile``: record a block of code in this process and get the run back as a Python object.

::

    with stepscope.profile(trace=["diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"]) as run:
        pipe(prompt, num_inference_steps=20)
    run                      # in a notebook: the first screen and the interactive report, inline
    run.explain()            # slow steps and their cause (``stepscope explain``)
    run.diff(earlier)        # this run against an earlier one (``stepscope diff EARLIER THIS``)
    run.report("r.html")     # the self-contained HTML report (``stepscope report``)
    run.spans, run.steps     # columns (a pandas DataFrame when pandas is installed, else a dict of numpy arrays)

The block is recorded as ``stepscope run`` records a program (``record.api.start`` with one ``Settings``: traced
names, sampling, the memory lane, the device trace, an app's preset) and stored as a run of its own (``stepscope
runs`` lists it). An exception leaving the block ends the run with status "error" and the exception's type and message,
and propagates unchanged. The analysis side (numpy, rich) is loaded when the run is looked at, not before.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable

#: ``ProfiledRun.command[0]`` of a notebook cell's run (``analysis.runpick.program_key`` keys those runs by label).
CELL_COMMAND = "%%stepscope"


class StillRecording(RuntimeError):
    """The run is looked at before its block ended."""


class profile:
    """Record the ``with`` block as a stepscope run: ``with stepscope.profile(trace=[...]) as run: ...``.

    ``trace``: qualified names to trace as spans (``pkg.mod.Class.method``, globs allowed: as ``stepscope run
    --trace``); ``hz``: samples per second per thread (0: none; 1 to 10000); ``device_trace``: record the device
    timeline (torch.profiler / Kineto, or PyTorch/XLA's profiler); ``app``: an app's preset (``--app``: comfyui,
    a1111, invokeai...); ``steps``: functions whose calls are denoising steps (``--step``); ``store``: the store
    folder (default ``$STEPSCOPE_STORE`` or ``./.stepscope``); ``label``: what the run is called in ``stepscope
    runs`` (default: this program's command line); ``settings``: any other ``record.settings.Settings`` field
    (``memory=False``, ``cuda_peaks="reset"``...).

    Raises ValueError (one line naming the setting and its range) for a bad setting, RuntimeError when stepscope is
    already recording in this process (a ``profile`` inside another, or after ``stepscope.init()``), StoreError for a
    store that cannot be opened. Not re-entrant; one use per object.
    """

    def __init__(self, trace: Iterable[str] | str | None = None, *, hz: float | None = None, device_trace: bool = False,
                 app: str | None = None, steps: Iterable[str] | None = None, store: str | Path | None = None,
                 label: str | list[str] | None = None, **settings: Any) -> None:
        from dataclasses import fields

        from ..record.settings import DEFAULT_HZ, Settings, check_field
        from ..record.tracing.resolve import normalize_targets

        names = [trace] if isinstance(trace, str) else list(trace or ())
        known = {f.name for f in fields(Settings)}
        for key in settings:
            if key not in known:
                raise ValueError(f"stepscope.profile: no setting {key!r} (settings: {', '.join(sorted(known))})")
        rate = check_field("profiles_hz", DEFAULT_HZ if hz is None else hz, "hz")  # (ValueError: one line, its range)
        app = check_field("app", app, "app") if app is not None else None
        self.settings = Settings(functions_to_trace=tuple(normalize_targets(names)), profiles_hz=rate,
                                 device_trace=bool(device_trace), app=app,
                                 step_functions=tuple(normalize_targets(list(steps or ()))),
                                 store=None if store is None else str(store), **settings)
        self.command = ([label] if isinstance(label, str) else list(label)) if label is not None else None
        self.run: ProfiledRun | None = None
        self._session = None

    def __enter__(self) -> "ProfiledRun":
        from ..record import api

        if self._session is not None:
            raise RuntimeError("stepscope.profile: this profile object was already used; make a new one")
        self._session = api.start(self.settings, command=self.command)
        self.run = ProfiledRun(self._session.run_id, str(self._session.store.path))
        self.run._session = self._session
        return self.run

    def __exit__(self, et, ev, tb) -> None:
        from ..record import api

        s = self._session
        if et is not None:
            name = et.__qualname__ if et.__module__ == "builtins" else f"{et.__module__}.{et.__qualname__}"
            text = str(ev)
            s.set_outcome("error", error=f"{name}: {text}" if text else name)
        else:
            s.set_outcome("ok", 0)
        if api.current_session() is s:
            api.shutdown()
        else:  # (the block called stepscope.shutdown() itself, or started another session: ours still finishes)
            s.finish()
        if in_ipython():  # the run's display names what could not be traced: nothing more at the kernel's exit
            import atexit

            atexit.unregister(api._report_unresolved)
        self.run._session = None
        self.run.store_error = s.store_error
        return None  # the exception, if any, propagates unchanged


class ProfiledRun:
    """A recorded run, looked at from Python. ``run_id``; ``store``: the store folder's path.

    Displays itself in Jupyter (``_repr_html_``: the first screen and the interactive report inline, self-contained)
    and in a terminal IPython (``_repr_pretty_``: the first screen as text). The run is read from the store on first
    use and kept (``data``: ``core.model.RunData``). Every method raises ``StillRecording`` inside the block.
    """

    def __init__(self, run_id: str, store: str) -> None:
        self.run_id, self.store = run_id, store
        self.store_error: str | None = None
        self._session = None
        self._data = None
        self._summary = None
        self.show_report = True  # whether the HTML display embeds the interactive report

    # -- reading ---------------------------------------------------------------------------------------------
    def _store(self):
        from ..store.db import Store

        return Store(self.store)

    @property
    def data(self):
        """The run (``core.model.RunData``: spans and samples as numpy columns). Raises StillRecording, StoreError."""
        if self._session is not None:
            raise StillRecording(f"run {self.run_id} is still recording: look at it after its block ends")
        if self._data is None:
            from ..store.reader import load_run

            self._data = load_run(self._store(), self.run_id)
        return self._data

    @property
    def status(self) -> str:
        """How the block ended: "ok", "error" (it raised) or "incomplete" (the store failed during the run)."""
        return self.data.run.status

    @property
    def error(self) -> str | None:
        """The exception that ended the block (``"ValueError: message"``), or None."""
        return self.data.run.error

    def summary(self):
        """The first screen's data (``analysis.summary.Summary``: phases, steps, spans, top functions)."""
        if self._summary is None:
            from ..analysis.calltree import ProfileIndex
            from ..analysis.summary import summarize

            self._summary = summarize(self.data, ProfileIndex(self.data.profile))
        return self._summary

    # -- the commands, as methods ----------------------------------------------------------------------------
    def explain(self, span: str | None = None, slow: str | None = None, fast: str = "all") -> "Shown":
        """The slow repeats of ``span`` (default: the denoising steps, else the traced name that repeats most) and
        the functions that make them slow, as ``stepscope explain`` says it. Returns a displayable ``Shown`` whose
        ``value`` is the ``analysis.explain.Explanation``. Raises ValueError (``ExplainError``) when there is
        nothing to compare (no such span, fewer than 3 repeats)."""
        from ..analysis.explain import explain
        from ..output.terminal.explain import print_explanation

        e = explain(self.data, span, slow, fast)
        return Shown(e, lambda console: print_explanation(e, console), title=f"stepscope explain {self.run_id}")

    def diff(self, other: "ProfiledRun | str", span: str | None = None) -> "Shown":
        """This run (B, after) against ``other`` (A, before: a ``ProfiledRun`` or a run id in this run's store), as
        ``stepscope diff A B`` says it: the environment changes, the change in time per span and step with its
        bootstrap CI, where the time went, and the verdict. Returns a displayable ``Shown`` whose ``value`` is the
        ``analysis.diff.Diff`` (``value.verdict``: the one line). Raises ValueError (``DiffError``) when the runs
        have nothing to compare, StoreError for an unknown run id."""
        return diff_view(self._store(), other.run_id if isinstance(other, ProfiledRun) else str(other), self.run_id,
                         span)

    def report(self, path: str | Path | None = None) -> Path:
        """Write the self-contained HTML report (``stepscope report``) to ``path`` (default ``stepscope-RUN.html``);
        returns the path. Raises OSError when it cannot be written."""
        from ..device.view import device_view
        from ..output.html.html import write_report

        return write_report(self.data, Path(path or f"stepscope-{self.run_id}.html"),
                            device=device_view(self._store(), self.run_id, self.data))

    @property
    def spans(self):
        """The spans as columns, one row per span in start order: ``id``, ``parent`` (-1: none), ``name``, ``op``,
        ``thread``, ``start_ns`` (from the run's start), ``duration_ns``, ``error`` (exception type or ""),
        ``step`` (the denoising step's index, -1 for other spans). A pandas DataFrame when pandas is installed, else
        a dict of numpy arrays (``Columns``)."""
        from .columns import span_columns

        return span_columns(self.data)

    @property
    def steps(self):
        """The denoising steps (or, without steps, the repeats of the traced name that repeats most) as columns:
        ``call``, ``step``, ``wall_ns``, ``untraced_ns``, ``slow``, ``warmup``, and one ``ns`` column per traced
        name inside the steps. Empty (no rows) when nothing repeats. DataFrame or dict of numpy arrays, as
        ``spans``."""
        from .columns import step_columns

        return step_columns(self.data)

    # -- display ---------------------------------------------------------------------------------------------
    def _print(self, console) -> None:
        from ..output.terminal.summary import print_summary

        print_summary(self.summary(), console)

    def __repr__(self) -> str:
        state = "recording" if self._session is not None else "recorded"
        return f"<stepscope run {self.run_id} ({state}) in {self.store}>"

    def _repr_pretty_(self, p, cycle: bool) -> None:
        if cycle or self._session is not None:
            p.text(repr(self))
            return
        from ..output.html.inline import console_text

        p.text(console_text(self._print).rstrip("\n"))

    def _repr_html_(self) -> str | None:
        if self._session is not None:
            return None
        from ..output.html.inline import run_html

        return run_html(self, report=self.show_report)


class Shown:
    """A result that displays itself as ``stepscope``'s terminal output would show it: as HTML in Jupyter, text in a
    terminal IPython, and ``str()``. ``value``: the analysis result (``Explanation``, ``Diff``...); ``page``: an
    optional self-contained HTML page shown inline below it (the comparison page of a diff)."""

    def __init__(self, value: Any, draw, title: str = "", page: str | None = None) -> None:
        self.value, self._draw, self.title, self.page = value, draw, title, page

    def __getattr__(self, name: str):  # ``diff(...).verdict``: the result's own fields
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.value, name)

    def __str__(self) -> str:
        from ..output.html.inline import DIFF_WIDTH, WIDTH, console_text

        return console_text(self._draw, DIFF_WIDTH if self.page else WIDTH)

    def __repr__(self) -> str:
        return f"<{self.title}>" if self.title else object.__repr__(self)

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(str(self).rstrip("\n"))

    def _repr_html_(self) -> str:
        from ..output.html.inline import shown_html

        return shown_html(self)


def diff_view(store, ref_a: str | None, ref_b: str | None, span: str | None = None) -> Shown:
    """``stepscope diff``'s result for the runs ``ref_a`` (before) and ``ref_b`` (after) of ``store`` (a
    ``store.db.Store``), displayable, with the comparison page inline. Raises ValueError (``DiffError``: nothing to
    compare), StoreError (an unknown run)."""
    from ..analysis.runpick import diff_stored
    from ..output.html.compare import compare_page
    from ..output.terminal.diff import print_diff

    d = diff_stored(store, ref_a, ref_b, span)
    a_id, b_id = d.run_a, d.run_b
    return Shown(d, lambda console: print_diff(d, console), title=f"stepscope diff {a_id} {b_id}",
                 page=compare_page(d, standalone=True))


def in_ipython() -> bool:
    """Whether this process runs an IPython shell (a Jupyter kernel or a terminal IPython)."""
    ip = sys.modules.get("IPython")
    return ip is not None and getattr(ip, "get_ipython", lambda: None)() is not None
