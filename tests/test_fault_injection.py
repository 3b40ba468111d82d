"""SIGKILL `stepscope run`, or the program under it, at seeded random moments of a traced run of the tiny SD
pipeline: the store always opens, holds consistent data up to the last flush, lists the run and renders it."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import cli_env, process_ended, run_cli, wait_until

from stepscope.store import Store, sampleblock, spanblock
from stepscope.store.reader import load_run

pytest.importorskip("diffusers")

SEED = 12
MOMENTS = 2  # per target


def _command():
    from stepscope.pipelines.sd import demo_traces

    args = ["run", "-q", "--hz", "199"]
    for t in demo_traces("ddim"):
        args += ["--trace", t]
    return args + ["--", sys.executable, "-m", "stepscope.pipelines.demo_program", "--model", "tiny", "--steps", "10"]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _gone(pid: int, within: float = 30.0) -> bool:
    """The process ended (a zombie counts as ended) within ``within`` s; fails the test otherwise."""
    return wait_until(lambda: process_ended(pid), within, f"process {pid} to end")


def _check_store(store, work, before: set) -> None:
    """The store opens and is consistent; a run the kill left is listed and renders."""
    with sqlite3.connect(store / "runs.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # each flush is one transaction: what is stored is whole (samples -> stacks -> frames)
        for run_id, in db.execute("SELECT id FROM runs"):
            n_frames = db.execute("SELECT count(*) FROM frames WHERE run_id = ?", (run_id,)).fetchone()[0]
            stacks = [r[0] for r in db.execute("SELECT frames FROM stacks WHERE run_id = ? ORDER BY idx", (run_id,))]
            assert all(int(i) < n_frames for s in stacks if s for i in s.split(","))
            top = max((s[2] for s in sampleblock.rows(db, run_id)), default=None)
            assert top is None or top < len(stacks)
            spans = list(spanblock.iter_spans(db, run_id))  # (every block decodes)
            assert all(s[5] >= s[4] for s in spans)
    r = run_cli(["runs", "--json"], store, cwd=work)
    assert r.returncode == 0, r.stderr
    runs = {x["id"]: x for x in json.loads(r.stdout)["runs"]}
    for run_id in set(runs) - before:
        assert runs[run_id]["status"] in ("ok", "killed", "lost"), runs[run_id]
        assert runs[run_id]["status"] != "running"  # nobody is left to record it
        out = work / f"{run_id}.html"
        rep = run_cli(["report", run_id, "-o", str(out)], store, cwd=work)
        assert rep.returncode == 0 and out.stat().st_size > 0, rep.stderr
        data = load_run(Store(store), run_id)
        assert sum(s.op != "transaction" for s in data.spans) == runs[run_id]["span_count"]  # (traced spans)


@pytest.fixture(scope="module")
def length(tmp_path_factory):
    """How long an undisturbed run takes here: the moments fall inside it."""
    work = tmp_path_factory.mktemp("undisturbed")
    t = time.monotonic()
    r = run_cli(_command(), work / "store", cwd=work)
    assert r.returncode == 0, r.stderr
    return time.monotonic() - t


@pytest.mark.parametrize("target", ["stepscope", "program"])
def test_sigkill_at_random_moments(tmp_path, target, length):
    store, work = tmp_path / "store", tmp_path
    env = cli_env(store)
    rng = random.Random(f"{SEED}-{target}")
    moments = sorted(rng.uniform(0.2, 0.8 * length) for _ in range(MOMENTS))
    for moment in moments:
        before = {r.id for r in Store(store).list_runs()}
        proc = subprocess.Popen([sys.executable, "-m", "stepscope", *_command()], env=env, cwd=work,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        time.sleep(moment)  # the kill's moment: the test's seeded input, not a wait for something to happen
        children = _children(proc.pid)
        if target == "stepscope":
            proc.kill()
            assert proc.wait(30) in (-signal.SIGKILL, 0), moment  # 0: it ended first (a slow moment)
            assert all(_gone(c) for c in children), moment  # the program died with it
        else:
            if children:
                os.kill(children[0], signal.SIGKILL)
            proc.wait(60)
            assert proc.returncode in (0, -signal.SIGKILL), (moment, proc.stderr.read())
        proc.stderr.close()
        _check_store(store, work, before)
