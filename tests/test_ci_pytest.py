"""The pytest plugin (``stepscope.ci.pytest_plugin``) in real inner pytest sessions (pytester, each in its own
process: a stepscope session is process-wide): it does nothing unless asked; `--stepscope` and the marker record
tests as runs; a missed budget fails the test with one line; a malformed one is a usage error; a planted slow-down
against a baseline store fails, the same code twice does not, noise gives a warning.

The work is `time.sleep` (steady on a busy machine) with sampling off in the timed tests (`hz=0`: no timer signal
wakes the sleeping thread; the waits after such wake-ups would read as CPU contention), 25 calls a run (a CI over
the repeats), and a 30% slow-down: far outside the noise."""

import os
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from stepscope.store import Store

pytest_plugins = ["pytester"]

SRC = Path(__file__).resolve().parent.parent / "src"
#: where the entry point is not installed (an editable install older than it), the plugin is named with -p; never
#: both (pytest refuses one module registered under two names)
PLUGIN = [] if any(ep.value == "stepscope.ci.pytest_plugin" for ep in entry_points(group="pytest11")) else \
    ["-p", "stepscope.ci.pytest_plugin"]

WORK = """
import os, time

def step(ms=20.0):
    time.sleep(ms / 1000 * float(os.environ.get("SLOW", "1")))
"""

RUN_ID = r"(\d{8}-\d{6}-[0-9a-f]+)"


@pytest.fixture
def inner(pytester, monkeypatch):
    """Run an inner pytest in its own process with this checkout's stepscope: ``inner(*args, SLOW="1.3")``."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("STEPSCOPE_STORE", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.setenv("COLUMNS", "250")
    pytester.makepyfile(work=WORK)

    def run(*args, **env):
        monkeypatch.delenv("SLOW", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *args, timeout=300)

    return run


def lines_of(result) -> list[str]:
    return result.stdout.lines + result.stderr.lines


def test_nothing_happens_unless_asked(pytester, inner):
    pytester.makepyfile(test_quiet="""
        import sys

        def test_idle():
            assert "stepscope.ci.pytest_plugin" in sys.modules  # loaded, and idle:
            loaded = [m for m in sys.modules if m.startswith(("stepscope.record", "stepscope.ci.", "stepscope.store",
                                                               "stepscope.analysis", "torch"))]
            assert loaded == ["stepscope.ci.pytest_plugin"], loaded
        """)
    r = inner("--strict-markers")
    r.assert_outcomes(passed=1)
    assert not (pytester.path / ".stepscope").exists()
    assert not any("stepscope" in x for x in r.stdout.lines if x.startswith("="))  # no summary
    r = inner("--markers")
    assert any(x.startswith("@pytest.mark.stepscope(trace=[NAMES], hz=N, budget=") for x in r.stdout.lines)


def test_stepscope_records_every_test_and_keeps_the_run_of_one_that_raises(pytester, inner):
    pytester.makepyfile(test_all="""
        import work

        def test_ok():
            work.step(1)

        def test_raises():
            work.step(1)
            raise AssertionError("planted")
        """)
    r = inner("--stepscope")
    r.assert_outcomes(passed=1, failed=1)
    assert any("AssertionError: planted" in x for x in r.stdout.lines)  # the test's own failure, untouched
    st = Store(pytester.path / ".stepscope", create=False)
    runs = {tuple(x.command): x for x in st.list_runs()}
    assert set(runs) == {("pytest", "test_all.py::test_ok"), ("pytest", "test_all.py::test_raises")}
    assert runs["pytest", "test_all.py::test_ok"].status == "ok"
    bad = runs["pytest", "test_all.py::test_raises"]
    assert bad.status == "error" and bad.error == "test failed: AssertionError: planted"
    rows = [x for x in r.stdout.lines if x.startswith("test_all.py::")]
    assert {x.split()[0] for x in rows} == {"test_all.py::test_ok", "test_all.py::test_raises"}
    assert all(re.search(r"\s+test\s+1\s+\d+\.\d ms\s+\d+\.\d ms\s+" + RUN_ID + "$", x) for x in rows), rows
    assert any(x.startswith("2 test(s) recorded in ") and x.split()[4].endswith(".stepscope") for x in r.stdout.lines)


BUDGETS = """
    import pytest, work

    @pytest.mark.stepscope(trace=["work.step"], hz=0, budget={{"work.step": "{unit}", "test": "max < 120s"}})
    def test_budget():
        for _ in range(5):
            work.step()
    """


def test_a_budget_met_passes(pytester, inner):
    pytester.makepyfile(test_met=BUDGETS.format(unit="p50 < 10s, max <= 60s"))
    r = inner("--strict-markers")
    r.assert_outcomes(passed=1)
    [row] = [x for x in r.stdout.lines if x.startswith("test_met.py::test_budget") and " work.step " in x]
    assert re.search(r"work\.step\s+5\s+\d+\.\d ms\s+\d+\.\d ms\s+" + RUN_ID + "$", row), row
    assert (pytester.path / ".stepscope" / "runs.db").exists()


def test_a_missed_budget_fails_with_one_line_naming_budget_figure_and_run(pytester, inner):
    pytester.makepyfile(test_missed=BUDGETS.format(unit="p50 < 1ms"))
    r = inner("--strict-markers", "--stepscope-store", "ci-store")
    r.assert_outcomes(failed=1)
    missed = [x for x in lines_of(r) if x.startswith("stepscope budget missed:")]
    assert len(missed) == 1, lines_of(r)
    m = re.fullmatch(r"stepscope budget missed: work\.step p50 = (\d+\.\d) ms \(budget < 1 ms, 5 calls\) in run "
                     + RUN_ID, missed[0])
    assert m and float(m.group(1)) >= 19.9, missed
    st = Store(pytester.path / "ci-store", create=False)  # the run is kept
    run = st.get_run(m.group(2))
    assert run.command == ["pytest", "test_missed.py::test_budget"] and run.status == "ok"
    print(missed[0])


def test_a_memory_budget_reads_the_peak_within_the_run(pytester, inner):
    pytester.makepyfile(test_memory="""
        import time, pytest, stepscope

        def hold():
            block = b"\\x01" * (256 << 20)  # touched: resident
            s = stepscope.current_session()
            seen, deadline = s.memory.count, time.monotonic() + 60
            while s.memory.count < seen + 3 and time.monotonic() < deadline:  # until the lane has read it
                time.sleep(0.005)
            return len(block)

        @pytest.mark.stepscope(memory="peak < 128MiB")
        def test_over():
            hold()

        @pytest.mark.stepscope(memory="peak <= 64 GiB")
        def test_under():
            hold()
        """)
    r = inner()
    r.assert_outcomes(passed=1, failed=1)
    [line] = [x for x in lines_of(r) if x.startswith("stepscope budget")]
    m = re.fullmatch(r"stepscope budget missed: memory peak = (\d+\.\d) MiB RSS \(budget < 128 MiB\) in run " + RUN_ID,
                     line)
    assert m and float(m.group(1)) >= 256, line


def test_a_malformed_budget_is_a_usage_error_of_one_line(pytester, inner):
    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.stepscope(budget={"work.step": "p50 < 40 parsecs"})
        def test_x():
            pass
        """)
    r = inner()
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [x for x in r.stderr.lines if "stepscope" in x]
    assert line == ("ERROR: @pytest.mark.stepscope on test_bad.py::test_x: budget['work.step']: cannot read "
                    "'p50 < 40 parsecs' ('parsecs' is not a unit of time: ns, us, ms or s; e.g. 'p50 < 40ms' or "
                    "'p95 <= 1.5s, max < 2s')")
    assert not (pytester.path / ".stepscope").exists()


BASELINE = """
    import pytest, work

    @pytest.mark.stepscope(trace=["work.step"], hz=0)
    def test_loop():
        for _ in range(25):
            work.step()

    @pytest.mark.stepscope(trace=["work.step"], hz=0)
    def test_noisy():
        for i in range(25):
            work.step(5.0 + (7 * i) % 25)  # 5 to 29 ms: repeats that vary by ~40% within a run

    @pytest.mark.stepscope(trace=["work.step"], hz=0)
    def test_new():
        work.step(1)
    """


@pytest.mark.alone  # (it compares the timings of runs it records: a loaded run once missed the planted 1.3x)
def test_a_planted_slow_down_against_a_baseline_store_fails_and_a_a_does_not(pytester, inner):
    pytester.makepyfile(test_base=BASELINE)
    r = inner("--stepscope-store", "main-store", "-k", "not new")  # main: the baseline
    r.assert_outcomes(passed=2)
    base = Store(pytester.path / "main-store", create=False).latest_run_of(["pytest", "test_base.py::test_loop"])
    assert base
    # a pull request that makes each call 30% slower
    r = inner("--stepscope-store", "pr-store", "--stepscope-baseline", "main-store", SLOW="1.3")
    r.assert_outcomes(passed=2, failed=1)
    [line] = [x for x in lines_of(r) if x.startswith("stepscope: slower than the baseline")]
    print(line)
    m = re.fullmatch(r"stepscope: slower than the baseline: work\.step is (1\.\d\d)x slower \(CI [^)]*\).* "
                     r"\(baseline run " + RUN_ID + r", this run " + RUN_ID + r"\)", line)
    assert m and 1.15 < float(m.group(1)) < 1.5 and m.group(2) == base, line  # (the CPU wait taken out, if any)
    assert Store(pytester.path / "pr-store", create=False).get_run(m.group(3)).command == \
        ["pytest", "test_base.py::test_loop"]
    assert "FAILED test_base.py::test_loop" in "\n".join(r.stdout.lines)
    assert any(x.startswith("test_base.py::test_new: no baseline run in main-store") for x in r.stdout.lines)
    # the same code again: no failure; the noisy test warns and passes
    r = inner("--stepscope-store", "pr-store", "--stepscope-baseline", "main-store")
    outcomes = r.parseoutcomes()
    assert outcomes.get("passed") == 3 and not outcomes.get("failed") and outcomes.get("warnings", 0) >= 1, outcomes
    out = "\n".join(lines_of(r))
    assert "slower than the baseline" not in out and "StepscopeNoiseWarning: stepscope: too noisy to decide" in out
    # (on a busy machine the steady loop's repeats can vary enough to be called too noisy as well: never slower)
    assert re.search(r"test_base\.py::test_loop: no significant difference: work\.step [+-]\d+\.\d%", out) or \
        re.search(r"too noisy to decide .*work\.step.*this run", out), out
    # a run id as the baseline (in the current store): the one run every test is compared with
    r = inner("--stepscope-store", "main-store", "--stepscope-baseline", base,
              "-k", "loop", SLOW="1.3")
    r.assert_outcomes(failed=1)
    assert any(x.startswith("stepscope: slower than the baseline: work.step is 1.") and f"(baseline run {base}, " in x
               for x in lines_of(r))


def test_a_baseline_that_is_neither_a_store_nor_a_run_is_a_usage_error(pytester, inner):
    pytester.makepyfile(test_base=BASELINE)
    r = inner("--stepscope-store", "s", "--stepscope-baseline", "nowhere")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [x for x in r.stderr.lines if "stepscope" in x]
    assert line.startswith("ERROR: --stepscope-baseline nowhere: no store folder of that name, and no stepscope store "
                           "at "), line
    r = inner("--stepscope-fail-pct", "-5")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "--stepscope-fail-pct: must be a percentage >= 0, got -5" in \
        "\n".join(r.stderr.lines)


def test_the_plugin_module_imports_only_the_stdlib_and_pytest():
    import ast

    tree = ast.parse((SRC / "stepscope" / "ci" / "pytest_plugin.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names} | \
        {n.module for n in top if isinstance(n, ast.ImportFrom) and not n.level}
    assert names - {"__future__"} <= set(sys.stdlib_module_names) | {"pytest"}, names
    assert not [n for n in top if isinstance(n, ast.ImportFrom) and n.level]


def test_installing_stepscope_registers_the_plugin():
    import tomllib

    project = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"stepscope": "stepscope.ci.pytest_plugin"}
