"""The pytest plugin: record tests as stepscope runs, hold them to budgets, compare them with a baseline.

Registered by installing stepscope (the ``pytest11`` entry point ``stepscope``); ``-p stepscope.ci.pytest_plugin``
loads it where the entry point is not installed. It does nothing unless asked: at module level it imports the
standard library and pytest only, and a test is recorded only with ``--stepscope`` (every test) or a
``@pytest.mark.stepscope(...)`` marker (that test); stepscope's recording and analysis are imported then.

- ``--stepscope``: each test's call (the test function, not its fixtures) is recorded as a run in
  ``--stepscope-store`` (default ``$STEPSCOPE_STORE`` or ``./.stepscope``); its command is ``pytest NODEID``.
- ``@pytest.mark.stepscope(trace=[NAMES], hz=N, budget={NAME: "p50 < 40ms"}, memory="peak < 2GiB", span=NAME)``:
  what to trace and the budgets (``ci.budgets``); a missed budget fails the test with one line.
- ``--stepscope-baseline STORE_OR_RUN``: each recorded test is compared with its baseline run (the newest run of
  the same test in that store, or that run) by ``stepscope diff``'s rule (``ci.gate``); a significant slow-down
  (of at least ``--stepscope-fail-pct`` percent) fails the test; repeats too noisy to decide give a
  ``StepscopeNoiseWarning``.

The terminal summary lists each recorded test's slowest steps and spans with their run ids, and the notes (names
not traced, tests without a baseline run, the baseline verdicts). The run is stored whether the test passes or
raises; its budgets and baseline are checked only when the test itself passed.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

MARKER = ("stepscope(trace=[NAMES], hz=N, budget={NAME: 'p50 < 40ms'}, memory='peak < 2GiB', span=NAME): record "
          "this test's call as a stepscope run, trace NAMES, and fail it when a budget is missed")
#: rows of the summary table at most
SUMMARY_ROWS = 30


class StepscopeNoiseWarning(UserWarning):
    """A test's repeats vary too much within a run to decide whether it got slower than its baseline."""


def pytest_addoption(parser) -> None:
    """The options: ``--stepscope``, ``--stepscope-store``, ``--stepscope-baseline``, ``--stepscope-fail-pct``."""
    g = parser.getgroup("stepscope", "stepscope: record tests as profiled runs")
    g.addoption("--stepscope", action="store_true", default=False,
                help="record every test's call as a stepscope run (without it: only tests marked "
                     "@pytest.mark.stepscope)")
    g.addoption("--stepscope-store", metavar="PATH", default=None,
                help="the store folder for the runs (default: $STEPSCOPE_STORE or ./.stepscope)")
    g.addoption("--stepscope-baseline", metavar="STORE_OR_RUN", default=None,
                help="compare each recorded test with the newest run of the same test in this store folder (or with "
                     "this run id in the store); fail it when significantly slower")
    g.addoption("--stepscope-fail-pct", metavar="PCT", type=float, default=None,
                help="with --stepscope-baseline: fail only on a slow-down of at least PCT percent (as diff --fail-if "
                     "slower:PCT)")


class _Plugin:
    """The plugin's state and per-test hooks for one pytest process (registered by ``pytest_configure``)."""

    def __init__(self, config) -> None:
        self.all = bool(config.getoption("stepscope"))
        here = Path(config.invocation_params.dir)
        store = config.getoption("stepscope_store") or os.environ.get("STEPSCOPE_STORE") or ".stepscope"
        self.store = str(here / store)
        self.baseline_ref = config.getoption("stepscope_baseline")
        self.min_pct = config.getoption("stepscope_fail_pct")
        self.specs: dict[str, object] = {}  # nodeid -> testrun.Spec of a marked test
        self.baseline = None  # testrun.Baseline, once needed
        self.reader = None  # a Store to read the runs back, once needed
        self.results: list[tuple[str, dict]] = []  # (nodeid, Outcome.to_dict()) from the reports

    def close(self) -> None:
        for x in (self.baseline, self.reader):
            if x is not None:
                x.close()

    def pytest_collection_modifyitems(self, session, config, items) -> None:
        """Read the markers of the tests collected: a malformed one is a usage error (one line naming the test, the
        key and the text)."""
        for item in items:
            mark = item.get_closest_marker("stepscope")
            if mark is None:
                continue
            from .testrun import spec_of  # (only once a test asks for stepscope)

            try:
                self.specs[item.nodeid] = spec_of(mark.args, mark.kwargs)
            except ValueError as e:
                raise pytest.UsageError(f"@pytest.mark.stepscope on {item.nodeid}: {e}") from None
        if self.baseline_ref and (self.all or self.specs):
            from ..store.db import StoreError
            from .testrun import Baseline

            try:
                self.baseline = Baseline(self.baseline_ref, self.store)
            except StoreError as e:
                raise pytest.UsageError(str(e)) from None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        """Record the test function's call when asked; after it, fail the test with one line per budget missed or
        for a slow-down against its baseline (the run is stored first, whatever the test did)."""
        if not (self.all or item.nodeid in self.specs):
            return (yield)
        from .testrun import Spec, TestRun

        if self.reader is None:
            from ..store.db import Store

            self.reader = Store(self.store)
        run = TestRun(item.nodeid, self.specs.get(item.nodeid) or Spec(), self.store, self.baseline, self.min_pct,
                      self.reader)
        try:
            run.start()
        except RuntimeError as e:  # a session already active (the test's process started one itself)
            pytest.fail(f"stepscope: cannot record {item.nodeid}: {e}", pytrace=False)
        try:
            result = yield
        except pytest.skip.Exception:  # skipped from inside: the run is kept, as of a test that ran
            _finish(item, run, None, check=False)
            raise
        except BaseException as e:  # the test's own failure goes on as it is
            _finish(item, run, e)
            raise
        outcome = _finish(item, run)
        if outcome is None:
            pytest.fail(f"stepscope: {item.nodeid}: the run could not be read back: {run.read_error}", pytrace=False)
        if outcome.warning:
            warnings.warn(StepscopeNoiseWarning(outcome.warning), stacklevel=1)
        if outcome.failures:
            pytest.fail("\n".join(outcome.failures), pytrace=False)
        return result

    def pytest_runtest_logreport(self, report) -> None:
        """Collect the outcomes of recorded tests from their reports (those of pytest-xdist's workers too)."""
        if report.when == "call":
            self.results += [(report.nodeid, v) for k, v in report.user_properties
                             if k == "stepscope" and isinstance(v, dict)]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        """The recorded tests' slowest steps and spans, with their runs; then the notes."""
        if self.results:
            _summary(terminalreporter, self.results)


_NAME = "stepscope-plugin"


def pytest_configure(config) -> None:
    """Register the marker (``--strict-markers`` accepts it) and the plugin's state; nothing of stepscope is imported.
    Raises pytest.UsageError for a negative ``--stepscope-fail-pct``."""
    config.addinivalue_line("markers", MARKER)
    pct = config.getoption("stepscope_fail_pct")
    if pct is not None and not pct >= 0:
        raise pytest.UsageError(f"--stepscope-fail-pct: must be a percentage >= 0, got {pct:g}")
    if not config.pluginmanager.has_plugin(_NAME):
        config.pluginmanager.register(_Plugin(config), _NAME)


def pytest_unconfigure(config) -> None:
    """Close the stores the plugin opened."""
    plugin = config.pluginmanager.get_plugin(_NAME)
    if plugin is not None:
        plugin.close()
        config.pluginmanager.unregister(plugin, _NAME)


def _finish(item, run, error=None, check: bool = True):
    """``run.finish``; its outcome goes with the test's report (``user_properties``: pytest-xdist sends them from its
    workers). None (``run.read_error`` says why) when the run could not be stored or read back."""
    try:
        outcome = run.finish(error, check)
    except Exception as e:  # (a store that fails: said once, without a traceback)
        run.read_error = f"{type(e).__name__}: {e}"
        return None
    item.user_properties.append(("stepscope", outcome.to_dict()))
    return outcome


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.0f} us" if ns >= 1e3 else f"{ns:.0f} ns"


def _short(name: str, parts: int = 3) -> str:
    segs = name.split(".")
    return ".".join(segs[-parts:]) if len(segs) > parts else name


def _summary(tr, results: list[tuple[str, dict]]) -> None:
    tr.write_sep("=", "stepscope")
    rows = []
    for nodeid, res in sorted(results, key=lambda r: -max([x[4] for x in r[1]["rows"]] or [0])):
        for name, calls, p50, p95, _ in res["rows"]:
            rows.append([nodeid, _short(name), str(calls), _fmt_ns(p50), _fmt_ns(p95), res["run"]])
    head = ["test", "span / step", "calls", "p50", "p95", "run"]
    shown = rows[:SUMMARY_ROWS]
    width = [min(max(len(r[i]) for r in [head, *shown]), 60 if i < 2 else 40) for i in range(len(head))]

    def line(r):
        cells = [(c if len(c) <= width[i] else "…" + c[-width[i] + 1:]) for i, c in enumerate(r)]
        return "  ".join(c.rjust(width[i]) if i in (2, 3, 4) else c.ljust(width[i]) for i, c in enumerate(cells))

    tr.write_line(line(head))
    for r in shown:
        tr.write_line(line(r))
    if len(rows) > len(shown):
        tr.write_line(f"... {len(rows) - len(shown)} more rows")
    stores = sorted({res["store"] for _, res in results})
    tr.write_line(f"{len(results)} test(s) recorded in {', '.join(stores)} "
                  "(stepscope report RUN, stepscope diff RUN_A RUN_B)")
    for nodeid, res in results:
        for note in res["notes"]:
            tr.write_line(note)
