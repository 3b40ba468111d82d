"""Issue 12: never lose a run, never hurt the program. Signals, SIGKILL, flushes, a full disk, user errors,
results for scripts. Every test runs the real CLI on a real program."""

import fcntl
import json
import os
import resource
import select
import signal
import subprocess
import sys
import termios
import time

import pytest
from conftest import PROGRAMS, cli_env, default_signals, process_ended, run_cli, wait_until

from sstargets import funcs

from stepscope.store import Store
from stepscope.store.reader import load_run

ADD = "sstargets.funcs.add"
SIGNALS = str(PROGRAMS / "signals.py")


def _no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    default_signals()


def start(store, *prog_args, run_args=(), prog=SIGNALS, **kw):
    """`stepscope run` in a process group of its own; returns (stepscope process, program pid) once the
    program printed 'ready PID'."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "-q", *run_args, "--trace", ADD, "--",
                             sys.executable, prog, *prog_args], env=cli_env(store), cwd=store.parent, text=True,
                            start_new_session=True, preexec_fn=_no_core, **kw)
    line = proc.stdout.readline()
    assert line.startswith("ready"), (line, proc.stderr.read() if proc.stderr else "")
    return proc, int(line.split()[1])


def gone(pid: int, within: float = 30.0) -> bool:
    """The process ended (a zombie counts as ended) within ``within`` s; fails the test otherwise."""
    return wait_until(lambda: process_ended(pid), within, f"process {pid} to end")


@pytest.mark.parametrize("sig, to, handled", [
    ("SIGTERM", "process", True), ("SIGTERM", "group", True), ("SIGINT", "process", True),
    ("SIGINT", "group", True), ("SIGUSR1", "process", True), ("SIGHUP", "group", True),
    ("SIGTERM", "process", False), ("SIGINT", "group", False), ("SIGHUP", "process", False),
    ("SIGQUIT", "process", False), ("SIGUSR2", "group", False),
])
def test_signal_to_stepscope_reaches_the_program_once(store, sig, to, handled):
    signo = getattr(signal, sig)
    proc, child = start(store, *([sig] if handled else []))
    if to == "group":  # as `timeout` or `kill -- -PGID` do: stepscope and the program both get it
        os.killpg(proc.pid, signo)
    else:  # stepscope only: it passes it on
        os.kill(proc.pid, signo)
    out, err = proc.communicate(timeout=60)
    assert gone(child)
    data = load_run(Store(store))
    if handled:  # the program's own handler ran, once; it exited 3 and so did stepscope
        assert out == f"got {sig}\n", err
        assert proc.returncode == 3 and (data.run.status, data.run.exit_code) == ("error", 3)
    else:  # the program died by the signal, and stepscope by the same one
        assert proc.returncode == -signo, err
        status = {"SIGINT": "interrupted", "SIGTERM": "terminated"}.get(sig, "killed")
        assert (data.run.status, data.run.exit_code) == (status, 128 + signo)
        assert sum(1 for s in data.spans if s.name == ADD) == 5  # written before it died
    if sig == "SIGINT" and not handled:
        assert err.rstrip().endswith("KeyboardInterrupt")  # as python prints it
    else:
        assert err == ""


def _read_until(fd: int, proc, needle: bytes | None, timeout: float = 60) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (needle is None or needle not in buf):
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: every process holding the terminal is gone
                break
            if not chunk:
                break
            buf += chunk
        elif needle is None and proc.poll() is not None:
            break
    return buf


@pytest.mark.parametrize("handled", [True, False])
def test_ctrl_c_in_a_terminal_reaches_the_program_once(store, handled):
    """The terminal sends SIGINT to the whole foreground group: the program gets it once."""
    master, slave = os.openpty()

    def controlling_tty():
        _no_core()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "-q", "--trace", ADD, "--", sys.executable,
                             SIGNALS, *(["SIGINT"] if handled else [])], env=cli_env(store), cwd=store.parent,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=controlling_tty)
    os.close(slave)
    try:
        assert b"ready" in _read_until(master, proc, b"ready")
        os.write(master, b"\x03")  # Ctrl-C
        out = _read_until(master, proc, None)
        proc.wait(60)
    finally:
        os.close(master)
    data = load_run(Store(store))
    if handled:
        assert out.count(b"got SIGINT") == 1, out
        assert proc.returncode == 3 and data.run.status == "error"
    else:
        assert out.count(b"KeyboardInterrupt") == 1, out
        assert proc.returncode == -signal.SIGINT and data.run.status == "interrupted"


def adds_stored(store) -> int:
    """How many calls of ``ADD`` the store holds for the newest run (as a reader sees it while it runs)."""
    return sum(1 for s in load_run(Store(store)).spans if s.name == ADD)


def test_sigkill_of_stepscope_takes_the_program_with_it(store):
    proc, child = start(store, "SIGTERM")
    # a periodic flush (every second) has written the 5 calls: nothing flushes after the SIGKILL
    wait_until(lambda: adds_stored(store) >= 5, 60, lambda: f"a flush of the 5 calls (stored: {adds_stored(store)})")
    proc.kill()
    proc.wait(30)
    assert gone(child)  # PR_SET_PDEATHSIG
    data = load_run(Store(store))
    assert data.run.status == "lost"  # nobody is left to settle it: shown as lost, not running forever
    assert sum(1 for s in data.spans if s.name == ADD) == 5
    listed = json.loads(run_cli(["runs", "--json"], store).stdout)["runs"]
    assert listed[0]["status"] == "lost"


def test_flush_every_second_whatever_the_sampling_rate(store):
    """A crash loses at most the last flush interval, even when samples are 20 s apart."""
    proc, child = start(store, run_args=("--hz", "0.05"))
    # the deadline is the assertion (a timing one): a flush within 5 s of the calls (flushes come every second; 4 s
    # of room for a busy machine, where this waited a fixed 2.5 s), while one that waited for a sample would come
    # 20 s after the first
    wait_until(lambda: adds_stored(store) >= 5, 5, lambda: f"a flush of the 5 calls (stored: {adds_stored(store)})")
    os.kill(child, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    data = load_run(Store(store))
    assert (data.run.status, data.run.error) == ("killed", "SIGKILL (out of memory?)")
    assert sum(1 for s in data.spans if s.name == ADD) == 5


@pytest.fixture
def full_fs(tmp_path):
    """A 300 KiB tmpfs (root only): a real full disk."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_never_reaches_the_program(full_fs, tmp_path):
    prog = tmp_path / "many.py"
    prog.write_text("import time\nfrom sstargets import funcs\nfor tick in range(20):\n"
                    "    for i in range(300):\n        funcs.add(i)\n    time.sleep(0.25)\nprint('done')\n")
    store = full_fs / "store"
    r = run_cli(["run", "-q", "--trace", ADD, "--", sys.executable, str(prog)], store, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "done\n")  # the program ran to its end
    data = load_run(Store(store))
    spans, samples = len(data.spans), len(data.profile)
    assert 0 < spans < 6000 and data.run.status == "incomplete" and data.run.exit_code == 0
    # the program's stderr holds nothing of stepscope's; the CLI says it in one line
    assert r.stderr == f"stepscope: store full at {store}; kept {spans} spans, {samples} samples up to the failure\n"
    listed = json.loads(run_cli(["runs", "--json"], store, cwd=tmp_path).stdout)["runs"]
    assert (listed[0]["status"], listed[0]["error"]) == ("incomplete", f"store full at {store}")
    rep = run_cli(["report", "-o", str(tmp_path / "r.html"), "--json"], store, cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert '"status":"incomplete"' in (tmp_path / "r.html").read_text().replace(" ", "")


@pytest.mark.parametrize("ours, theirs", [
    ([sys.executable, "nosuch.py"], ["nosuch.py"]),
    ([sys.executable, "-m", "no.such.mod"], ["-m", "no.such.mod"]),
    (["-m", "nosuchmod"], ["-m", "nosuchmod"]),  # stepscope run -m MODULE
])
def test_program_that_cannot_start_ends_as_with_python(store, tmp_path, ours, theirs):
    base = subprocess.run([sys.executable, *theirs], cwd=tmp_path, env=cli_env(store), capture_output=True, text=True)
    assert base.returncode == (1 if "-m" in theirs else 2) and len(base.stderr.splitlines()) == 1
    r = run_cli(["run", *(["--"] if ours[0] != "-m" else []), *ours], store, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (base.returncode, "", base.stderr)  # python's one line, its code
    assert Store(store).list_runs() == []  # nothing stored
    r = run_cli(["run", "--json", "--", sys.executable, *theirs], store, cwd=tmp_path)
    assert json.loads(r.stdout) == {"run": None, "exit_code": base.returncode} and r.stderr == base.stderr


def test_json_file_leaves_stdout_to_the_program(store, tmp_path):
    prog = tmp_path / "talks.py"
    prog.write_text("from sstargets import funcs\nprint('hello from the program')\nprint(funcs.add(1))\n")
    out = tmp_path / "result.json"
    r = run_cli(["run", "--json-file", str(out), "--trace", ADD, "--", sys.executable, str(prog)], store, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"hello from the program\n{funcs.add(1)}\n"  # the program's stdout, untouched
    doc = json.loads(out.read_text())
    assert doc["run"]["run_id"] == load_run(Store(store)).run.id and doc["run"]["status"] == "ok"
    assert {s["name"]: s["count"] for s in doc["run"]["spans"]}[ADD] == 1
    assert "stepscope run " in r.stderr  # the summary still goes to stderr
    r = run_cli(["run", "-q", "--json-file", str(tmp_path / "no" / "such" / "dir.json"), "--", sys.executable,
                 str(prog)], store, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith("stepscope: error: --json-file")


NOBODY = 65534
SERVER_PROG = "import stepscope\nstepscope.start_server()\nprint('program goes on')\n"
HOOK_PROG = "from stepscope.record.processes import startup_hook\nstartup_hook()\nprint('program goes on')\n"


def as_user(uid: int, env: dict, code: str, server_env: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` as ``uid`` with the system python (the collect side is stdlib-only)."""
    env = dict(env, PYTHONPATH=str(PROGRAMS.parent.parent / "src"))
    if server_env:
        env["STEPSCOPE_SERVER"] = "1"
    return subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          user=uid, group=uid, extra_groups=[], cwd="/")


@pytest.fixture
def runtime_env():
    """A shared temp folder (1777, reachable by every user) as TMPDIR; the runtime folder env unset."""
    if os.getuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to act as two users) and /usr/bin/python3")
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="stepscope-test-", dir="/tmp"))
    base.chmod(0o755)
    tmp = base / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    env = {k: v for k, v in os.environ.items() if k not in ("STEPSCOPE_RUNTIME_DIR", "XDG_RUNTIME_DIR")}
    env["TMPDIR"] = str(tmp)
    yield tmp, env
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("server_env", [False, True])
def test_runtime_folder_of_another_user_never_hurts_the_program(runtime_env, server_env):
    tmp, env = runtime_env
    folder = tmp / f"stepscope-{NOBODY}"
    folder.mkdir(mode=0o700)  # today's folder, made first by another user (root here)
    # STEPSCOPE_SERVER=1: the start-up hook's call (stepscope-follow.pth is not in /usr/bin/python3's site-packages)
    code = HOOK_PROG if server_env else SERVER_PROG
    r = as_user(NOBODY, env, code, server_env)
    assert (r.returncode, r.stdout) == (0, "program goes on\n")
    assert r.stderr == (f"stepscope: control server not started: {folder} belongs to uid 0, not to you "
                        f"(uid {NOBODY})\n")
    assert list(folder.iterdir()) == []


def test_runtime_folder_others_can_write_or_a_link_is_refused(runtime_env):
    tmp, env = runtime_env
    tmp_path = tmp.parent
    folder = tmp / "stepscope-0"
    folder.mkdir()
    folder.chmod(0o777)
    r = subprocess.run([sys.executable, "-c", SERVER_PROG], env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "program goes on\n")
    assert r.stderr == f"stepscope: control server not started: {folder} is writable by others (mode 777)\n"
    folder.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    folder.symlink_to(tmp_path / "elsewhere")
    r = subprocess.run([sys.executable, "-c", SERVER_PROG], env=env, capture_output=True, text=True, timeout=60)
    assert r.stderr == f"stepscope: control server not started: {folder} is not a folder\n" and r.returncode == 0


def test_private_xdg_runtime_dir_is_used_first(runtime_env):
    tmp, env = runtime_env
    tmp_path = tmp.parent
    (tmp / f"stepscope-{NOBODY}").mkdir(mode=0o700)  # taken by root: not in the way
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    os.chown(xdg, NOBODY, NOBODY)
    env["XDG_RUNTIME_DIR"] = str(xdg)
    code = ("import json, os, stepscope\nfrom stepscope.program.client import find_server\n"
            "s = stepscope.start_server()\ninfo = find_server(os.getpid())\n"
            "print(s.info_file, oct(os.stat(s.info_file.parent).st_mode & 0o777), info['port'] == s.address[1])\n")
    r = as_user(NOBODY, env, code)
    assert r.returncode == 0 and r.stderr == ""
    path, mode, found = r.stdout.split()
    assert path.startswith(str(xdg / "stepscope") + "/") and mode == "0o700" and found == "True"
