"""Capture on demand from a long-running service that runs the tiny SD pipeline per request."""

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from conftest import PROGRAMS, cli_env, run_cli, wait_until

from stepscope.analysis.calltree import ProfileIndex
from stepscope.store import Store, StoreError
from stepscope.store.reader import load_run

pytest.importorskip("diffusers")
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"


class Service:
    def __init__(self, tmp_path, store, extra=()):
        self.env = cli_env(store)
        self.env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
        self.proc = subprocess.Popen([sys.executable, str(PROGRAMS / "sd_server.py"), *extra], env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
        self.port = int(self.proc.stdout.readline())
        self.latencies, self.failures = [], 0
        self._stop = threading.Event()

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=60) as r:
            return json.loads(r.read())

    def load(self):
        def loop():
            while not self._stop.is_set():
                t = time.perf_counter()
                try:
                    assert self.get("/gen")["ok"]
                    self.latencies.append(time.perf_counter() - t)
                except Exception:
                    self.failures += 1
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if hasattr(self, "_thread"):
            self._thread.join(60)
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def service(tmp_path, store):
    s = Service(tmp_path, store)
    yield s
    s.stop()


def capture(service, *args, **kw):
    return subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(service.proc.pid), *args],
                          env=service.env, capture_output=True, text=True, timeout=kw.get("timeout", 120))


def test_capture_three_unet_steps_while_serving(service, store):
    service.load()
    wait_until(lambda: service.latencies, 120, "the service to answer a first /gen")  # serving before the window
    r = capture(service, "--steps", "3", "--span", "UNet2DConditionModel.forward", "--trace", UNET, "--hz", "499", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # nothing stays patched: the server unpatches before it answers "done", so this holds at once
    assert service.get("/patched") == {"patched": False}
    n = len(service.latencies)
    wait_until(lambda: len(service.latencies) >= max(3, n + 1), 120, "the service to answer a /gen after the window")
    service.stop()
    assert service.failures == 0 and len(service.latencies) >= 3
    data = load_run(Store(store), doc["run"]["run_id"])
    unets = [s for s in data.spans if s.name == UNET]
    assert len(unets) >= 3 and all(s.end_ns > s.start_ns for s in unets)
    index = ProfileIndex(data.profile)
    assert all(len(index.select(s.start_ns, s.end_ns, s.thread_id)) > 0 for s in unets[:3])  # each has a flame graph
    assert data.run.settings["extra"]["capture"]["steps"] == 3


def test_two_captures_busy_and_bad_token(service, tmp_path, store):
    # the first window is long enough for the second `stepscope capture` to start and ask while it is open,
    # however slow the machine (the first is recording once its run is in the store)
    first = subprocess.Popen([sys.executable, "-m", "stepscope", "capture", "--pid", str(service.proc.pid), "--duration",
                              "10s", "--json"], env=service.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: Store(store, create=False).list_runs(), 60, "the first capture to open its window",
               ignore=(StoreError,))
    second = capture(service, "--duration", "1s")
    assert second.returncode == 2 and "busy" in second.stderr
    assert first.wait(60) == 0
    info_file = tmp_path / "rt" / f"{service.proc.pid}.json"
    assert stat.S_IMODE(info_file.stat().st_mode) == 0o600
    info = json.loads(info_file.read_text())
    with socket.create_connection(("127.0.0.1", info["port"])) as s:
        s.sendall(b'{"token": "guess", "duration_s": 1}\n')
        assert json.loads(s.makefile().readline()) == {"error": "bad token"}


def test_client_that_disconnects_leaves_the_program_unpatched(service, tmp_path):
    info = json.loads((tmp_path / "rt" / f"{service.proc.pid}.json").read_text())
    s = socket.create_connection(("127.0.0.1", info["port"]))
    s.sendall(json.dumps({"token": info["token"], "duration_s": 60, "traces": [UNET]}).encode() + b"\n")
    assert json.loads(s.makefile().readline())["status"] == "recording"
    assert service.get("/patched") == {"patched": True}  # patched before "recording" is sent
    s.close()
    wait_until(lambda: service.get("/patched") == {"patched": False}, 30,
               "the window to end and unpatch once its client disconnected")


def test_process_without_server_is_sampled_with_py_spy(tmp_path, store):
    from stepscope.program.pyspy import pyspy_path

    if pyspy_path() is None:
        pytest.skip("py-spy not installed")
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    proc = subprocess.Popen([sys.executable, "-c", "def busy():\n    while True: sum(range(1000))\nprint('busy', flush=True)\n"
                             "busy()"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "busy\n"  # in its loop from now on
        r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(proc.pid), "--duration", "1s",
                            "--json"], env=env, capture_output=True, text=True, timeout=60)
        if r.returncode == 2 and "ptrace" in r.stderr:
            pytest.skip(r.stderr.strip())
        assert r.returncode == 0, r.stderr
        top = json.loads(r.stdout)["run"]["top_self"]
        assert any("busy" in f["name"] for f in top)
    finally:
        proc.kill()
    r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", "999999", "--duration", "1s"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "stepscope: error: no process 999999"


def test_unmodified_program_under_stepscope_run_server(tmp_path, store):
    prog = tmp_path / "app.py"
    stop = tmp_path / "stop"  # the program works until the test is done with it (not for a fixed time)
    prog.write_text(f"import os, time\nfrom sstargets import funcs\nprint('up', flush=True)\nend = time.monotonic() + 300\n"
                    f"while not os.path.exists({str(stop)!r}) and time.monotonic() < end:\n"
                    "    funcs.outer(50)\n    time.sleep(0.01)\nprint('done')\n")
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    p = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "--server", "--", sys.executable, str(prog)], env=env,
                         stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert p.stdout.readline() == "up\n"
        child = next(int(f.stem) for f in (tmp_path / "rt").glob("*.json"))
        r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(child), "--steps", "5", "--span",
                            "sstargets.funcs.outer", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        stop.touch()
        assert p.stdout.read() == "done\n" and p.wait(60) == 0
    finally:
        stop.touch()
        if p.poll() is None:
            p.kill()
            p.wait(10)
    data = load_run(Store(store), json.loads(r.stdout)["run"]["run_id"])
    assert sum(1 for s in data.spans if s.name == "sstargets.funcs.outer") >= 5
    assert len(Store(store).list_runs()) == 1  # the server-only run itself records nothing
    bad = run_cli(["run", "--server", "--trace", "a.b", "--", sys.executable, str(prog)], store)
    assert bad.returncode == 2 and "--server records nothing itself" in bad.stderr


def test_capture_with_device_trace(service, store):
    service.load()
    wait_until(lambda: service.latencies, 120, "the service to answer a first /gen")
    # 6 steps: more than one request (4 UNet calls each), so some run on a thread started inside the window
    r = capture(service, "--steps", "6", "--span", "UNet2DConditionModel.forward", "--trace", UNET, "--device-trace",
                "--json")
    assert r.returncode == 0, r.stderr
    run_id = json.loads(r.stdout)["run"]["run_id"]
    assert service.get("/patched") == {"patched": False}  # unpatched before the server answered "done"
    service.stop()
    assert service.failures == 0
    dev = json.loads(run_cli(["device", run_id, "--json"], store).stdout)["device"]
    unet = {s["name"]: s for s in dev["spans"]}[UNET]
    assert unet["recorded"] >= 6 and unet["op_ns"] > 0 and unet["flops"] > 0  # the request threads' ops are in the trace


@pytest.fixture
def cfg_worker(tmp_path, store):
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "sd_cfg_worker.py")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    assert proc.stdout.readline().startswith("ready")
    yield proc, env
    proc.kill()
    proc.wait(10)


def test_steps_are_counted_as_the_pipeline_counts_them(cfg_worker, store):
    """Two UNet calls per step (classifier-free guidance unbatched): --steps 3 is 3 whole steps, not 3 calls."""
    proc, env = cfg_worker
    r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(proc.pid), "--steps", "3", "--span",
                        "UNet2DConditionModel.forward", "--trace", UNET, "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = load_run(Store(store), json.loads(r.stdout)["run"]["run_id"])
    calls = {}
    for s in data.spans:
        if s.name == UNET:
            calls.setdefault((s.thread_id, s.attrs["diffusion.step"]), []).append(s)
    assert sum(1 for c in calls.values() if len(c) == 2) >= 3  # three whole steps of two calls each
    assert len(calls) <= 5  # and not much more: a partial step at each end at most


def test_span_the_window_does_not_trace_is_refused(cfg_worker, store):
    proc, env = cfg_worker
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(proc.pid), "--steps", "3", "--span",
                        "UNet2DConditionModel.forward"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and time.monotonic() - t < 60
    assert r.stderr.strip().splitlines() == ["stepscope: error: --span UNet2DConditionModel.forward is not traced in the "
                                             "window: name it in full (pkg.mod.Class.method) or --trace it (e.g. "
                                             "--trace pkg.mod.UNet2DConditionModel.forward)"]
    assert Store(store).list_runs() == []


def test_capture_that_never_completes_times_out(cfg_worker, store):
    """A span that is traced but never called: the window ends at --timeout, stored as such."""
    proc, env = cfg_worker
    vae = "diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL.decode"
    r = subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(proc.pid), "--steps", "1", "--span",
                        "AutoencoderKL.decode", "--trace", vae, "--trace", UNET, "--timeout", "3s"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    run = Store(store).list_runs()[0]
    assert run.status == "timeout" and run.error == "timed out after 3 s: 0 of 1 steps of AutoencoderKL.decode"
    assert r.stderr.strip().splitlines()[-1] == (f"stepscope: error: capture timed out after 3 s with 0 of 1 steps of "
                                                 f"AutoencoderKL.decode; run {run.id} stored as timeout")
    assert run.span_count > 0  # the UNet calls of the window are kept
