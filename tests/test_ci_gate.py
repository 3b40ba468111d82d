"""`stepscope diff --fail-if slower[:PCT]` and `--format markdown` through the real CLI, on stored runs of known
timings: a significant slow-down exits 1 (after the normal output, with one line on stderr), an A/A pair exits 0,
a threshold above the change exits 0, a malformed --fail-if is a one-line error (status 2); the Markdown has the
verdict and the tables, with names escaped."""

import json
import re

import numpy as np
import pytest
from conftest import run_cli

from stepscope.core.model import Run
from stepscope.store import Store

WORK = "pkg.mod.Model.forward"
ODD = "pkg.mod.<lambda>|__call__"
MS = 1_000_000


def store_run(st: Store, rid: str, per_call_ms: float, seed: int, calls: int = 25, wall: int = 1) -> None:
    """A finished run of ``calls`` calls of WORK (1% noise around ``per_call_ms``) and of ODD, under a transaction."""
    rng = np.random.default_rng(seed)
    t, spans = 1_000_000, []
    for i in range(calls):
        d = int(per_call_ms * MS * (1 + 0.01 * rng.standard_normal()))
        spans.append((10 + 2 * i, 1, WORK, "function", t, t + d, 1, None, None))
        spans.append((11 + 2 * i, 1, ODD, "function", t + d, t + d + MS, 1, None, None))
        t += d + MS
    spans.insert(0, (1, None, "test_x.py::test_y", "transaction", 0, t, 1, None, None))
    st.create_run(Run(id=rid, command=["pytest", "test_x.py::test_y"], status="running", env={"cpu_count": 2}), wall)
    st.append(rid, spans=spans)
    st.update_run(rid, status="ok", exit_code=0, end_ns=t + MS)


@pytest.fixture
def runs(store):
    st = Store(store)
    store_run(st, "aaaa-20260101", 10.0, 1, wall=1)
    store_run(st, "bbbb-20260101", 10.0, 2, wall=2)  # A/A
    store_run(st, "cccc-20260101", 13.0, 3, wall=3)  # +30%
    st.close()
    return store


def test_a_significant_slow_down_fails_after_the_normal_output(runs):
    r = run_cli(["diff", "aaaa", "cccc", "--fail-if", "slower:5%"], runs)
    assert r.returncode == 1, r.stderr
    assert "4. verdict:" in r.stdout and "Model.forward is 1.30x slower" in r.stdout  # the normal output first
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("stepscope: --fail-if slower:5%: Model.forward is 1.30x slower (CI "), line
    r = run_cli(["diff", "aaaa-20260101", "cccc-20260101", "--fail-if", "slower", "--json"], runs)
    assert r.returncode == 1 and json.loads(r.stdout)["failed"] is True and "1.30x slower" in r.stderr
    assert r.stderr.count("\n") == 1


def test_an_a_a_pair_and_a_change_under_the_threshold_pass(runs):
    r = run_cli(["diff", "aaaa", "bbbb", "--fail-if", "slower", "--json"], runs)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["failed"] is False and doc["verdict"].startswith("no significant difference") and r.stderr == ""
    r = run_cli(["diff", "aaaa", "cccc", "--fail-if", "slower:50", "--json"], runs)  # +30% < 50%
    assert r.returncode == 0 and json.loads(r.stdout)["failed"] is False
    r = run_cli(["diff", "cccc", "aaaa", "--fail-if", "slower"], runs)  # faster never fails
    assert r.returncode == 0 and "faster" in r.stdout
    r = run_cli(["diff", "aaaa", "cccc", "--json"], runs)  # without --fail-if: a slow-down is no failure
    assert r.returncode == 0 and json.loads(r.stdout)["failed"] is False


@pytest.mark.parametrize("args,message", [
    (["--fail-if", "faster"], "stepscope: error: --fail-if: must be slower or slower:PCT (e.g. slower:5%), got 'faster'"),
    (["--fail-if", "slower:five"], "stepscope: error: --fail-if: must be slower or slower:PCT (e.g. slower:5%), got "
                                   "'slower:five'"),
    (["--format", "html"], "stepscope: error: --format: must be text, markdown or json, got 'html'"),
    (["--format", "markdown", "--json"], "stepscope: error: --json and --format markdown: give one of them"),
])
def test_malformed_options_are_one_line_errors(runs, args, message):
    r = run_cli(["diff", "aaaa", "cccc", *args], runs)
    assert r.returncode == 2 and r.stderr.strip() == message and r.stdout == ""


def test_markdown_has_the_verdict_and_tables_with_names_escaped(runs):
    r = run_cli(["diff", "aaaa", "cccc", "--format", "markdown", "--fail-if", "slower:5%"], runs)
    assert r.returncode == 1
    md = r.stdout
    lines = md.splitlines()
    assert lines[0] == "### stepscope diff: A `aaaa-20260101` → B `cccc-20260101`"
    assert lines[2].startswith("> **Failed:** stepscope: --fail-if slower:5%: Model.forward is 1.30x slower")
    assert any(x.startswith("**Verdict:** Model.forward is 1.30x slower (CI ") for x in lines)
    assert "| compared unit | A | B | n A/B | change of median (95% CI) | verdict |" in lines
    head = lines.index("| compared unit | A | B | n A/B | change of median (95% CI) | verdict |")
    assert lines[head + 1] == "|---|---:|---:|---:|---:|---|"
    assert re.match(r"\| Model\.forward \| 10\.0 ms \| 13\.0 ms \| 25/25 \| \+(29|30)\.\d% \(CI \+\d+\.\d% to \+\d+\.\d%\) "
                    r"\| \*\*slower\*\* \|$", lines[head + 2]), lines[head + 2]
    assert "#### Per span name (median of its calls)" in lines and "#### Environment changes (most likely causes first)" in lines
    # the odd name: in a code span, its | escaped so that the row keeps its six cells
    row = next(x for x in lines if "lambda" in x)
    assert row.startswith(r"| `pkg.mod.<lambda>\|__call__` |") and row.count(" | ") == 5
    start = lines.index("#### Per span name (median of its calls)") + 2
    table = lines[start:lines.index("", start)]
    assert len(table) == 4 and all(x.count("|") - x.count(r"\|") == 7 for x in table)  # head, rule, 2 spans
    r = run_cli(["diff", "aaaa", "bbbb", "--format", "markdown"], runs)
    assert r.returncode == 0 and "**Verdict:** no significant difference" in r.stdout and "Failed" not in r.stdout


def test_markdown_escapes_prose_and_code():
    from stepscope.output.markdown.diff import code, text

    assert text("a|b <x> __init__ *y* `z` [l](u) ~s~ &amp;") == \
        r"a\|b \<x\> \_\_init\_\_ \*y\* \`z\` \[l\](u) \~s\~ \&amp;"
    assert text("two\nlines") == "two lines"
    assert code("a|b") == r"`a\|b`" and code("x`y") == "`` x`y ``" and code("") == ""
