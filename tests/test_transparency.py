"""The behaviour suite: each program runs with and without `stepscope run`, and everything the program
can see must be the same: stdout, stderr, exit code (which carry identity checks, frames, recursion,
warnings, tracebacks, logging, profilers, pickling, classes, Enums, lru_cache, partials, generators,
coroutines, the script's own namespace). Runs on this interpreter (3.11, with torch elsewhere) and on
pyenv's 3.12 and 3.13 where present, with each recorder (the C one, ``stepscope.record.native._native``, built for each
interpreter by scripts/build_native.py, and the pure-Python one: ``STEPSCOPE_RECORDER=python``). The traced
names must also have recorded spans, so a case cannot pass by tracing nothing."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.store import spanblock

HERE = Path(__file__).parent / "programs" / "transparency"
SRC = Path(__file__).parent.parent / "src"
BUILD_NATIVE = Path(__file__).parent.parent / "scripts" / "build_native.py"
#: interpreter -> its stepscope.record.native._native was built (the C recorder is in use unless
#: STEPSCOPE_RECORDER=python)
NATIVE: dict[str, bool] = {}


def _interpreters():
    out = [pytest.param(sys.executable, id=f"py{sys.version_info[0]}.{sys.version_info[1]}")]
    root = Path(__file__).parent.parent
    for version, exe in (("3.12.1", "python3.12"), ("3.13.0", "python3.13")):
        path = Path.home() / ".pyenv" / "versions" / version / "bin" / exe
        venv = root / f".venv-{exe[len('python'):]}" / "bin" / "python"  # (`make interp-venvs`: the same, with pytest)
        if venv.exists():
            out.append(pytest.param(str(venv), id=exe))
        elif path.exists():
            out.append(pytest.param(str(path), id=exe))
    for p in out:  # the C recorder for each (a no-op when built; a machine without a compiler: Python only)
        NATIVE[p.values[0]] = subprocess.run([p.values[0], str(BUILD_NATIVE), "--quiet"], capture_output=True,
                                             timeout=300).returncode == 0
    return out


INTERPRETERS = _interpreters()

#: case -> (program args, traced names, the span names that must be recorded, 3.12+ only)
CASES = {
    "identity": (["case_identity.py"], ["tpmod.*"], {"tpmod.handle", "tpmod.deep", "tpmod.fail"}, False),
    # (a glob matches what a class has through its MRO from its own package: Point3().norm is Point3.norm)
    "objects": (["case_objects.py"], ["tpmod.*", "tpmod.Sub.step", "tpmod.adder", "tpmod.double"],
                {"tpmod.Point3.norm", "tpmod.Point3.__init__", "tpmod.Color.describe", "tpmod.cached", "tpmod.gen", "tpmod.coro", "tpmod.agen",
                 "tpmod.Sub.step", "tpmod.Adder.__call__", "tpmod._scale"}, False),
    "profilers": (["case_profilers.py"], ["tpmod.handle", "tpmod.fail"], {"tpmod.handle"}, True),
    # 1.5 s under cProfile with a second thread: the recorder thread's waits, looks and writes unseen (3.12+)
    "profiler-long": (["case_profiler_long.py"], ["tpmod.handle"], {"tpmod.handle"}, True),
    "main": (["case_main.py"], ["__main__.f", "__main__.K.m"], {"__main__.f", "__main__.K.m"}, False),
    "main-untraced": (["case_main_plain.py"], [], set(), False),
    "main-c": (["-c", "def g(x: int):\n    return x\nprint(g(1), g.__annotations__, sorted(dir()), globals() is locals())"],
               ["__main__.g"], {"__main__.g"}, False),
    "torch": (["case_torch.py"], ["__main__.Net.forward", "__main__.Block.forward"],
              {"__main__.Net.forward", "__main__.Block.forward"}, False),
    # an inherited __call__ (nn.Module._wrapped_call_impl) traced through the subclass, under torch.compile
    "torch-call": (["case_torch_call.py"], ["tpnet.Net.forward", "tpnet.Net.__call__", "tpnet.Block.__call__"],
                   {"tpnet.Net.__call__", "tpnet.Block.__call__"}, False),
    # a forking program (os.fork, a fork pool): the child as an unprofiled program's child, no 3.12 fork warning
    "fork": (["case_fork.py"], ["__main__.work"], {"__main__.work"}, False),
    "main-m": (["-m", "case_main_plain"], ["__main__.g"], {"__main__.g"}, False),
    # the processes a program starts (os.fork, fork and spawn pools, subprocess of python) recorded with it
    "children": (["case_children.py"], ["__main__.work", "tpmod.handle"], {"__main__.work", "tpmod.handle"}, False),
    # modules that raise as they import (directly, nested, an ImportError, a SyntaxError; caught, through
    # importlib.import_module, uncaught) and one that warns with stacklevel=2, in a package the hook watches
    # (a glob over it): tracebacks and warnings with no frame of stepscope's nor extra importlib frames
    "import-errors": (["case_import_errors.py"], ["tpimp.*.work"], {"tpimp.good.work", "tpimp.old.work"}, False),
}
#: stepscope run's options per case: the fork case checks --no-children's child, that of an unprofiled program
FLAGS = {"fork": ["--no-children"]}


def _env(extra_path: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
    env["PYTHONPATH"] = str(HERE)
    return env


def _run(cmd, env, cwd):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


RECORDERS = ["native", "python"]

#: what a program's own profiler may see of the signal sampler's handler: its one call, the first tick after the
#: profiler starts, which pauses the timers (docs/sampling.md, "Limits of the signal sampler"), and the C functions
#: it calls to find the profiler
HANDLER_SEEN = {"_handler", "getpid", "getprofile", "gettrace", "get_tool", "<built-in method posix.getpid>",
                "<built-in method sys.getprofile>", "<built-in method sys.gettrace>",
                "<built-in method sys.monitoring.get_tool>"}


def _without_the_handlers_one_call(out: str) -> str:
    """``out`` of case_profilers.py with the handler's documented one call (and its C calls) taken out of each
    profiler's list where the handler shows in it; every other difference stays."""
    import ast

    lines = []
    for line in out.splitlines(keepends=True):
        head, _, rest = line.partition(" ")
        if head in ("profile", "cprofile") and "_handler" in rest:
            seen = ast.literal_eval(rest.strip())
            line = f"{head} {[x for x in seen if x not in HANDLER_SEEN]}\n"
        elif head == "trace" and "_handler" in rest:  # (event, function, line): the handler's own lines
            seen = ast.literal_eval(rest.strip())
            line = f"{head} {[x for x in seen if x[1] != '_handler']}\n"
        lines.append(line)
    return "".join(lines)


def _at_most_the_iteration_in_flight(traced: str, plain: str) -> None:
    """case_profiler_long.py's output under stepscope against a plain run's: the program's profiler may see the
    calls of the recorder loop's iteration that was running when the profiler started (docs/sampling.md, "Limits of
    the signal sampler"), and nothing after it: the recorder waited at most once (``park``, which then waits, in C,
    until the profiler is gone)."""
    import ast

    got = {ln.partition(" ")[0]: ast.literal_eval(ln.partition(" ")[2]) for ln in traced.splitlines()}
    want = {ln.partition(" ")[0]: ast.literal_eval(ln.partition(" ")[2]) for ln in plain.splitlines()}
    assert want["others"] == [], plain
    others = dict(got["others"])
    assert set(got["cprofile"]) - set(others) == set(want["cprofile"]), traced
    assert others.get("park", 0) <= 1 and others.get("<built-in method stepscope.record.native._native.park>", 0) <= 1, traced


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("recorder", RECORDERS)
@pytest.mark.parametrize("python", INTERPRETERS)
def test_program_behaves_as_without_stepscope(python, recorder, case, tmp_path):
    args, names, must_record, new_only = CASES[case]
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info[1])"], capture_output=True,
                             text=True).stdout.strip()
    if new_only and int(version) < 12:
        pytest.skip("on 3.11 a program's own profilers see stepscope's probe calls (docs/usage.md)")
    if case.startswith("torch") and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode:
        pytest.skip("torch is installed for this project's 3.11 only")
    work = tmp_path / "work"
    shutil.copytree(HERE, work)
    env = _env()
    env["PYTHONPATH"] = str(work)
    plain = _run([python, *args], env, work)
    store = tmp_path / "store"
    cli_env = dict(env, STEPSCOPE_STORE=str(store), PYTHONPATH=os.pathsep.join([str(work), str(SRC)]),
                   STEPSCOPE_RECORDER=recorder)
    traced_cmd = [sys.executable, "-m", "stepscope", "run", "-q", *FLAGS.get(case, [])]
    for n in names:
        traced_cmd += ["--trace", n]
    traced = _run([*traced_cmd, "--", python, *args], cli_env, work)
    assert traced[0] == plain[0], traced[2]
    if case == "profiler-long" and traced[1] != plain[1]:  # (a busy machine)
        _at_most_the_iteration_in_flight(traced[1], plain[1])
    elif case.startswith("profiler") and traced[1] != plain[1]:  # a tick came while the program's profiler ran (a busy machine)
        assert _without_the_handlers_one_call(traced[1]) == plain[1]
    else:
        assert traced[1] == plain[1]
    assert traced[2] == plain[2]  # -q: not even stepscope's notes (a compiled region): they are the first screen's
    db = sqlite3.connect(store / "runs.db")
    recorded = {s[2] for (rid,) in db.execute("select id from runs") for s in spanblock.iter_spans(db, rid)}
    used = {json.loads(e).get("recorder") for (e,) in db.execute("select env from runs where parent_run is null")}
    notes = {k: v for (u,) in db.execute("select unresolved from runs") for k, v in json.loads(u or "{}").items()}
    db.close()
    if case == "torch":  # the calls inside the compiled module are reported (the run's notes), never silently dropped
        assert notes.get("__main__.Block.forward", "").startswith("inside a compiled region"), notes
    assert must_record <= recorded, f"not recorded: {must_record - recorded}"
    assert used == {recorder if NATIVE[python] else "python"}
