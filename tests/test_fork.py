"""A program that forks, under `stepscope run --no-children`: its forked children behave as the children of an
unprofiled program (they die by the signal sent to them, whenever it comes; nothing of stepscope's can block them),
and nothing the parent recorded is lost while the recorder is parked across each fork. Hundreds of forks with a
busy thread calling a traced function, so that a race at one fork in a hundred cannot pass. With the children
followed (the default), each forked child is a process of the run and still ends by the SIGTERM sent to it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_transparency import INTERPRETERS, SRC

PROG = Path(__file__).parent / "programs" / "fork_stress.py"


@pytest.mark.parametrize("python", INTERPRETERS)
def test_hundreds_of_forks_with_the_recorder_busy(python, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
    env.update(STEPSCOPE_STORE=str(tmp_path / "store"), PYTHONPATH=str(SRC))
    plain = subprocess.run([python, str(PROG), "200", "10"], env=env, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    out = tmp_path / "run.json"
    p = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "--no-children", "--json-file", str(out),
                        "--trace", "__main__.tick", "--", python, str(PROG), "200", "10"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # the program's own warnings (3.12+: it forks with its busy thread running), nothing of stepscope's
    assert re.sub(r"pid=\d+", "pid=N", p.stderr) == re.sub(r"pid=\d+", "pid=N", plain.stderr)
    lines = dict(ln.split(" ", 1) for ln in p.stdout.splitlines())
    assert lines["forks"].startswith("200 pools 10 [0, 1, 4, 9, 16] [0, 1, 4, 9, 16]")
    ticks = int(lines["ticks"])
    run = json.loads(out.read_text())["run"]
    assert run["status"] == "ok" and run["exit_code"] == 0
    spans = {s["name"]: s["count"] for s in run["spans"]}
    assert spans.get("__main__.tick") == ticks  # every call, across 200 parks of the recorder


@pytest.mark.parametrize("python", INTERPRETERS)
def test_followed_forked_children_end_by_sigterm_and_are_processes_of_the_run(python, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STEPSCOPE"))}
    env.update(STEPSCOPE_STORE=str(tmp_path / "store"), PYTHONPATH=str(SRC))
    out = tmp_path / "run.json"
    p = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "--json-file", str(out),
                        "--trace", "__main__.tick", "--", python, str(PROG), "30", "3"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr  # (exit 1: a child that did not end by its SIGTERM in time)
    lines = dict(ln.split(" ", 1) for ln in p.stdout.splitlines())
    assert lines["forks"].startswith("30 pools 3 [0, 1, 4, 9, 16] [0, 1, 4, 9, 16]")
    run = json.loads(out.read_text())["run"]
    forked = [x for x in run["processes"] if x["how"] == "fork"]
    assert len(forked) == 30 + 3 * 2, [(x["pid"], x["ppid"], x["status"], x["command"][-2:]) for x in run["processes"]]  # the 30 forks and the pools' workers
    assert sum(x["status"] == "terminated" and x["exit_code"] == -15 for x in forked) >= 30, [(x["status"], x["exit_code"], x["command"][-2:]) for x in forked if not (x["status"] == "terminated" and x["exit_code"] == -15)]
