"""`stepscope run --server` on an unmodified long-running app, captured by the pid a user has (issue 27): the
ready line, `--pid` of `stepscope run`, of the app or of a parent shell, the app named in messages and runs, a
span still running when the window ends kept and cut there, the py-spy fallback below `stepscope run`."""

import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import PROGRAMS, cli_env, process_ended, run_cli, wait_until

from stepscope.core import procs
from stepscope.store import Store
from stepscope.store.reader import load_run

NODEAPP = PROGRAMS / "nodeapp"
UNET = "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel.forward"
READY = re.compile(r"stepscope: serving (.+) \(pid (\d+)\) for capture: stepscope capture --pid (\d+) --duration 10s")


def serving_lines(path: Path) -> list[str]:
    """The ready lines of ``stepscope run --server`` in a stderr file."""
    return [ln for ln in path.read_text().splitlines() if ln.startswith("stepscope: serving")] if path.exists() else []


def capture_cli(pid: int, env: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepscope", "capture", "--pid", str(pid), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def nodeapp(tmp_path_factory):
    """The node-graph app under `sh -c 'stepscope run --server -- python -m nodeapp.main PORTFILE; :'` (the shell
    stays its parent), with client.py sending requests until the module's tests are done."""
    for mod in ("diffusers", "uvicorn", "starlette"):
        pytest.importorskip(mod)
    tmp = tmp_path_factory.mktemp("nodeapp")
    store = tmp / "store"
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp / "rt")
    env["PYTHONPATH"] = os.pathsep.join([str(NODEAPP), env["PYTHONPATH"]])
    portfile, err = tmp / "port", tmp / "stderr"
    py = shlex.quote(sys.executable)
    script = f"{py} -m stepscope run --server -- {py} -m nodeapp.main {shlex.quote(str(portfile))}; :"
    with open(err, "w") as ef, open(tmp / "stdout", "w") as of:
        sh = subprocess.Popen(["sh", "-c", script], env=env, stdout=of, stderr=ef, cwd=NODEAPP, start_new_session=True)
    client = None
    try:
        line = wait_until(lambda: serving_lines(err), 120, "the ready line of stepscope run --server")[0]
        m = READY.fullmatch(line)
        assert m, line
        app_pid, run_pid = int(m.group(2)), int(m.group(3))
        # (the app's models are built before it writes its port file: the UNet's module is imported from then on)
        wait_until(portfile.exists, 300, "the app to serve (its port file)")
        client = subprocess.Popen([sys.executable, str(NODEAPP / "client.py"), str(portfile), "100000", "--gap", "0.05"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield SimpleNamespace(sh=sh.pid, run=run_pid, app=app_pid, label=m.group(1), env=env, store=store, err=err,
                              portfile=portfile)
    finally:
        if client is not None:
            client.kill()
            client.wait(30)
        try:
            port = portfile.read_text().strip()
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/shutdown", data=b"", method="POST"),
                                   timeout=30).read()
            sh.wait(60)
        except Exception:
            pass
        if sh.poll() is None:
            os.killpg(sh.pid, signal.SIGKILL)
            sh.wait(30)


def test_ready_line_names_the_app_and_the_pid_to_capture(nodeapp):
    lines = nodeapp.err.read_text().splitlines()
    # first on stderr: printed once the server accepts captures, before the program's code runs (its imports warn)
    assert READY.fullmatch(lines[0]) and len(serving_lines(nodeapp.err)) == 1
    assert nodeapp.label.startswith("nodeapp.main ")  # the app's module and arguments, not stepscope's launcher
    assert nodeapp.label == procs.app_label([sys.executable, "-m", "nodeapp.main", str(nodeapp.portfile)], 60)
    assert procs.parent(nodeapp.run) == nodeapp.sh and procs.parent(nodeapp.app) == nodeapp.run
    assert (Path(nodeapp.env["STEPSCOPE_RUNTIME_DIR"]) / f"{nodeapp.app}.json").exists()


@pytest.mark.parametrize("who", ["stepscope run", "app", "parent shell"])
def test_capture_by_the_pid_a_user_has(nodeapp, who):
    pid = {"stepscope run": nodeapp.run, "app": nodeapp.app, "parent shell": nodeapp.sh}[who]
    r = capture_cli(pid, nodeapp.env, "--steps", "2", "--span", "UNet2DConditionModel.forward", "--trace", UNET)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    below = "" if who == "app" else f", below pid {pid}"
    assert lines[0] == f"capturing {nodeapp.label} (pid {nodeapp.app}{below})..."
    run_id = re.fullmatch(r"recording run (\S+)", lines[1]).group(1)
    assert lines[2].startswith(f"stepscope capture {run_id} of nodeapp.main ") and f"(pid {nodeapp.app})" in lines[2]
    # a capture window has no start-up: the time before the first traced call is the app idle or serving
    assert lines[3].startswith("before the first traced call ") and "(the app idle or serving)" in lines[3]
    assert "start-up" not in r.stderr and "imports, model building" not in r.stderr
    data = load_run(Store(nodeapp.store), run_id)
    whole = [s for s in data.spans if s.name == UNET and not s.attrs.get("stepscope.cut")]
    assert len(whole) >= 2 and all("diffusion.step" in s.attrs for s in whole)
    assert data.run.command[1:3] == ["-m", "nodeapp.main"]  # the app's command: stepscope's launcher left out
    assert data.run.settings["extra"]["capture"]["pid"] == nodeapp.app


def _server_only(tmp_path, env, *extra, name="ctl"):
    d = tmp_path / name
    d.mkdir()
    err = tmp_path / f"{name}.err"
    with open(err, "w") as ef:
        p = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "--server", *extra, "--", sys.executable,
                              str(PROGRAMS / "capture_cut.py"), str(d)], env=env, stdout=subprocess.PIPE, stderr=ef,
                             text=True, cwd=tmp_path)
    return p, d, err


def _end(p, d):
    for f in ("release", "stop"):
        (d / f).touch()
    try:
        return p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_span_still_running_when_the_window_ends_is_cut_there(tmp_path, store):
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    p, d, err = _server_only(tmp_path, env)
    try:
        assert p.stdout.readline() == "up\n"
        line = wait_until(lambda: serving_lines(err), 60, "the ready line")[0]
        assert READY.fullmatch(line).group(3) == str(p.pid)
        cap_err = tmp_path / "capture.err"
        with open(cap_err, "w") as ef:
            cap = subprocess.Popen([sys.executable, "-m", "stepscope", "capture", "--pid", str(p.pid), "--duration", "3s",
                                    "--trace", "__main__.long_call"], env=env, stdout=subprocess.DEVNULL, stderr=ef,
                                   text=True)
        wait_until(lambda: "recording run" in cap_err.read_text(), 60, "the capture window to open")
        (d / "trigger").touch()  # the long call starts inside the window and runs on after it (until "release")
        wait_until((d / "started").exists, 60, "long_call to start")
        assert cap.wait(120) == 0, cap_err.read_text()
        assert not (d / "release").exists()
    finally:
        out = _end(p, d)
    assert out == "done\n" and p.returncode == 0
    text = cap_err.read_text()
    run_id = re.search(r"recording run (\S+)", text).group(1)
    assert re.search(rf"stepscope capture {run_id} of \S*capture_cut\.py .* 1 spans ", text)
    assert "1 span was still running when the window ended: cut at its end" in text
    data = load_run(Store(store), run_id)
    [span] = [s for s in data.spans if s.name == "__main__.long_call"]
    assert span.attrs["stepscope.cut"] is True and span.status == "ok"
    # cut at the window's end (3 s after it opened), not when the call returned (after the capture)
    assert data.run.start_ns < span.start_ns < span.end_ns <= data.run.end_ns
    assert span.end_ns - data.run.start_ns >= 2.9e9


def test_quiet_server_prints_no_ready_line(tmp_path, store):
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    p, d, err = _server_only(tmp_path, env, "-q")
    try:
        assert p.stdout.readline() == "up\n"
        wait_until(lambda: list((tmp_path / "rt").glob("*.json")), 60, "the server's token file")
    finally:
        out = _end(p, d)
    assert out == "done\n" and p.returncode == 0 and serving_lines(err) == []


def test_several_servers_under_one_parent_are_named(tmp_path, store):
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    dirs = [tmp_path / "a", tmp_path / "b"]
    for x in dirs:
        x.mkdir()
    py = shlex.quote(sys.executable)
    script = " & ".join(f"{py} -m stepscope run --server -q -- {py} {shlex.quote(str(PROGRAMS / 'capture_cut.py'))} "
                        f"{shlex.quote(str(x))}" for x in dirs) + " & wait"
    sh = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    try:
        files = wait_until(lambda: (lambda f: f if len(f) == 2 else None)(sorted((tmp_path / "rt").glob("*.json"))), 60,
                           "both servers' token files")
        apps = sorted(int(f.stem) for f in files)
        r = capture_cli(sh.pid, env, "--duration", "1s")
        assert r.returncode == 2
        labels = [f"{a} ({procs.label_of(a, 60)})" for a in apps]
        assert r.stderr.strip() == (f"stepscope: error: several programs under pid {sh.pid} run a stepscope control "
                                    f"server: {', '.join(labels)}; give one of them with --pid")
        assert all("capture_cut.py" in x for x in labels)
    finally:
        for x in dirs:
            (x / "stop").touch()
        try:
            sh.wait(60)
        finally:
            if sh.poll() is None:
                os.killpg(sh.pid, signal.SIGKILL)
                sh.wait(10)


def test_py_spy_below_stepscope_run_names_the_app(tmp_path, store):
    from stepscope.program.pyspy import pyspy_path

    if pyspy_path() is None:
        pytest.skip("py-spy not installed")
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    prog = tmp_path / "busy.py"
    stop = tmp_path / "stop"
    prog.write_text(f"import os\ndef busy():\n    while not os.path.exists({str(stop)!r}):\n        sum(range(1000))\n"
                    "print('busy', flush=True)\nbusy()\n")
    # recorded by `stepscope run` itself, no control server: capture by its pid samples the program below it
    p = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "-q", "--hz", "0", "--", sys.executable, str(prog)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        assert p.stdout.readline() == "busy\n"
        app = next(c for c in procs.descendants(p.pid) if procs.runs_launcher(procs.cmdline(c)))
        r = capture_cli(p.pid, env, "--duration", "1s", timeout=120)
        if r.returncode == 2 and "ptrace" in r.stderr:
            pytest.skip(r.stderr.strip())
        assert r.returncode == 0, r.stderr
        lines = r.stderr.splitlines()
        assert lines[0] == f"sampling {prog} (pid {app}, below pid {p.pid}) with py-spy for 1 s: it runs no stepscope server..."
        assert re.match(rf"stepscope capture \S+ of {re.escape(str(prog))} \(pid {app}\) ", lines[1])
        assert "busy" in r.stderr
        steps = capture_cli(p.pid, env, "--steps", "2", "--span", "a.b.c")
        assert steps.returncode == 2 and steps.stderr.strip() == (
            f"stepscope: error: process {app} ({prog}) started no stepscope server: --steps and --device-trace need one "
            "(`stepscope run --server`); py-spy takes --duration")
    finally:
        stop.touch()
        p.wait(60)
    runs = Store(store).list_runs()
    captured = next(r for r in runs if r.settings.get("extra", {}).get("capture"))
    assert captured.command == [sys.executable, str(prog)]  # the program's command: stepscope's launcher left out
    assert process_ended(app)


def test_report_of_a_capture_names_its_phases_and_cut_spans(browser_page, tmp_path, store):
    """The HTML report of a capture window: no start-up, the app idle or serving before the work; the cut span
    said on the page and in its tooltip text."""
    code = ("import threading, time\nfrom sstargets import funcs\nfrom stepscope.record.session import Session\n"
            "from stepscope.record.settings import Settings\n"
            f"s = Session(Settings(functions_to_trace=('sstargets.funcs.sleep_ms',), store={str(store)!r}, "
            "flush_interval_s=0.2, extra={'capture': {'pid': 1, 'duration_s': 0.5}}), command=['python', 'app.py'], "
            "cut_open=True).start()\n"
            "time.sleep(0.2)\nfuncs.sleep_ms(50)\n"
            "threading.Thread(target=funcs.sleep_ms, args=(3000,), daemon=True).start()\n"
            "time.sleep(0.3)\ns.finish()\nprint(s.run_id)\n")
    r = subprocess.run([sys.executable, "-c", code], env=cli_env(store), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip()
    rep = run_cli(["report", run_id, "-o", str(tmp_path / "r.html")], store)
    assert rep.returncode == 0, rep.stderr
    page = browser_page
    page.goto((tmp_path / "r.html").as_uri())
    page.wait_for_function("window.stepscopeReport && window.stepscopeReport.frameCount() >= 0")
    assert page.locator("#runinfo").inner_text().startswith("capture of python app.py")
    note = page.locator("#phase-note").inner_text()
    assert note.startswith("Before the first traced call ") and "(the app idle or serving)" in note
    assert "start-up" not in note and note.endswith("1 span was still running when the window ended: cut at its end.")
    assert page.errors == []


def test_capture_of_a_launcher_records_every_rank_as_one_run(tmp_path, store):
    """`stepscope run --server -- torchrun --nproc-per-node 2 train_loop.py` starts a control server in every
    process of the job; `stepscope capture --pid` of `stepscope run` records a window of the launcher and both ranks
    at once, read as one run: the processes with their ranks, the steps by rank (those the windows cut left out),
    rank 1 the straggler (slow_augment on every 5th step) and rank 0's wait."""
    pytest.importorskip("torch")
    env = cli_env(store)
    env["STEPSCOPE_RUNTIME_DIR"] = str(tmp_path / "rt")
    stop = tmp_path / "STOP"
    with open(tmp_path / "err", "w") as ef:
        p = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "--server", "--",
                              str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "2",
                              str(PROGRAMS / "ranks" / "train_loop.py"), str(stop)], env=env, stdout=subprocess.PIPE,
                             stderr=ef, text=True, cwd=tmp_path)
    try:
        assert p.stdout.readline() == "up\n"
        wait_until(lambda: len(list((tmp_path / "rt").glob("*.json"))) == 3, 60, "the three servers' token files")
        r = capture_cli(p.pid, env, "--duration", "2s", "--json", "-t", "__main__.train_step", "-t",
                        "__main__.slow_augment")
        assert r.returncode == 0, r.stderr
    finally:
        stop.touch()
        try:
            out = p.communicate(timeout=90)[0]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert p.returncode == 0 and out == "stopped\n"  # (after "up", read above)
    import json

    s = json.loads(r.stdout)["run"]
    procs_ = s["processes"]
    assert len(procs_) == 3 and procs_[0]["how"] == "top"
    assert sorted(x["rank"] for x in procs_[1:]) == [0, 1] and all(x["world_size"] == 2 for x in procs_[1:])
    rs = s["ranks"]
    why = json.dumps({k: rs[k] for k in ("held", "straggler", "lead_ns", "cause", "waited_for")})
    assert rs["name"] == "__main__.train_step" and len(rs["wall"]) >= 5, why
    assert rs["job_straggler"] == 1 and rs["cause"][0][0] == "__main__.slow_augment", why
    assert rs["waited_for"]["0"] > 0.05e9, why  # rank 0 waited for rank 1's 60 ms augmentations
    runs = json.loads(run_cli(["runs", "--json"], store).stdout)["runs"]
    assert [x["id"] for x in runs] == [s["run_id"]]  # the ranks' windows: processes of the one run, not runs of their own
