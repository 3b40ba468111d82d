"""`stepscope run --device-trace` / `--syncs` on the tiny SD pipeline with the Euler scheduler, whose
step finds its index with `.nonzero()` and `.item()`."""

import json
import os
import subprocess
import sys

import pytest
from conftest import PROGRAMS, cli_env, run_cli, with_span_objects

from stepscope.device.kineto import CAT, load
from stepscope.device.runview import clock_map
from stepscope.store import Store
from stepscope.store.reader import load_run

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
    data = load_run(st)
    trace = load(st.path / "runs" / data.run.id / "device_trace.json.gz")
    cmap = clock_map(trace)
    assert len(cmap.at) >= 2
    # the UNet spans land on the trace where their aten ops run
    unet = [s for s in data.spans if s.name == UNET][1]
    a, b = int(cmap.to_trace(unet.start_ns)), int(cmap.to_trace(unet.end_ns))
    conv = [i for i in range(len(trace)) if trace.name_of(i) == "aten::convolution" and a <= trace.ts[i] < b]
    assert len(conv) > 10
    # every traced call is mirrored into the trace as a record_function range
    mirrored = [i for i in range(len(trace)) if trace.name_of(i) == UNET and trace.cat[i] == CAT["user_annotation"]]
    assert len(mirrored) == 4


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
    assert r.returncode == 2 and "no device trace, sync sites or compile report" in r.stderr


def test_flops_per_span_against_measured_peak(euler_run):
    dev = json.loads(run_cli(["device", "--json"], euler_run).stdout)["device"]
    assert dev["peak"]["device"] == "cpu" and dev["peak"]["peak_flops"] > 1e9
    unet = {s["name"]: s for s in dev["spans"]}[UNET]
    assert unet["flops"] > 1e8  # convolutions and matmuls of 4 tiny-UNet forwards
    assert 0 < unet["of_peak"] < 1.5
    # the share is of the peak of the ops' own dtype (a float16 UNet on a GPU: the float16 peak)
    assert dev["peak"]["peaks"]["float32"] == dev["peak"]["peak_flops"]
    assert unet["peak_dtype"] == "float32" and unet["flops_by_dtype"] == {"float32": unet["flops"]}
    assert abs(unet["of_peak"] - unet["achieved_flops_s"] / dev["peak"]["peaks"]["float32"]) < 1e-9


def test_share_of_peak_is_per_dtype():
    from stepscope.device.flops import op_dtype

    assert op_dtype({"Input type": ["c10::Half", "c10::Half", "Scalar"]}) == "float16"
    assert op_dtype({"Input type": ["", "c10::BFloat16"]}) == "bfloat16"
    assert op_dtype({"Input type": ["float"]}) == "float32"
    assert op_dtype({"Input type": ["Scalar"]}) is None and op_dtype({}) is None


def test_compile_report_lists_graph_breaks_and_recompiles(tmp_path):
    store = tmp_path / "store"
    prog = str(PROGRAMS / "compile_breaks.py")
    plain = subprocess.run([sys.executable, prog], capture_output=True, text=True, env=cli_env(store))
    r = run_cli(["run", "-q", "--compile-report", "--", sys.executable, prog], store)
    assert r.returncode == 0 and r.stdout == plain.stdout and r.stderr == plain.stderr
    dev = json.loads(run_cli(["device", "--json"], store).stdout)["device"]
    breaks = [(os.path.basename(g["file"]), g["line"]) for g in dev["compile"]["graph_breaks"]]
    assert breaks == [("compile_breaks.py", 8), ("compile_breaks.py", 9)]
    assert "Data-dependent branching" in dev["compile"]["graph_breaks"][0]["reason"]
    assert len(dev["compile"]["recompiles"]) == 4
    assert any("size mismatch" in x["reason"] for x in dev["compile"]["recompiles"])


def test_traced_functions_cause_no_graph_break_under_torch_compile(tmp_path):
    store = tmp_path / "store"
    r = run_cli(["run", "-q", "--compile-report", "--trace", UNET, "--", sys.executable, "-m",
                 "stepscope.pipelines.demo_program", "--steps", "2", "--compile", "eager"], store)
    assert r.returncode == 0, r.stderr
    assert "Dynamo does not know how to trace" not in r.stderr
    dev = json.loads(run_cli(["device", "--json"], store).stdout)["device"]
    assert not [g for g in dev["compile"]["graph_breaks"] if "stepscope" in g["file"]]
    data = load_run(Store(store))
    # the compiled forward runs as a graph: reported as such, never silently dropped
    assert data.run.unresolved[UNET].startswith("inside a compiled region: timed as part of"), data.run.unresolved
    assert "compiled:" not in r.stderr  # -q: the note is the first screen's, never printed under -q


def test_chrome_export_holds_spans_and_device_events_on_one_clock(euler_run, tmp_path):
    out = tmp_path / "t.json"
    r = run_cli(["export", "--format", "chrome", "-o", str(out)], euler_run)
    assert r.returncode == 0, r.stderr
    ev = json.loads(out.read_text())["traceEvents"]
    spans = [e for e in ev if e.get("ph") == "X" and e.get("name") == "UNet2DConditionModel.forward" and e["cat"] == "function"]
    mirrored = [e for e in ev if e.get("ph") == "X" and e.get("name") == UNET and e["cat"] == "user_annotation"]
    assert len(spans) == len(mirrored) == 4
    # the mirrored range and the span start within a millisecond of each other once rebased
    for a, b in zip(sorted(s["ts"] for s in spans), sorted(m["ts"] for m in mirrored)):
        assert abs(a - b) < 1000
    assert any(e.get("cat") == "cpu_op" for e in ev)


def test_run_view_on_the_span_columns_is_the_object_view(tmp_path):
    """`stepscope device RUN` loads the run as span columns: only the spans that overlap the device trace's window
    become objects (a long run's other spans are counted on the columns). The view is the one built from Span
    objects, sync sites (--syncs) and calls outside the recorded steps included."""
    import dataclasses

    from stepscope.device.runview import run_device

    store = tmp_path / "store"
    r = run_cli(["run", "-q", "--device-trace", "--device-steps", "2", "--syncs", "--trace", UNET, "--trace", EULER,
                 "--", sys.executable, str(PROGRAMS / "sd_slow_steps.py"), "--steps", "5", "--slow", "",
                 "--scheduler", "euler"], store)
    assert r.returncode == 0, r.stderr
    st = Store(store)
    try:
        objs, cols = with_span_objects(st, load_run(st)), load_run(st)
        trace = load(st.path / "runs" / objs.run.id / "device_trace.json.gz")
        a, b = run_device(objs, trace), run_device(cols, load(st.path / "runs" / objs.run.id / "device_trace.json.gz"))
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        unet = next(s for s in a.spans if s.name == UNET)
        assert unet.count == 5 and 0 < unet.recorded < 5  # every call counted, the recorded steps joined
        assert a.sync_sites and any(s.annotation for s in a.summary.syncs)
    finally:
        st.close()



TORCH_PROG = """\
import os, sys, torch

def f(i):
    return float(torch.ones(8).mul(i).sum())

print([f(i) for i in range(4)])
print("KINETO_LOG_LEVEL" in os.environ, file=sys.stderr)
"""


@pytest.mark.parametrize("steps", [[], ["--device-steps", "2"]])
def test_device_trace_writes_nothing_into_the_programs_output(tmp_path, steps):
    """Kineto (torch 2.13) writes "USDT:"/"STAGE:" lines on stderr at each start and stop unless its log level is
    raised before it first starts: with --device-trace the program's stdout and stderr are as without stepscope, and
    its environment has no KINETO_LOG_LEVEL of stepscope's."""
    prog = tmp_path / "prog.py"
    prog.write_text(TORCH_PROG)
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    plain = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env, timeout=120)
    r = run_cli(["run", "-q", "--device-trace", *steps, "-t", "__main__.f", "--", sys.executable, str(prog)],
                tmp_path / "store", cwd=tmp_path)
    assert r.returncode == plain.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == (plain.stdout, plain.stderr) == ("[0.0, 8.0, 16.0, 24.0]\n", "False\n")
