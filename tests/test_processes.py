"""Every Python process of a job in one run (``stepscope.record.processes``, ``store.jobjoin``, ``analysis.ranks``): real
multi-process programs on this machine, run through the CLI: a 2-rank DDP job under torchrun (gloo, CPU) with a
straggler, `accelerate launch` with 2 processes, a DataLoader with 2 workers, pools and subprocesses, a worker killed
by SIGKILL, and `--no-children`."""

import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import PROGRAMS, run_cli

from stepscope.core.jobids import process_index
from stepscope.store.db import Store
from stepscope.store.reader import load_run

torch = pytest.importorskip("torch")

BIN = Path(sys.executable).parent
TRAIN = PROGRAMS / "ranks" / "train.py"


def _summary(r) -> dict:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout[r.stdout.index('{"run"'):])["run"]


def test_torchrun_ranks_are_one_run_with_the_straggler_its_cause_and_the_wait(store, tmp_path):
    """torchrun --nproc-per-node 2 (DDP over gloo): rank 1 runs slow_augment (150 ms) on steps 3 and 5. Both ranks
    are processes of the run with their rank; the straggler is rank 1 on those steps, the cause slow_augment, and
    rank 0 waited for it; the names traced in the ranks' __main__ are not "not traced"."""
    r = run_cli(["run", "--json", "-t", "__main__.train_step", "-t", "__main__.slow_augment", "--",
                 str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(TRAIN), "8"], store,
                cwd=tmp_path)
    s = _summary(r)
    assert "trained 8 steps on 2 ranks" in r.stdout
    procs = s["processes"]
    ranks = {p["rank"]: p for p in procs if p["rank"] is not None}
    assert set(ranks) == {0, 1} and all(p["world_size"] == 2 and p["status"] == "ok" for p in ranks.values())
    assert procs[0]["how"] == "top" and all(p["ppid"] == procs[0]["pid"] for p in ranks.values())
    assert all(p["span_count"] >= 8 for p in ranks.values())
    assert "__main__.train_step" not in s["unresolved"] and "__main__.slow_augment" not in s["unresolved"]
    names = {x["name"]: x["count"] for x in s["spans"]}
    assert names["__main__.train_step"] == 16 and names["__main__.slow_augment"] == 2
    assert names.get("torch.distributed.distributed_c10d.all_reduce", 0) >= 16  # collectives traced unnamed
    rs = s["ranks"]
    assert rs["name"] == "__main__.train_step" and rs["ranks"] == [0, 1] and len(rs["wall"]) == 8
    why = json.dumps({k: rs[k] for k in ("held", "straggler", "lead_ns", "busy", "cause", "waited_for")})
    assert rs["job_straggler"] == 1 and {3, 5} <= set(rs["held"]), why
    assert all(rs["straggler"][k] == 1 for k in (3, 5)), why
    assert rs["cause"] and rs["cause"][0][0] == "__main__.slow_augment", why
    assert rs["waited_for"]["0"] > 150e6, why  # rank 0 blocked while rank 1 augmented (2 x ~150 ms)
    # DDP's gradient all-reduce (launched by its C++ reducer inside backward) is a collective span of each backward
    st = Store(store)
    try:
        data = load_run(st)
    finally:
        st.close()
    by_rank = {k: r.process["rank"] for k, r in enumerate(data.processes, 1) if r.process.get("rank") is not None}
    ddp = [x for x in data.spans if x.name == "DistributedDataParallel.gradient_all_reduce"]
    parents = {x.span_id: x for x in data.spans}
    backs = [x for x in data.spans if x.op == "backward"]
    assert len(backs) == 16 and all(x.op == "collective" and parents[x.parent_id].op == "backward" for x in ddp)
    assert len(ddp) >= 14, len(ddp)  # one a backward (a bucket launched a few us before its end may read outside it)
    assert all(x.attrs["collective.bytes"] == (32 * 64 + 64 + 64 + 1) * 4 and x.attrs["collective.group"] == "WORLD"
               and x.attrs["collective.group_size"] == 2 for x in ddp)  # the model's parameters, one bucket
    waits = sorted((x.end_ns - x.start_ns for x in ddp if by_rank[int(process_index(np.array([x.thread_id]))[0])] == 0), reverse=True)
    assert waits[1] > 100e6, waits  # rank 0 waited in it on the two held-up steps
    assert sorted(x.attrs["collective.seq"] for x in ddp)[::2] == sorted(x.attrs["collective.seq"] for x in ddp)[1::2]
    # the terminal summary says it in words
    r = run_cli(["run", "-t", "__main__.train_step", "-t", "__main__.slow_augment", "--",
                 str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(TRAIN), "6"], store, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "straggler: rank 1" in r.stderr and "__main__.slow_augment" in r.stderr and "rank 0 waited" in r.stderr
    assert "not traced" not in r.stderr
    r = run_cli(["diff", "--json"], store)  # the two jobs rank by rank
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["rank_step"] == "__main__.train_step" and [x["rank"] for x in d["ranks"]] == [0, 1]
    by = {x["rank"]: x for x in d["ranks"]}
    assert (by[0]["steps_a"], by[0]["steps_b"]) == (8, 6) and by[1]["led_a"] >= 2 and by[1]["led_b"] >= 1
    r = run_cli(["diff"], store)
    assert r.returncode == 0 and "by rank: __main__.train_step" in r.stdout, r.stderr
    r = run_cli(["runs", "--json"], store)
    runs = json.loads(r.stdout)["runs"]
    assert len(runs) == 2 and all(x["span_count"] >= 28 for x in runs)  # the ranks: not runs of their own in the list
    assert all("__main__.train_step" not in x["unresolved"] for x in runs)
    r = run_cli(["run", "-q", "-t", "__main__.train_step", "-t", "__main__.no_such", "--", str(BIN / "torchrun"),
                 "--standalone", "--nproc-per-node", "2", str(TRAIN), "2"], store, cwd=tmp_path)
    assert r.returncode == 0 and "not traced: __main__.no_such" in r.stderr, r.stderr  # -q: what no process traced
    assert "__main__.train_step" not in r.stderr


ACC = """\
from accelerate import Accelerator
import torch

def step(acc, i):
    return acc.reduce(torch.ones(4) * (acc.process_index + 1), "sum")

acc = Accelerator(cpu=True)
for i in range(3):
    out = step(acc, i)
if acc.is_main_process:
    print("sum", out.tolist()[0], acc.num_processes)
"""


def test_accelerate_launch_with_two_processes(store, tmp_path):
    pytest.importorskip("accelerate")
    (tmp_path / "acc.py").write_text(ACC)
    r = run_cli(["run", "--json", "-t", "__main__.step", "--", str(BIN / "accelerate"), "launch", "--multi_gpu",
                 "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                 "--main_process_port", "0", str(tmp_path / "acc.py")], store, cwd=tmp_path)
    s = _summary(r)
    assert "sum 3.0 2" in r.stdout
    ranks = sorted(p["rank"] for p in s["processes"] if p["rank"] is not None)
    assert ranks == [0, 1]
    assert {x["name"]: x["count"] for x in s["spans"]}["__main__.step"] == 6
    assert "__main__.step" not in s["unresolved"]


LOADER = """\
import torch
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        return torch.tensor([float(i * i)])

def main():
    dl = DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    print("total", float(sum(b.sum() for b in dl)))

if __name__ == "__main__":
    main()
"""


def test_dataloader_workers_are_processes_of_the_run(store, tmp_path):
    (tmp_path / "loader.py").write_text(LOADER)
    plain = __import__("subprocess").run([sys.executable, str(tmp_path / "loader.py")], capture_output=True, text=True)
    r = run_cli(["run", "--json", "-t", "__main__.Squares.__getitem__", "--", sys.executable, str(tmp_path / "loader.py")],
                store, cwd=tmp_path)
    s = _summary(r)
    assert r.stdout[: r.stdout.index('{"run"')] == plain.stdout
    workers = [p for p in s["processes"] if p["how"] == "fork"]
    assert len(workers) == 2 and all(p["status"] in ("ok", "terminated") for p in workers)
    assert {x["name"]: x["count"] for x in s["spans"]}["__main__.Squares.__getitem__"] == 16  # all in the workers
    assert sum(p["span_count"] for p in workers) == 16


KILLED = """\
import os, signal, sqlite3, subprocess, sys, time
CHILD = '''
import signal
def tick(i):
    return sum(range(i * 100))
for i in range(40):
    tick(i)
print("ready", flush=True)
while True:  # until the parent kills it
    signal.pause()
'''
p = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
assert p.stdout.readline().strip() == "ready"
if sys.argv[1:] == ["--flushed"]:  # wait (deadline 30 s) until the child's run holds its 40 spans (flushed every second)
    db = sqlite3.connect(os.path.join(os.environ["STEPSCOPE_STORE"], "runs.db"), timeout=30)
    q = ("SELECT coalesce(sum(n), 0) FROM span_blocks WHERE run_id IN "
         "(SELECT id FROM runs WHERE parent_run IS NOT NULL)")
    end = time.monotonic() + 30
    while db.execute(q).fetchone()[0] < 40 and time.monotonic() < end:
        time.sleep(0.02)
    db.close()
p.kill()
print("child", p.wait())
"""


def test_a_worker_killed_by_sigkill_keeps_its_spans_and_reads_killed(store, tmp_path):
    (tmp_path / "killer.py").write_text(KILLED)
    r = run_cli(["run", "--json", "-t", "__main__.tick", "--", sys.executable, str(tmp_path / "killer.py"), "--flushed"],
                store, cwd=tmp_path)
    s = _summary(r)
    assert "child -9" in r.stdout
    (child,) = [p for p in s["processes"] if p["how"] == "exec"]
    assert child["status"] == "killed" and child["span_count"] == 40


def test_no_children_records_the_top_program_only(store, tmp_path):
    (tmp_path / "killer.py").write_text(KILLED)  # (killed at once: nothing of the child's is waited for)
    r = run_cli(["run", "--json", "--no-children", "-t", "__main__.tick", "--", sys.executable,
                 str(tmp_path / "killer.py")], store, cwd=tmp_path)
    s = _summary(r)
    assert s["processes"] == [] and s["span_count"] == 0
    assert s["unresolved"]  # nothing in the top program defines tick: no process could trace it


def test_subprocess_statuses_and_one_clock(store, tmp_path):
    """Exit codes and signals of processes the program starts, each in the process table; their spans lie inside
    the top run's window on the one clock."""
    prog = textwrap.dedent("""\
        import subprocess, sys
        def work():
            return 1
        work()
        code = "import sys\\ndef work():\\n    return 2\\nwork()\\nsys.exit(3)"
        print(subprocess.run([sys.executable, "-c", code]).returncode)
        print(subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]).returncode)
        work()
    """)
    (tmp_path / "p.py").write_text(prog)
    r = run_cli(["run", "--json", "-t", "__main__.work", "--", sys.executable, str(tmp_path / "p.py")], store,
                cwd=tmp_path)
    s = _summary(r)
    assert r.stdout.startswith("3\n-15\n")
    kids = s["processes"][1:]
    assert [(p["status"], p["exit_code"]) for p in kids] == [("error", 3), ("terminated", -15)]
    assert {x["name"]: x["count"] for x in s["spans"]}["__main__.work"] == 3
    from stepscope.store import Store
    from stepscope.store.reader import load_run

    st = Store(store)
    try:
        data = load_run(st)
    finally:
        st.close()
    work = [sp for sp in data.spans if sp.name == "__main__.work"]
    assert len({sp.thread_id for sp in work}) == 2  # the top's main thread and the child's (renumbered)
    assert all(data.run.start_ns <= sp.start_ns <= sp.end_ns <= data.run.end_ns for sp in work)
    assert [sp.start_ns for sp in work] == sorted(sp.start_ns for sp in work)


POOLS = """\
import multiprocessing as mp, sys

def f(x):
    return x + 1

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    for i in range(int(sys.argv[2])):
        with ctx.Pool(4) as p:  # one task: the other workers are still starting when terminate() sends SIGTERM
            p.map(f, [1])
    print("ok")
"""


@pytest.mark.parametrize("method,rounds", [("fork", 40), ("spawn", 6)])
def test_pools_terminated_as_their_workers_start_end(store, tmp_path, method, rounds):
    """Pool.terminate() right after one task: SIGTERM reaches workers that are starting under stepscope (a forked
    child's session, a new interpreter's launcher) or blocked in a queue's semaphore. Each must write its run and
    die; before StopWatch about one run in two hung for good (the signal taken by the C handler just before the
    worker's main thread blocked in sem_wait)."""
    (tmp_path / "pools.py").write_text(POOLS)
    r = run_cli(["run", "--json", "--", sys.executable, str(tmp_path / "pools.py"), method, str(rounds)], store,
                cwd=tmp_path, timeout=240)
    s = _summary(r)
    assert r.stdout.startswith("ok\n")
    workers = [p for p in s["processes"] if p["how"] == ("fork" if method == "fork" else "exec")
               and "resource_tracker" not in " ".join(p["command"])]
    # every forked worker is a process of the run (its session starts in the fork); a new interpreter terminated
    # before it ran the launcher is not (it died at its start, recording nothing), the one that ran the task is
    assert len(workers) >= 4 * rounds - 1 if method == "fork" else rounds <= len(workers) <= 4 * rounds, len(workers)
    # (a worker terminated in its first milliseconds, before its first write, reads "killed": known, see the note in
    # docs/processes.md; on a loaded machine most spawn workers of such a pool can be)
    status = [p["status"] for p in workers]
    assert set(status) <= {"ok", "terminated", "killed"}, set(status)
    assert any(x in ("ok", "terminated") for x in status), status  # (the test's point: no worker hangs)


C10D_PROG = """\
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="FREE_PORT")
dist.init_process_group("gloo", rank=0, world_size=1)
t = torch.ones(1000)
dist.all_reduce(t)
dist.all_gather([torch.zeros(10)], torch.ones(10))
dist.barrier()
print(float(t.sum()))
dist.destroy_process_group()
"""


def test_collectives_are_spans_with_their_bytes_and_group(store, tmp_path):
    import socket

    with socket.socket() as s:  # a free port for the one-rank group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "c10d.py").write_text(C10D_PROG.replace("FREE_PORT", str(port)))
    r = run_cli(["run", "-q", "--", sys.executable, str(tmp_path / "c10d.py")], store, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1000.0\n"
    from stepscope.store import Store
    from stepscope.store.reader import load_run

    st = Store(store)
    try:
        spans = {s.name.rsplit(".", 1)[-1]: s for s in load_run(st).spans if s.op == "collective"}
    finally:
        st.close()
    assert set(spans) == {"all_reduce", "all_gather", "barrier"}  # traced though not named
    assert spans["all_reduce"].attrs["collective.bytes"] == 4000 and spans["all_reduce"].attrs["collective.group"] == "WORLD"
    assert spans["all_gather"].attrs["collective.bytes"] == 40
