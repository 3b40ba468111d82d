"""How ``stepscope run`` follows the Python processes a program starts (``stepscope.processes``), seen from the
program: a followed process that outlives the program (multiprocessing's resource tracker, a daemon) still finds
stepscope when the program has ended; the program's environment and ``sys.path`` are those of a plain run."""

import subprocess
import sys
import textwrap
import time

from conftest import cli_env

from stepscope.store.db import Store

#: a program that starts a Python child and ends at once: the child is still starting (stepscope's launcher
#: importing stepscope) as ``stepscope run`` settles the run; it waits for ``stepscope run`` (its grandparent) to
#: end, then starts a Python process of its own, calls a traced function and ends
LATE_CHILD = textwrap.dedent('''\
    import os, subprocess, sys
    CHILD = """
    import subprocess, sys, time
    def ended(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rpartition(")")[2].split()[0] == "Z"
        except OSError:
            return True
    def work():
        return 2
    deadline = time.monotonic() + 60
    while not ended(int(sys.argv[1])) and time.monotonic() < deadline:
        time.sleep(0.005)
    print(subprocess.run([sys.executable, "-c", "pass"]).returncode)
    work()
    print("child done", flush=True)
    """
    def work():
        return 1
    work()
    subprocess.Popen([sys.executable, "-c", CHILD, str(os.getppid())])
    print("parent done", flush=True)
''')


def _other_venv(tmp_path):
    """A bare virtual environment of this interpreter: not the one stepscope runs in (no stepscope installed)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv / "bin" / "python"


def test_a_child_that_outlives_the_program_finds_stepscope_to_its_end(tmp_path):
    """Issue 39: a spawn pool's resource tracker (a followed interpreter that lives until its program ends) printed
    a traceback from stepscope's launcher: ``stepscope run`` removed the folder it had put on ``PYTHONPATH`` for
    another interpreter as soon as the program ended, while the tracker was still importing stepscope from it.
    Several runs (to a deadline): each child must start and end quietly, and it and the process it starts once
    ``stepscope run`` has ended must be recorded as processes of the run."""
    python = _other_venv(tmp_path)
    (tmp_path / "late.py").write_text(LATE_CHILD)
    deadline = time.monotonic() + 30
    runs = 0
    while runs < 5 and (runs < 1 or time.monotonic() < deadline):
        store = tmp_path / f"store{runs}"
        r = subprocess.run([sys.executable, "-m", "stepscope", "run", "-q", "-t", "__main__.work", "--", str(python),
                            "late.py"], cwd=tmp_path, env=cli_env(store), capture_output=True, text=True, timeout=120)
        runs += 1
        assert (r.returncode, r.stderr) == (0, ""), f"run {runs}: {r.stderr}"
        assert r.stdout == "parent done\n0\nchild done\n", f"run {runs}"
        st = Store(store)
        try:
            (top,) = st.list_runs()
            kids = st.process_runs(top.id)
            assert [(k.command[1:2], k.status, k.exit_code) for k in kids] == [(["-c"], "ok", 0)] * 2, f"run {runs}"
        finally:
            st.close()

