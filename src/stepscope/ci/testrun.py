"""One test's call recorded as a stepscope run, and what the pytest plugin (``ci.pytest_plugin``) checks on it.

``spec_of`` reads the ``@pytest.mark.stepscope(...)`` marker (``trace``, ``hz``, ``budget``, ``memory``, ``span``);
``Baseline`` finds the run a test is compared with; ``TestRun`` starts a session (``record.api.start``) just before
the test function and finishes it just after (the run is stored whether the test passed or raised), then reads the
run back (``store.reader.load_run``) and returns an ``Outcome``: the summary's rows, the budgets missed
(``ci.budgets``), and the comparison with the baseline run (``analysis.diff.diff_runs`` judged by ``ci.gate``).

The run's command is ``["pytest", NODEID]`` and its root transaction is named NODEID, so that ``stepscope runs`` tells
the tests apart and a baseline store is searched by test. The main thread's CPU wait (``diff``'s contention) and the
memory lane are read from the test's start (its entry and exit are sampled, so that every run has a memory figure).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import clock
from ..store.db import Store, StoreError
from .budgets import Budget, BudgetError, check, parse_budgets, top_rows
from .gate import Judgement, judge

#: the marker's keyword arguments
MARKER_KEYS = ("trace", "hz", "budget", "memory", "span")


@dataclass(slots=True)
class Spec:
    """What to record of a test and check on it: ``trace`` (qualified names, as ``stepscope run --trace``), ``hz``
    (samples/s per thread), ``budgets``, ``span`` (the unit compared with the baseline, as ``diff --span``; None: diff's
    default)."""

    trace: tuple[str, ...] = ()
    hz: float | None = None
    budgets: list[Budget] = field(default_factory=list)
    span: str | None = None


def spec_of(args: tuple = (), kwargs: dict[str, Any] | None = None) -> Spec:
    """The ``Spec`` of a marker's arguments. Raises ValueError (``BudgetError`` for a budget) with one line naming the
    key and the text, e.g. ``budget['unet']: cannot read 'p50 < 40' (...)``."""
    kwargs = dict(kwargs or {})
    if args:
        raise ValueError(f"takes keyword arguments only ({', '.join(MARKER_KEYS)}), got {args!r}")
    unknown = sorted(set(kwargs) - set(MARKER_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (keys: {', '.join(MARKER_KEYS)})")
    trace = kwargs.get("trace") or ()
    if isinstance(trace, str):
        trace = (trace,)
    from ..record.tracing.resolve import normalize_targets

    try:
        names = tuple(normalize_targets(list(trace)))
    except (ValueError, TypeError) as e:
        raise ValueError(f"trace: {e}") from None
    hz = kwargs.get("hz")
    if hz is not None:
        from ..record.settings import check_field

        hz = check_field("profiles_hz", hz, "hz")
    span = kwargs.get("span")
    if span is not None and (not isinstance(span, str) or not span.strip()):
        raise ValueError(f"span: must be a span name, got {span!r}")
    return Spec(names, hz, parse_budgets(kwargs.get("budget"), kwargs.get("memory")), span)


class Baseline:
    """Where a test's baseline run is: ``ref`` is a store folder (the newest run of the same test there that passed,
    ``Store.latest_run_of``) or a run id or prefix in the store ``store`` (that run, for every test). Raises
    StoreError (one line) when ``ref`` is neither."""

    def __init__(self, ref: str, store: str | os.PathLike) -> None:
        self.ref = ref
        path = Path(ref)
        if (path / "runs.db").exists():
            self.store, self.run = Store(path, create=False), None
        else:
            try:
                self.store = Store(store, create=False)
                self.run = self.store.resolve_id(ref)
            except StoreError as e:
                raise StoreError(f"--stepscope-baseline {ref}: no store folder of that name, and {e}") from None

    def run_for(self, nodeid: str) -> str | None:
        """The baseline run of test ``nodeid``, or None."""
        return self.run if self.run is not None else self.store.latest_run_of(["pytest", nodeid])

    def close(self) -> None:
        self.store.close()


@dataclass(slots=True)
class Outcome:
    """What the plugin reports of a recorded test: ``run`` (its id), ``store`` (its folder), ``rows`` (the summary's
    ``budgets.Row`` values as lists: name, calls, p50 ns, p95 ns, total ns), ``failures`` (lines that fail the test:
    budgets missed, a slow-down), ``warning`` (too noisy to decide), ``notes`` (names not traced, no baseline,
    the baseline's verdict)."""

    run: str
    store: str
    rows: list[list] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warning: str | None = None
    notes: list[str] = field(default_factory=list)
    judgement: Judgement | None = None

    def to_dict(self) -> dict:
        """Plain data (for pytest's ``user_properties``, which pytest-xdist sends from its workers)."""
        return {"run": self.run, "store": self.store, "rows": self.rows, "failures": self.failures,
                "warning": self.warning, "notes": self.notes,
                "outcome": self.judgement.outcome if self.judgement else None}


class TestRun:
    """One test's call recorded: ``start()`` before the test function, ``finish(error)`` after it. ``store``: the
    store folder; ``baseline``: a ``Baseline`` or None; ``min_pct``: the slow-down threshold (percent, None: any
    significant slow-down); ``reader``: a ``Store`` to read the run back (opened here when None)."""

    __test__ = False  # (not a test class for pytest)

    def __init__(self, nodeid: str, spec: Spec, store: str, baseline: Baseline | None = None,
                 min_pct: float | None = None, reader: Store | None = None) -> None:
        self.nodeid, self.spec, self.store = nodeid, spec, str(store)
        self.baseline, self.min_pct, self.reader = baseline, min_pct, reader
        self.session = None
        self.base_run: str | None = None
        self.read_error: str | None = None  # (set by the plugin when ``finish`` failed)

    def start(self) -> None:
        """Start recording. Raises RuntimeError when a session is already active in this process, StoreError for a
        store that cannot be opened."""
        from ..record import api
        from ..record.settings import DEFAULT_HZ, Settings

        if self.baseline is not None:  # (before this test's run exists: a baseline store may be this store)
            self.base_run = self.baseline.run_for(self.nodeid)
        settings = Settings(functions_to_trace=self.spec.trace,
                            profiles_hz=self.spec.hz if self.spec.hz is not None else DEFAULT_HZ,
                            transaction=self.nodeid, store=self.store)
        self.session = api.start(settings, command=["pytest", self.nodeid])
        self._sample_memory()

    def _sample_memory(self) -> None:
        s = self.session
        if s is not None and not s.finished and s.memory is not None:
            s.memory.sample(clock.now_ns())

    def finish(self, error: BaseException | None = None, check: bool = True) -> Outcome:
        """Stop recording (``error``: what the test raised, stored as the run's outcome), store the run and check
        it: budgets and baseline only when the test itself passed and ``check`` (False: a skipped test). Raises
        StoreError for a run that cannot be read back."""
        import atexit

        from ..record import api

        s = self.session
        self._sample_memory()
        if error is not None and not s.finished:
            kind = "interrupted" if isinstance(error, KeyboardInterrupt) else "error"
            msg = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
            s.set_outcome(kind, 1, f"test failed: {msg}"[:500])
        if api.current_session() is s:
            api.shutdown()
        else:
            s.finish()
        atexit.unregister(api._report_unresolved)  # (names not traced go to the summary, not to stderr at exit)
        return self._outcome(s.run_id, error is None and check)

    def _outcome(self, run_id: str, passed: bool) -> Outcome:
        from ..store.reader import load_run

        reader = self.reader if self.reader is not None else Store(self.store, create=False)
        try:
            data = load_run(reader, run_id)
            out = Outcome(run_id, self.store, [[r.name, r.calls, r.p50_ns, r.p95_ns, r.total_ns]
                                               for r in top_rows(data)])
            out.notes += [f"{self.nodeid}: could not trace {n}: {why}" for n, why in sorted(data.run.unresolved.items())]
            if passed:
                out.failures += check(self.spec.budgets, data)
                if self.baseline is not None:
                    self._compare(data, reader, out)
            return out
        finally:
            if reader is not self.reader:
                reader.close()

    def _compare(self, data, reader: Store, out: Outcome) -> None:
        from ..analysis.diff import DiffError, diff_runs
        from ..analysis.runpick import device_trace_path
        from ..store.reader import load_run

        if self.base_run is None:
            out.notes.append(f"{self.nodeid}: no baseline run in {self.baseline.ref}")
            return
        bst = self.baseline.store
        try:
            base = load_run(bst, self.base_run)
            d = diff_runs(base, data, self.spec.span, device_trace_path(bst, self.base_run),
                          device_trace_path(reader, data.run.id))
        except (DiffError, StoreError) as e:
            out.notes.append(f"{self.nodeid}: not compared with baseline run {self.base_run}: {e}")
            return
        j = judge(d.verdict, d.headline, self.base_run, data.run.id, self.min_pct)
        out.judgement = j
        if j.outcome == "slower":
            out.failures.append(j.line)
        elif j.outcome == "noisy":
            out.warning = j.line
        else:
            out.notes.append(f"{self.nodeid}: {j.line.removeprefix('stepscope: ')}")


__all__ = ["BudgetError", "Baseline", "Outcome", "Spec", "TestRun", "spec_of"]
