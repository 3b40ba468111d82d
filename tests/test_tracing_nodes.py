"""Node-graph programs under the real `stepscope run` (issue 27): nodes made by a decorator that returns a
same-named subclass, timed per node from one glob or from the base method's name, on 3.11, 3.12 and 3.13
(tests/programs/nodegraph, torch-free); a glob over a class on another package's base leaves that base's
methods alone; a glob that matches nothing says what it saw; the program's output is the same as without
stepscope. Then the node-graph web app (tests/programs/nodeapp: uvicorn, a session-queue thread, diffusers)
serving two requests, each of its four nodes timed from one glob."""

import collections
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROGRAMS, wait_until
from test_transparency import INTERPRETERS

from stepscope.store import spanblock

SRC = Path(__file__).parent.parent / "src"
NODEGRAPH = PROGRAMS / "nodegraph"
NODEAPP = PROGRAMS / "nodeapp"
INV = "minigraph.invocations"


def _env(store: Path | None, *paths) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env["COLUMNS"] = "1000"  # stepscope's one-line notes stay one line
    if store is not None:
        env["STEPSCOPE_STORE"] = str(store)
    return env


def _span_counts(store: Path) -> collections.Counter:
    """The run's traced spans by name (the root transaction left out)."""
    db = sqlite3.connect(store / "runs.db")
    try:
        (run,) = [r for (r,) in db.execute("SELECT id FROM runs")]
        return collections.Counter(s[2] for s in spanblock.iter_spans(db, run) if s[3] != "transaction")
    finally:
        db.close()


#: case -> (traced names, span name -> count, the start of a line stepscope adds to stderr, or None)
CASES = {
    # a glob over the package: each node's invoke under its own class, also the node whose invoke is the base's
    # (PassInvocation) and the node of a module imported after the first graphs ran (late)
    "glob": ([f"{INV}.*.*.invoke"],
             {f"{INV}.basic.AddInvocation.invoke": 2, f"{INV}.basic.PassInvocation.invoke": 2,
              f"{INV}.text.UpperInvocation.invoke": 2, f"{INV}.late.LateInvocation.invoke": 1}, None),
    # the base method by name: its overrides (late's too), each under its class; the base's own calls under its name
    "base": ([f"{INV}.baseinvocation.BaseInvocation.invoke"],
             {f"{INV}.basic.AddInvocation.invoke": 2, f"{INV}.text.UpperInvocation.invoke": 2,
              f"{INV}.late.LateInvocation.invoke": 1, f"{INV}.baseinvocation.BaseInvocation.invoke": 2},
             None),  # (the note on its overrides: the run's, never printed under -q: BASE_NOTE)
    # a class on another package's base (fakenn.Module, shaped like torch.nn.Module): its own methods only
    "model": (["minigraph.models.*.*"], {"minigraph.models.Net.__init__": 1, "minigraph.models.Net.forward": 2}, None),
    "nothing": ([f"{INV}.*.*.invok"], {},
                f"not traced: {INV}.*.*.invok: no functions match '*.*.invok' in {INV}: 5 classes seen"
                " (BaseInvocation, AddInvocation, PassInvocation, UpperInvocation, ...), none defines or inherits"
                " invok"),
}


#: the run's note on the base method's overrides (the first screen's; never printed under -q)
BASE_NOTE = (f"overridden in 3 subclasses: each override traced as a span of its own class ({INV}.basic.AddInvocation"
             f".invoke, {INV}.text.UpperInvocation.invoke, {INV}.late.LateInvocation.invoke)")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("python", INTERPRETERS)
def test_node_graph_traced_per_node(python, case, tmp_path):
    names, counts, note = CASES[case]
    plain = subprocess.run([python, "-m", "minigraph.main"], cwd=NODEGRAPH, env=_env(None, NODEGRAPH),
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "stepscope", "run", "-q"]
    for n in names:
        cmd += ["--trace", n]
    traced = subprocess.run([*cmd, "--", python, "-m", "minigraph.main"], cwd=NODEGRAPH,
                            env=_env(store, NODEGRAPH, SRC), capture_output=True, text=True, timeout=120)
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout), traced.stderr
    added = [ln for ln in traced.stderr.splitlines() if ln.startswith(("overrides: ", "not traced: "))]
    assert [ln for ln in traced.stderr.splitlines() if ln not in added] == plain.stderr.splitlines()
    assert added == ([note] if note else [])
    assert _span_counts(store) == counts
    if case == "base":
        db = sqlite3.connect(store / "runs.db")
        (notes,) = db.execute("SELECT unresolved FROM runs").fetchone()
        db.close()
        assert json.loads(notes) == {f"{INV}.baseinvocation.BaseInvocation.invoke": BASE_NOTE}


def test_nodeapp_each_node_timed_from_one_glob(tmp_path):
    """The web app under `stepscope run --trace 'nodeapp.invocations.*.*.invoke'` (and the UNet and the scheduler's
    step), two requests through client.py 1.5 s apart: two spans of each of the four nodes, named after each
    node's class; the steps numbered per request (the denoise node drives them), the idle time between the
    requests in no step; the top functions running time (issue 27: no idle thread's or event loop's wait)."""
    for mod in ("torch", "diffusers", "transformers", "uvicorn", "starlette"):
        pytest.importorskip(mod)
    store, portfile = tmp_path / "store", tmp_path / "port"
    env = _env(store, NODEAPP, SRC)
    app = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "-q", "--trace", "nodeapp.invocations.*.*.invoke",
                            "--trace", "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward",
                            "--trace", "diffusers.schedulers.scheduling_ddim.DDIMScheduler.step",
                            "--json-file", str(tmp_path / "run.json"),
                            "--", sys.executable, "-m", "nodeapp.main", str(portfile)],
                           cwd=NODEAPP, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # client.py waits for the port file with a deadline of its own (--timeout), then shuts the app down
        client = subprocess.run([sys.executable, str(NODEAPP / "client.py"), str(portfile), "2", "--gap", "1.5",
                                 "--timeout", "240"], env=env, capture_output=True, text=True, timeout=300)
        assert client.returncode == 0, client.stderr + (app.stderr.read() if app.poll() is not None else "")
        assert [ln.startswith('{"status":"ok"') for ln in client.stdout.splitlines()] == [True, True], client.stdout
        wait_until(lambda: app.poll() is not None, 120, "the app to exit after POST /shutdown")
        out, err = app.communicate()
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate()
    assert app.returncode == 0, err
    assert out.strip() == "served"
    assert "not traced" not in err, err
    nodes = {f"nodeapp.invocations.{mod}.{cls}.invoke": 2 for mod, cls in (
        ("noise", "NoiseInvocation"), ("compel", "CompelInvocation"), ("denoise", "DenoiseLatentsInvocation"),
        ("latents", "LatentsToImageInvocation"))}
    counts = _span_counts(store)
    assert {k: v for k, v in counts.items() if k in nodes} == nodes, counts
    run = json.loads((tmp_path / "run.json").read_text())["run"]
    rows = run["steps"]["rows"]
    assert [(r["call"], r["step"]) for r in rows] == [(c, k) for c in (0, 1) for k in range(4)], rows
    # the 1.5 s between the requests is no step's: it lies between the first request's last step and the second's first
    # (on a busy machine a step itself may take that long: its length says nothing of the gap)
    last_of_first = max(r["end_ns"] for r in rows if r["call"] == 0)
    first_of_second = min(r["start_ns"] for r in rows if r["call"] == 1)
    assert first_of_second - last_of_first >= 1.5e9, rows
    # no wait among them: an idle thread's or the event loop's wait counted would hold the 1.5 s gap at least (a
    # large share of the work); beside a busy process the loop's own few lines (``BaseEventLoop.time``) may show,
    # with the time its thread waited for a CPU, a share of a few percent at most
    waits = ("threading.", "selectors.", "queue.", "asyncio.base_events", "socket.", "_queue.")
    held = [(f["name"], round(f["total_share"], 3)) for f in run["top_self"] + run["top_total"]
            if f["name"].startswith(waits) and f["total_share"] >= 0.05]
    assert not held, held
    assert run["idle_ns"] > 1.0e9, run["idle_ns"]  # the waits left out, and said


def test_a_glob_certain_to_match_nothing_is_said_before_the_program_starts(tmp_path):
    """Nothing in the package on disk (no submodule file, no name its __init__ binds) matches the glob's part:
    said before the program runs, once; a glob that may match (through a class's bases) is left to the run."""
    store = tmp_path / "store"
    code = ("import sys; sys.stderr.write('program starts\\n'); import runpy;"
            " runpy.run_module('minigraph.main', run_name='__main__')")
    p = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "--trace", f"{INV}.x*.*.invoke", "--trace",
                        f"{INV}.b*.*.invok", "--", sys.executable, "-c", code], cwd=NODEGRAPH,
                       env=_env(store, NODEGRAPH, SRC), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    early = f"not traced: {INV}.x*.*.invoke: no functions match 'x*.*.invoke' in {INV}: nothing in {INV} matches 'x*'" \
            " (it has baseinvocation, basic, late, text)"
    assert lines.index(early) < lines.index("program starts")
    assert sum(f"{INV}.x*" in ln for ln in lines) == 1  # said once, not again at the end
    assert lines[-1] == (f"not traced: {INV}.b*.*.invok: no functions match 'b*.*.invok' in {INV}: 3 classes seen"
                         " (BaseInvocation, AddInvocation, PassInvocation), none defines or inherits invok")
