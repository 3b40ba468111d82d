"""`stepscope run --device-trace` / `device` / `capture --device-trace` on PyTorch/XLA programs (CPU,
PJRT_DEVICE=CPU): the tiny SD pipeline with the Euler scheduler as the PyTorch/XLA guide found it (the
step index read back with .nonzero()/.item() on every step) and as its fix leaves it; a loop that calls
torch_xla.sync() inside a traced function; a capture made without stepscope."""
import gzip
import inspect
import json
import os
import subprocess
import sys

import pytest
from conftest import EULER, PIPE, PROGRAMS, UNET, env_for, run_cli, run_program, wait_until


def _lines():
    from diffusers import EulerDiscreteScheduler

    src, first = inspect.getsourcelines(EulerDiscreteScheduler.index_for_timestep)
    nz = next(first + k for k, line in enumerate(src) if ".nonzero()" in line)
    item = next(first + k for k, line in enumerate(src) if ".item()" in line)
    return f"scheduling_euler_discrete.py:{nz}", f"scheduling_euler_discrete.py:{item}"


def _device(store, *args):
    r = run_cli(["device", *args, "--json"], store)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _steps(x, labels):
    by = {s["label"]: s for s in x["steps"]}
    assert set(labels) <= set(by), [s["label"] for s in x["steps"]]
    return [by[k] for k in labels]


@pytest.fixture(scope="module")
def guide_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("guide") / "store"
    # not -q: the first screen names the spans left unmirrored (-q prints nothing after the program ends)
    r = run_cli(["run", "--device-trace", "--trace", UNET, "--trace", EULER, "--trace", PIPE, "--",
                 sys.executable, str(PROGRAMS / "xla_sd.py"), "--scheduler", "guide", "--steps", "3"], store)
    assert r.returncode == 0, r.stderr
    assert "image (64, 64, 3)" in r.stdout
    return store, r


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("fixed") / "store"
    r = run_cli(["run", "-q", "--device-trace", "--trace", UNET, "--trace", "__main__.FixedEuler.step", "--trace", PIPE,
                 "--", sys.executable, str(PROGRAMS / "xla_sd.py"), "--scheduler", "fixed", "--steps", "4"], store)
    assert r.returncode == 0, r.stderr
    assert "image (64, 64, 3)" in r.stdout
    return store, r


def test_guide_scheduler_transfers_cut_every_step(guide_run):
    store, _ = guide_run
    x = _device(store)["xla"]
    nz_line, item_line = _lines()
    assert x["step_source"].startswith("denoising steps")
    for s in _steps(x, ["0", "1", "2"]):
        f = s["figures"]
        # the step's graph is broken into smaller parts: each read runs the graph so far
        assert f["executions"] > 1 and f["reads"] >= 1 and f["from_device"] >= 1, s
        assert s["metrics"].get("aten::_local_scalar_dense", 0) >= 1  # each .item()
        assert s["metrics"].get("TransferFromDeviceTime.count", 0) >= 1
    sites = {(t["direction"], t["kind"], t["where"]): t for t in x["transfers"]}
    nz = sites[("from device", ".nonzero()", nz_line)]
    item = sites[("from device", ".item()", item_line)]
    for site in (nz, item):
        assert site["function"] == "EulerDiscreteScheduler.index_for_timestep"
        assert {"0", "1", "2"} <= set(site["steps"]) and site["cost_ns"] > 0 and site["wait_ns"] >= site["cost_ns"]
        assert EULER in site["inside"]
    assert x["total"]["compiles"] >= 3 and x["recompiles"] >= 1  # the index is baked into each step's graph
    spans = {s["name"]: s for s in x["spans"]}
    assert spans[UNET]["calls"] == 3 and spans[EULER]["figures"]["from_device"] >= 6
    assert x["lanes"] and x["lanes"][0]["busy_ns"] > 0
    assert x["gaps"] and any(g["span"] for g in x["gaps"])


def test_guide_text_report_and_mirrored_ranges(guide_run, tmp_path):
    store, r = guide_run
    nz_line, item_line = _lines()
    text = run_cli(["device"], store).stdout
    for want in ("Per step", "Transfers and the Python line that caused them", nz_line, item_line,
                 "torch_xla metrics per step", "aten::_local_scalar_dense"):
        assert want in text, want
    # the spans are xp.Trace ranges in the XLA trace; the pipeline call, which reaches xm.mark_step(), is not
    x = _device(store)["xla"]
    assert "pipeline_stable_diffusion.py:" in x["unmirrored"][PIPE]
    assert "unmirrored:" in r.stderr and "StableDiffusionPipeline.__call__" in r.stderr
    assert "unmirrored:" in text and "StableDiffusionPipeline.__call__" in text
    (trace_file,) = [f for f in (store / "runs").rglob("*.trace.json.gz")]
    names = [e.get("name") for e in json.loads(gzip.decompress(trace_file.read_bytes()))["traceEvents"]]
    assert names.count(UNET) == 3 and names.count(EULER) == 3


def test_fixed_scheduler_one_graph_per_step_no_transfer(fixed_run):
    store, _ = fixed_run
    x = _device(store)["xla"]
    steps = _steps(x, ["0", "1", "2", "3"])
    for s in steps:
        f = s["figures"]
        assert f["executions"] == 1 and f["reads"] == 0 and f["from_device"] == 0, s
    for s in steps[1:]:
        assert s["figures"]["to_device"] == 0, s
    assert s["recompiles"] == 0  # the loop's graph comes from the cache by the last step
    assert not [t for t in x["transfers"] if t["direction"] == "from device" and t["steps"]]


def test_stock_pipeline_with_sync_in_its_loop_runs_unchanged(tmp_path):
    store = tmp_path / "store"
    prog = [str(PROGRAMS / "xla_sd.py"), "--scheduler", "stock", "--steps", "2"]
    plain = run_program(prog, tmp_path)
    assert plain.returncode == 0, plain.stderr
    r = run_cli(["run", "-q", "--device-trace", "--trace", PIPE, "--trace", UNET, "--trace", EULER, "--", sys.executable,
                 *prog], store)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout
    assert "Expecting scope" not in r.stderr
    x = _device(store)["xla"]
    assert PIPE in x["unmirrored"]
    assert len(_steps(x, ["0", "1"])) == 2


def test_traced_function_that_calls_sync_is_left_unmirrored(tmp_path):
    store = tmp_path / "store"
    prog = str(PROGRAMS / "sync_in_span.py")
    by_hand = run_program([prog, "--label-by-hand"], tmp_path)  # what a label around a sync does by hand
    assert by_hand.returncode != 0 and "Expecting scope to be empty" in by_hand.stderr
    plain = run_program([prog], tmp_path)
    assert plain.returncode == 0, plain.stderr
    r = run_cli(["run", "--device-trace", "--trace", "__main__.train_step", "--", sys.executable, prog], store)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout
    assert "unmirrored: __main__.train_step: not mirrored as an xp.Trace range" in " ".join(r.stderr.split())
    quiet = run_cli(["run", "-q", "--device-trace", "--trace", "__main__.train_step", "--", sys.executable, prog],
                    tmp_path / "quiet")
    assert quiet.returncode == 0 and quiet.stdout == plain.stdout and quiet.stderr == plain.stderr, quiet.stderr
    x = _device(store)["xla"]
    line = next(n for n, text in enumerate(open(prog).read().splitlines(), 1) if "torch_xla.sync()" in text)
    assert f"sync_in_span.py:{line}" in x["unmirrored"]["__main__.train_step"]
    (trace_file,) = list((store / "runs").rglob("*.trace.json.gz"))
    names = [e.get("name") for e in json.loads(gzip.decompress(trace_file.read_bytes()))["traceEvents"]]
    assert names.count("__main__.train_step") == 1  # the first call's host range only; later calls unmirrored
    assert x["total"]["executions"] >= 3


def test_capture_made_without_stepscope(tmp_path):
    out = tmp_path / "prof"
    r = run_program([str(PROGRAMS / "own_trace.py"), str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    (folder,) = list((out / "plugins" / "profile").iterdir())
    store = tmp_path / "store"
    for target in (str(folder) + "/", str(out), str(next(folder.glob("*.trace.json.gz")))):
        x = _device(store, target)["xla"]
        assert x["step_source"].startswith("step markers")
        steps = _steps(x, ["sync 1", "sync 2", "sync 3", "sync 4"])
        for s in steps:
            f = s["figures"]
            assert f["executions"] >= 2 and f["reads"] >= 1 and f["from_device"] >= 1, s
        spans = {s["name"]: s for s in x["spans"]}
        assert spans["denoise"]["calls"] == 4 and spans["denoise"]["figures"]["from_device"] >= 4
        assert any(t["direction"] == "from device" and t["inside"] == ["denoise"] for t in x["transfers"])
    text = run_cli(["device", str(folder)], store)
    assert text.returncode == 0 and "Per step (step markers" in text.stdout and "denoise" in text.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = run_cli(["device", str(empty) + "/"], store)
    assert bad.returncode == 2 and "no <host>.trace.json.gz" in bad.stderr and "Traceback" not in bad.stderr


def test_capture_pid_with_device_trace(tmp_path):
    store = tmp_path / "store"
    env = env_for(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    progress = tmp_path / "images"
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "xla_server.py"), str(progress)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        assert proc.stdout.readline().startswith("ready")
        r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(proc.pid), "--steps", "3", "--span",
                            "UNet2DConditionModel.forward", "--trace", UNET, "--device-trace", "--json"], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        run_id = json.loads(r.stdout)["run"]["run_id"]
        # the program runs on: it makes another whole image after the window closed
        done = int(progress.read_text())

        def made_another() -> bool:
            assert proc.poll() is None, f"the program ended after the capture (exit status {proc.returncode})"
            return int(progress.read_text()) > done

        wait_until(made_another, 300, "the program to make another image after the capture")
    finally:
        proc.kill()
        proc.wait(30)
    x = _device(store, run_id)["xla"]
    spans = {s["name"]: s for s in x["spans"]}
    assert spans[UNET]["calls"] >= 3
    full = [s for s in x["steps"] if s["label"] != "outside steps" and s["figures"]["executions"]]
    assert len(full) >= 2 and all(s["figures"]["executions"] == 1 and s["figures"]["from_device"] == 0 for s in full)
    assert any(os.path.basename(f).endswith(".trace.json.gz") for f in map(str, (store / "runs" / run_id).rglob("*")))


def test_program_that_records_its_own_profile_under_device_trace(tmp_path):
    """One profiler session per process: stepscope's ends where the program opens its own, whose capture
    is then as without stepscope."""
    store = tmp_path / "store"
    out = tmp_path / "own"
    r = run_cli(["run", "-q", "--device-trace", "--trace", "__main__.step", "--", sys.executable,
                 str(PROGRAMS / "own_trace.py"), str(out)], store)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("done") and "Another profiling session" not in r.stderr
    (folder,) = list((out / "plugins" / "profile").iterdir())
    x = _device(store, str(folder))["xla"]
    assert len([s for s in x["steps"] if s["label"].startswith("sync ")]) == 4
    assert {s["name"] for s in x["spans"]} == {"denoise"}  # the program's labels only
    mine = _device(store)["xla"]
    assert "the program started its own XLA profiler session (at own_trace.py:" in mine["metrics_error"]
