"""A job's device time rank by rank (``device.ranks``): on the two ranks of a real NCCL job (``../shared/traces/
multirank``) the figures are HTA's, and a torchrun job recorded with ``--device-trace`` shows each rank's trace."""

import json
import os
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PROGRAMS, run_cli

from stepscope.device.ranks import _intersection, _length, _union

MULTIRANK = Path(__file__).resolve().parents[2] / "shared" / "traces" / "multirank"

#: Holistic Trace Analysis 0.5.0 on the same folder (TraceAnalysis(trace_dir=...).get_temporal_breakdown() and
#: .get_comm_comp_overlap()): rank -> (idle us, compute us, non-compute us, kernel time us, comm/comp overlap %)
HTA = {0: (321378.0, 106252.0, 172428.0, 600058.0, 11.81), 1: (328671.0, 135548.0, 136455.0, 600674.0, 20.05)}


def test_interval_unions_and_intersections_against_a_bitmap():
    rng = np.random.default_rng(7)
    for _ in range(200):
        a, b = rng.integers(0, 1000, 25), rng.integers(0, 1000, 18)
        al, bl = rng.integers(1, 90, 25), rng.integers(1, 90, 18)
        ma, mb = np.zeros(1200, bool), np.zeros(1200, bool)
        for s, e in zip(a, a + al):
            ma[s:e] = True
        for s, e in zip(b, b + bl):
            mb[s:e] = True
        ua, ub = _union(a, a + al), _union(b, b + bl)
        assert _length(*ua) == ma.sum() and _intersection(ua, ub) == (ma & mb).sum()


@pytest.mark.skipif(not MULTIRANK.is_dir(), reason="../shared/traces/multirank is not beside this checkout")
def test_per_rank_figures_are_htas(store):
    r = run_cli(["device", str(MULTIRANK), "--json"], store)
    assert r.returncode == 0, r.stderr
    ranks = {x["rank"]: x for x in json.loads(r.stdout)["ranks"]["ranks"]}
    assert set(ranks) == {0, 1}
    for rank, (idle, compute, non_compute, kernel_time, overlap) in HTA.items():
        x = ranks[rank]
        assert abs(x["idle_ns"] / 1e3 - idle) < 1 and abs(x["compute_ns"] / 1e3 - compute) < 1
        assert abs(x["non_compute_ns"] / 1e3 - non_compute) < 1 and abs(x["span_ns"] / 1e3 - kernel_time) < 1
        assert abs(100 * x["overlap_share"] - overlap) < 0.01
        assert x["world_size"] == 128 and x["backend"] == "nccl"
    r = run_cli(["device", str(MULTIRANK)], store)
    assert r.returncode == 0, r.stderr
    assert "Device time by rank" in r.stdout and "53.6%" in r.stdout and "most idle: rank 1" in r.stdout


def test_a_torchrun_job_with_device_trace_has_each_ranks_timeline(store, tmp_path):
    pytest.importorskip("torch")
    torchrun = Path(sys.executable).parent / "torchrun"
    r = run_cli(["run", "-q", "--device-trace", "-t", "__main__.train_step", "--", str(torchrun), "--standalone",
                 "--nproc-per-node", "2", str(PROGRAMS / "ranks" / "train.py"), "3"], store, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli(["device", "--json"], store)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ranks = doc["ranks"]["ranks"]
    assert [x["rank"] for x in ranks] == [0, 1] and all(x["label"].startswith(f"rank {x['rank']} (pid ") for x in ranks)
    assert doc["ranks"]["notes"] == ["no device activity in these traces (a CPU run: no kernels)"]
    # one waterfall: the report's device lanes are every rank's, on the run's clock, under the rank's label
    from stepscope.device.view import device_view
    from stepscope.output.html.view import build_view
    from stepscope.store.db import Store
    from stepscope.store.reader import load_run

    st = Store(store)
    try:
        data = load_run(st)
        dv = device_view(st, data.run.id, data)
        view = build_view(data, device=dv)
    finally:
        st.close()
    lanes = view["device"]["lanes"]
    labels = [x["label"] for x in lanes]
    assert sorted(x.rank for x in dv.processes) == [0, 1]  # (in start order)
    for p in dv.processes:
        assert f"{p.label} · torch ops (host)" in labels, labels
    steps = {x.name for x in data.spans}
    assert "__main__.train_step" in steps
    for lane in lanes:  # inside the job's time span (the run's clock, ms from its start)
        assert lane["start"] and min(lane["start"]) >= 0 and max(a + b for a, b in zip(lane["start"], lane["dur"])) <= \
            (data.run.end_ns - data.run.start_ns) / 1e3


def test_groups_destroyed_under_the_profiler_outlive_the_ddp_model(store, tmp_path):
    """With --device-trace, destroy_process_group's groups are kept to the session's end, so freeing a DDP model
    afterwards does not destroy the group (joining gloo workers that may wait for the GIL: tracing/collectives.py;
    under the profiler alone, freeing the model ends the group's threads)."""
    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    os.environ.update(env)
    try:
        r = run_cli(["run", "-q", "--device-trace", "--", sys.executable, str(PROGRAMS / "ranks" / "teardown.py")],
                    store, cwd=tmp_path)
    finally:
        for k in env:
            del os.environ[k]
    assert r.returncode == 0, r.stderr
    before, after = (int(x) for x in r.stdout.split()[1:3])
    assert after == before, r.stdout  # the group (and its gloo threads) still alive
    from stepscope.store.db import Store
    from stepscope.store.reader import load_run

    st = Store(store)
    try:
        names = [x.name for x in load_run(st).spans]
    finally:
        st.close()
    assert "torch.distributed.distributed_c10d.destroy_process_group" in names
