"""Issue 39, item 4: a job's processes in the Chrome and speedscope exports. Each process run is a process of its
own (its OS pid, a `process_name`: `rank N` for a torch.distributed rank, else its command), its threads under
their own names, as Kineto's per-rank traces are; speedscope's profiles each say whose they are."""

import json

import pytest
from conftest import run_cli
from jobrun import record_job

from stepscope.output.export.chrome import to_chrome_trace
from stepscope.output.export.speedscope import to_speedscope
from stepscope.core.model import Frame, Profile, Run, RunData, Span
from stepscope.core.spantable import as_table
from stepscope.store.db import Store
from stepscope.store.jobjoin import join


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The stored two-process run of otlp_job.py (the program runs itself again with subprocess.run)."""
    store = tmp_path_factory.mktemp("procs") / "store"
    rid = record_job(store)
    st = Store(store)
    try:
        return store, st.get_run(rid), st.process_runs(rid)
    finally:
        st.close()


def test_chrome_export_gives_each_process_its_pid_and_name(job, tmp_path):
    store, top, (child,) = job
    out = tmp_path / "run.trace.json"
    r = run_cli(["export", "--format", "chrome", "-o", str(out)], store)
    assert r.returncode == 0, r.stderr
    ev = json.loads(out.read_text())["traceEvents"]
    assert top.pid != child.pid
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {top.pid: procs[top.pid], child.pid: " ".join(child.command)[:80]}
    assert procs[top.pid].startswith(f"stepscope run {top.id}")
    spans = [e for e in ev if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {top.pid, child.pid}
    for e in spans:  # process k's span ids are moved up by k << 40 (jobids)
        assert e["pid"] == (child.pid if e["args"]["span_id"] >> 40 else top.pid)
    threads = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {(p, n) for p in (top.pid, child.pid) for n in ("MainThread", "MainThread (samples)")}
    sampled = {e["pid"] for e in ev if e["ph"] == "B"}
    assert sampled == {top.pid, child.pid}


def test_speedscope_profiles_say_their_process(job, tmp_path):
    store, top, (child,) = job
    out = tmp_path / "run.speedscope.json"
    r = run_cli(["export", "--format", "speedscope", "-o", str(out)], store)
    assert r.returncode == 0, r.stderr
    names = [p["name"] for p in json.loads(out.read_text())["profiles"]]
    assert f"{' '.join(top.command)[:80]} (pid {top.pid}): spans: thread MainThread" in names
    assert f"{' '.join(child.command)[:80]} (pid {child.pid}): spans: thread MainThread" in names
    assert not [n for n in names if " · " in n], names  # (not the joined thread names' "pid P prog · MainThread")


def _rank_job() -> RunData:
    """A torchrun-shaped job built in memory: the launcher and two ranks, each a span on its MainThread."""
    def part(rid, pid, rank):
        run = Run(id=rid, command=["python", "train.py"], pid=pid, start_ns=0, end_ns=10_000, anchor_wall_ns=1,
                  process={} if rank is None else {"rank": rank, "world_size": 2}, parent_run=None if rank is None else "top")
        prof = Profile(frames=[Frame("f", "m", "m.py", 1)], stacks=[(0,)], sample_t_ns=[100], sample_thread=[7],
                       sample_stack=[0], sample_wall_ns=[1e6], sample_cpu_ns=[1e6], hz=1000,
                       thread_names={7: "MainThread"})
        return RunData(run, as_table([Span(1, None, f"s{pid}", "function", 0, 5_000, 7)]), prof)

    return join(part("top", 100, None), [part("r0", 101, 0), part("r1", 102, 1)])


def test_ranks_are_processes_named_rank_n():
    ev = to_chrome_trace(_rank_job())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs[101] == "rank 0" and procs[102] == "rank 1" and set(procs) == {100, 101, 102}
    assert {e["pid"]: e["name"] for e in ev if e["ph"] == "X"} == {100: "s100", 101: "s101", 102: "s102"}
    assert {e["args"]["name"] for e in ev if e.get("name") == "thread_name"} == {"MainThread", "MainThread (samples)"}
    doc = to_speedscope(_rank_job())
    assert "rank 1 (pid 102): samples: thread MainThread" in [p["name"] for p in doc["profiles"]]


def test_a_pid_two_processes_share_is_made_unique():
    data = _rank_job()
    data.processes[1].pid = 101  # (two hosts' processes can have one pid)
    ev = to_chrome_trace(data)["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(procs) == 3 and procs[101] == "rank 0"
