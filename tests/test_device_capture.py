"""`stepscope run --device-trace` / `--syncs` on the tiny SD pipeline with the Euler scheduler, whose
step finds its index with `.nonzero()` and `.item()`."""

import json
import sys

import pytest
from conftest import PROGRAMS, run_cli

from stepscope.device.kineto import load
from stepscope.device.runview import clock_map
from stepscope.store import Store

pytest.importorskip("diffusers")
EULER = "diffusers.schedulers.scheduling_euler_discrete.EulerDiscreteScheduler.step"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"


@pytest.fixture(scope="module")
def euler_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("euler") / "store"
    r = run_cli(["run", "-q", "--device-trace", "--trace", UNET, "--trace", EULER, "--", sys.executable,
                 str(PROGRAMS / "sd_slow_steps.py"), "--steps", "4", "--slow", "", "--scheduler", "euler"], store)
    assert r.returncode == 0, r.stderr
    assert "image (64, 64)" in r.stdout
    return store


def test_trace_is_stored_and_rebased(euler_run):
    st = Store(euler_run)
    data = st.load()
    trace = load(st.path / "runs" / data.run.id / "device_trace.json.gz")
    cmap = clock_map(trace)
    assert len(cmap.at) >= 2
    # the UNet spans land on the trace where their aten ops run
    unet = [s for s in data.spans if s.name == UNET][1]
    a, b = int(cmap.to_trace(unet.start_ns)), int(cmap.to_trace(unet.end_ns))
    conv = [i for i in range(len(trace)) if trace.name_of(i) == "aten::convolution" and a <= trace.ts[i] < b]
    assert len(conv) > 10


def test_euler_syncs_found_with_their_python_line(euler_run):
    r = run_cli(["device", "--json"], euler_run)
    assert r.returncode == 0, r.stderr
    dev = json.loads(r.stdout)["device"]
    sites = {(s["kind"], s["function"]) for s in dev["sync_sites"]}
    assert (".nonzero()", "EulerDiscreteScheduler.index_for_timestep") in sites
    assert (".item()", "EulerDiscreteScheduler.index_for_timestep") in sites
    syncs = dev["summary"]["syncs"]
    nz = [s for s in syncs if s["name"] == "aten::nonzero"]
    assert nz and nz[0]["python"].startswith("scheduling_euler_discrete.py:") and "index_for_timestep" in nz[0]["python"]
    in_step = [s for s in syncs if s["annotation"] == EULER]
    assert in_step and all(s["python"] for s in in_step)
    spans = {s["name"]: s for s in dev["spans"]}
    assert spans[UNET]["count"] == 4 and 0 < spans[UNET]["op_ns"] <= spans[UNET]["host_ns"]
    assert spans[UNET]["top_ops"]
    text = run_cli(["device"], euler_run).stdout
    assert "Sync sites" in text and "scheduling_euler_discrete.py:" in text


def test_syncs_without_device_trace(tmp_path):
    store = tmp_path / "store"
    r = run_cli(["run", "-q", "--syncs", "--trace", EULER, "--", sys.executable, str(PROGRAMS / "sd_slow_steps.py"),
                 "--steps", "3", "--slow", "", "--scheduler", "euler"], store)
    assert r.returncode == 0, r.stderr
    dev = json.loads(run_cli(["device", "--json"], store).stdout)["device"]
    assert dev["summary"] is None
    kinds = {s["kind"] for s in dev["sync_sites"]}
    assert {".nonzero()", ".item()", ".__bool__()"} <= kinds
    r = run_cli(["run", "-q", "--", sys.executable, str(PROGRAMS / "behaviour.py")], store)
    r = run_cli(["device"], store)
    assert r.returncode == 2 and "no device trace and no sync sites" in r.stderr
